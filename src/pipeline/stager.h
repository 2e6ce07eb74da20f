// Stager: the pipeline thread that copies lazy snapshots into staging
// (PendingCheckpoint::SnapshotLazily), one after another, in the order they
// were queued, on a copy pool of its own.
//
// Thread-safety: thread-safe.
#ifndef SLUICE_PIPELINE_STAGER_H_
#define SLUICE_PIPELINE_STAGER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "pipeline/staged_image.h"

namespace sluice {

class Stager {
 public:
  // `copy_mu` is held around each copy: the pipeline's one-copy-at-a-time
  // lock, shared with Snapshot(). The thread starts at the first Copy().
  Stager(uint32_t threads, std::mutex& copy_mu) : threads_(threads), copy_mu_(copy_mu) {}
  ~Stager() { Close(); }

  // Queues `copy` of `image` (planned with TrackItems()).
  void Copy(std::function<void(CopyPool&)> copy, const std::shared_ptr<StagedImage>& image);

  // Runs the copies queued, then fails every image whose caller has not
  // sealed it yet, so that the writer never waits for a seal that cannot
  // come. Call before stopping the writer.
  void Close();

 private:
  void Loop();

  const uint32_t threads_;
  std::mutex& copy_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void(CopyPool&)>> copies_;
  std::vector<std::weak_ptr<StagedImage>> unsealed_;
  bool closing_ = false;
  std::unique_ptr<CopyPool> pool_;
  std::thread thread_;
};

}  // namespace sluice

#endif  // SLUICE_PIPELINE_STAGER_H_
