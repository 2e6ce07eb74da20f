// Stager: the pipeline thread that copies lazy snapshots into staging
// (PendingCheckpoint::SnapshotLazily), one after another, in the order they
// were planned, on a copy pool of its own; and CopyTurns, the order every
// copy into staging (lazy or not) keeps.
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

// Copies into staging run one at a time, in the order their images were
// planned: the order the tier-0 writer takes them in, so a copy never waits
// for slabs that only a later image's write would free.
class CopyTurns {
 public:
  // The next ticket (take it where images are planned, under that lock).
  uint64_t Take();
  // Waits until every copy with an earlier ticket has ended.
  void Wait(uint64_t ticket);
  // The copy of `ticket` has ended (call exactly once per ticket).
  void End(uint64_t ticket);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ = 0;
  uint64_t serving_ = 0;
};

class Stager {
 public:
  // Each copy runs in its turn of `turns`, shared with Snapshot(). The
  // thread starts at the first Copy().
  Stager(uint32_t threads, CopyTurns& turns) : threads_(threads), turns_(turns) {}
  ~Stager() { Close(); }

  // Queues `copy` of `image` (planned with TrackItems(), holding `ticket`).
  // Call in ticket order.
  void Copy(uint64_t ticket, std::function<void(CopyPool&)> copy, const std::shared_ptr<StagedImage>& image);

  // Fails every image whose caller has not finished it (so that neither the
  // writer nor a queued copy waits for a finish that cannot come), then runs
  // what is queued. Call before stopping the writer.
  void Close();

 private:
  struct Queued {
    uint64_t ticket;
    std::function<void(CopyPool&)> copy;
  };
  void Loop();

  const uint32_t threads_;
  CopyTurns& turns_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> copies_;
  std::vector<std::weak_ptr<StagedImage>> unfinished_;
  bool closing_ = false;
  std::unique_ptr<CopyPool> pool_;
  std::thread thread_;
};

}  // namespace sluice

#endif  // SLUICE_PIPELINE_STAGER_H_
