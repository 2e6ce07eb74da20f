// HeldParts: with a per-host tier 0 and no shared tier (tier0_per_host with
// tier 0 alone), each rank's part writer is kept after tier 0 holds the
// part, so that its writer lock keeps gc off the part until the job's peer
// commit records it (SaveHandle::ReleasePart, include/sluice/peer.h). With
// a shared tier the drain that records the part there keeps it instead.
//
// Thread-safety: thread-safe. Close() releases what is held and holds
// nothing after: the pipeline calls it before its stores go.
#ifndef SLUICE_PIPELINE_HELD_PARTS_H_
#define SLUICE_PIPELINE_HELD_PARTS_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "checkpoint/checkpoint_writer.h"

namespace sluice {

class HeldParts {
 public:
  // Keeps `writer` (whose part's manifest is `manifest`) until Release.
  void Hold(const std::string& manifest, std::unique_ptr<RankWriter> writer) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_) writers_[manifest] = std::move(writer);
  }
  // Retires the writer of `manifest`: its lock goes (the part stays).
  void Release(const std::string& manifest) {
    std::lock_guard<std::mutex> lock(mu_);  // held: Close() waits for it
    writers_.erase(manifest);
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    writers_.clear();
  }

 private:
  std::mutex mu_;
  bool closed_ = false;
  std::map<std::string, std::unique_ptr<RankWriter>> writers_;
};

}  // namespace sluice

#endif  // SLUICE_PIPELINE_HELD_PARTS_H_
