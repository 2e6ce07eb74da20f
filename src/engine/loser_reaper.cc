#include "engine/loser_reaper.h"

#include <thread>
#include <utility>

namespace sluice {

LoserReaper& LoserReaper::Get() {
  static LoserReaper reaper;
  return reaper;
}

void LoserReaper::Add(std::unique_ptr<WritableObject> loser, std::shared_ptr<void> keep) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++busy_;
  }
  std::thread([this, loser = std::move(loser), keep = std::move(keep)]() mutable {
    bool quiet = true;
    while (loser->in_flight() > 0 && quiet) quiet = loser->Reap().ok();
    if (quiet) {
      (void)loser->Discard();  // best effort: what stays is garbage collection's
      loser.reset();
      keep.reset();
    } else {
      // A write that could not be reaped may still read its memory: keep
      // it, and the object, for good rather than free what the kernel may
      // touch.
      (void)loser.release();
      new std::shared_ptr<void>(std::move(keep));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--busy_ == 0) idle_cv_.notify_all();
  }).detach();
}

void LoserReaper::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return busy_ == 0; });
}

size_t LoserReaper::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

LoserReaper::~LoserReaper() { WaitIdle(); }

}  // namespace sluice
