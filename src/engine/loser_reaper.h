// LoserReaper: where the losers of hedges go that their write queue does not
// wait for (WriteQueueOptions::buffers_stay_mapped): each one's writes still
// in flight are waited out on a thread of its own (so that one hung device
// holds up no other), then the object is discarded (WritableObject::
// Discard). One per process.
//
// Thread-safety: thread-safe.
#ifndef SLUICE_ENGINE_LOSER_REAPER_H_
#define SLUICE_ENGINE_LOSER_REAPER_H_

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>

#include "sluice/backend.h"

namespace sluice {

class LoserReaper {
 public:
  static LoserReaper& Get();

  // Takes `loser`, whose writes may be in flight; `keep` (the memory they
  // read, where the reaper must keep it) is held until they are done.
  void Add(std::unique_ptr<WritableObject> loser, std::shared_ptr<void> keep);

  // Blocks until every loser added so far is done: before memory their
  // writes may read is unmapped.
  void WaitIdle();

  // Losers being reaped now.
  size_t busy() const;

  ~LoserReaper();  // waits, so that no reaping thread outlives the process's statics

 private:
  LoserReaper() = default;
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  size_t busy_ = 0;  // GUARDED_BY(mu_)
};

}  // namespace sluice

#endif  // SLUICE_ENGINE_LOSER_REAPER_H_
