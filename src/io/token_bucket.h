// TokenBucket: caps the byte rate and the concurrency of one background flow
// (drain, and later scrub and rebuild) into one tier.
//
// Acquire(n) blocks until n bytes' worth of tokens exist and a concurrency
// slot is free; Release() gives the slot back when the I/O completes. Tokens
// accrue at `rate` bytes/s up to `burst` bytes. The bucket starts empty, so a
// flow that starts cannot burst past the cap: over any window of W seconds
// the bytes granted stay within rate*W + burst. Requests larger than the
// burst are granted once the bucket is full and leave it in debt, which the
// following requests pay back, so the long-run rate stays exact.
//
// Thread-safety: thread-safe.
#ifndef SLUICE_IO_TOKEN_BUCKET_H_
#define SLUICE_IO_TOKEN_BUCKET_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace sluice {

class TokenBucket {
 public:
  // rate 0: no byte cap. max_concurrent 0: no concurrency cap.
  TokenBucket(uint64_t rate_bytes_per_sec, uint64_t burst_bytes, uint32_t max_concurrent);

  void Acquire(uint64_t bytes);
  // The same, giving up (false, nothing held) once `stop` turns true: seen
  // within 50 ms however long the wait would be.
  bool Acquire(uint64_t bytes, const std::atomic<bool>* stop);
  void Release();
  // True if Acquire(bytes) would block now (a hint: others may race).
  bool WouldWait(uint64_t bytes);

  uint64_t rate() const { return rate_; }
  uint32_t max_concurrent() const { return max_concurrent_; }
  // Bytes granted so far.
  uint64_t granted() const;
  // Seconds callers spent blocked in Acquire (for tokens or a slot), summed
  // over callers: the time this flow was throttled.
  double waited_seconds() const;

 private:
  using Clock = std::chrono::steady_clock;
  void Refill(Clock::time_point now);

  const uint64_t rate_;
  const double burst_;
  const uint32_t max_concurrent_;
  mutable std::mutex mu_;
  std::condition_variable slot_freed_;
  double tokens_ = 0;  // may go negative (debt) after a request over the burst
  Clock::time_point last_;
  uint32_t in_use_ = 0;
  uint64_t granted_ = 0;
  std::atomic<uint64_t> waited_ns_{0};
};

}  // namespace sluice

#endif  // SLUICE_IO_TOKEN_BUCKET_H_
