// AlignedBuffer: a page-aligned heap buffer for O_DIRECT I/O, touched once at
// allocation so that first-touch page faults are not paid on the data path.
//
// Thread-safety: none; move-only.
#ifndef SLUICE_ALIGNED_BUFFER_H_
#define SLUICE_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdint>

#include "sluice/status.h"

namespace sluice {

class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 4096;

  AlignedBuffer() = default;
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Allocates `size` bytes (rounded up to kAlignment), pre-faulted.
  // IOError if the memory cannot be had.
  static Result<AlignedBuffer> Allocate(size_t size);

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// A process-wide cache of idle AlignedBuffers, so that each checkpoint does
// not pay page faults on fresh I/O buffers (about 0.3 s per GiB here). Holds
// at most kMaxCachedBytes; beyond that buffers are freed.
//
// Thread-safety: thread-safe.
class BufferPool {
 public:
  static constexpr size_t kMaxCachedBytes = 512ull << 20;
  // A buffer of at least `size` bytes (exactly AlignUp(size)), reused if one
  // is cached.
  static Result<AlignedBuffer> Take(size_t size);
  // Returns a buffer for reuse. REQUIRES: no I/O in flight on it.
  static void Give(AlignedBuffer buffer);
};

inline uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
inline uint64_t AlignDown(uint64_t v, uint64_t a) { return v / a * a; }

}  // namespace sluice

#endif  // SLUICE_ALIGNED_BUFFER_H_
