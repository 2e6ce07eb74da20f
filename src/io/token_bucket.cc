#include "io/token_bucket.h"

#include <algorithm>
#include <thread>

namespace sluice {

TokenBucket::TokenBucket(uint64_t rate_bytes_per_sec, uint64_t burst_bytes, uint32_t max_concurrent)
    : rate_(rate_bytes_per_sec),
      burst_(static_cast<double>(std::max<uint64_t>(burst_bytes, 1))),
      max_concurrent_(max_concurrent),
      last_(Clock::now()) {}

void TokenBucket::Refill(Clock::time_point now) {
  double elapsed = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  tokens_ = std::min(burst_, tokens_ + elapsed * static_cast<double>(rate_));
}

void TokenBucket::Acquire(uint64_t bytes) { (void)Acquire(bytes, nullptr); }

bool TokenBucket::Acquire(uint64_t bytes, const std::atomic<bool>* stop) {
  auto stopped = [&] { return stop != nullptr && stop->load(); };
  // With a stop flag, waits are cut into slices so that a stop is seen
  // within one.
  const auto slice = std::chrono::milliseconds(50);
  const auto entered = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  // Time spent waiting (for a slot or for tokens), whatever the outcome.
  struct WaitClock {
    TokenBucket* b;
    Clock::time_point entered;
    bool waited = false;
    ~WaitClock() {
      if (waited) b->waited_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - entered).count();
    }
  } wait_clock{this, entered};
  if (max_concurrent_ > 0) {
    while (in_use_ >= max_concurrent_) {
      if (stopped()) return false;
      wait_clock.waited = true;
      if (stop != nullptr) {
        slot_freed_.wait_for(lock, slice);
      } else {
        slot_freed_.wait(lock);
      }
    }
  }
  ++in_use_;
  if (rate_ > 0) {
    // A request is granted when the bucket holds its bytes, or is full for
    // one bigger than the burst (then it goes into debt).
    const double need = std::min(static_cast<double>(bytes), burst_);
    for (;;) {
      Refill(Clock::now());
      if (tokens_ >= need) break;
      if (stopped()) {
        --in_use_;
        lock.unlock();
        slot_freed_.notify_one();
        return false;
      }
      wait_clock.waited = true;
      double wait_s = (need - tokens_) / static_cast<double>(rate_);
      if (stop != nullptr) wait_s = std::min(wait_s, 0.05);
      // Sleep without the lock so other flows' Release() is not held up;
      // the wait is recomputed after, since others may have taken tokens.
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::duration<double>(std::max(wait_s, 0.0001)));
      lock.lock();
    }
    tokens_ -= static_cast<double>(bytes);
  }
  granted_ += bytes;
  return true;
}

void TokenBucket::Release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_use_ > 0) --in_use_;
  }
  slot_freed_.notify_one();
}

bool TokenBucket::WouldWait(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (max_concurrent_ > 0 && in_use_ >= max_concurrent_) return true;
  if (rate_ == 0) return false;
  Refill(Clock::now());
  return tokens_ < std::min(static_cast<double>(bytes), burst_);
}

double TokenBucket::waited_seconds() const { return waited_ns_.load(std::memory_order_relaxed) / 1e9; }

uint64_t TokenBucket::granted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return granted_;
}

}  // namespace sluice
