// WriteQueue: the one place where writes are kept in flight. Every path that
// writes data objects (a save's tier-0 writes from staging, the synchronous
// streaming writer, drains and repairs) hands its buffers to a WriteQueue,
// which owns what those paths used to repeat: the queue depth across object
// boundaries, per-write completion (the caller's buffer comes back through
// `on_complete`), the token bucket, tail padding, the chunk checksum
// (through the backend's TransportChecksum where it offers one), Finish, and
// waiting out every write still in flight after an error.
//
// Bytes reach it in one of two ways: Write() of the caller's own buffers (a
// staging slab), or Space()/Fill() into a ring of aligned buffers the queue
// owns (options.buffer_bytes), for callers that produce bytes piecewise (an
// item source, a chunk stream); a full buffer is written at once and the
// last, partial one when the object ends.
//
// Objects are written in order, front to back. BeginObject() may be called
// while the previous object's writes are still in flight: that object is
// finished (made durable) once they are reaped, so the queue stays full
// across object boundaries.
//
// Thread-safety: one thread. `on_complete` runs on that thread, inside
// Write/Reap/Finish/WaitOut.
#ifndef SLUICE_ENGINE_WRITE_QUEUE_H_
#define SLUICE_ENGINE_WRITE_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "format/manifest.h"
#include "io/aligned_buffer.h"
#include "io/token_bucket.h"
#include "sluice/backend.h"
#include "sluice/metrics.h"

namespace sluice {

struct WriteQueueOptions {
  // Paces every write (Acquire before it starts, Release when it is reaped)
  // and caps how many are in flight (its max_concurrent). Optional.
  TokenBucket* bucket = nullptr;
  // Bytes whose writes completed, counted as they are reaped. Optional.
  std::atomic<uint64_t>* written = nullptr;
  // At most this many writes in flight across all objects; 0: the
  // backend's queue depth.
  size_t max_in_flight = 0;
  // The caller's buffer of the write tagged `tag` is free again (the write
  // completed, failed, or was waited out). Optional.
  std::function<void(uint64_t tag)> on_complete;
  // Size of each of the queue's own buffers for Space()/Fill() (rounded up
  // to 4 KiB and the backend's alignment); 0: Write() only.
  uint64_t buffer_bytes = 0;
  // Once it turns true, a write waiting for the bucket fails with
  // Unavailable instead of waiting out the cap. Optional.
  const std::atomic<bool>* stop = nullptr;
  // Also counts completed bytes, for the process's metrics. Optional.
  Counter* written_total = nullptr;
};

class WriteQueue {
 public:
  WriteQueue(Backend& backend, WriteQueueOptions options);
  // Waits out every write in flight; finishes nothing (an abandoned write's
  // objects are left to the caller or gc).
  ~WriteQueue();
  WriteQueue(const WriteQueue&) = delete;
  WriteQueue& operator=(const WriteQueue&) = delete;

  size_t alignment() const { return align_; }

  // Creates object `name` (AlreadyExists if it exists) and makes it the
  // current object; the previous one must have been ended (EndObject).
  // `size_hint` lets the backend preallocate (0: unknown). `relocatable`:
  // the backend may store it under another name beside `name`
  // (CreateOptions::relocatable); objects() then lists that name.
  Status BeginObject(const std::string& name, uint64_t size_hint, bool relocatable = false);

  // The chunk checksum of bytes about to be written to the current object:
  // CRC32C extended from `crc` over `len` bytes (see
  // TransportChecksum::ChecksumForWrite; the bytes must then be written by the
  // next Write and stay unchanged until it completes).
  uint32_t Checksum(uint32_t crc, const void* data, size_t len);

  // Starts writing `len` bytes from `data` at `offset` of the current
  // object; `data` must stay valid until on_complete(tag). Blocks (reaping)
  // while the queue is full. `tail`: the object's last write, which may be
  // unaligned; it is padded with zeros up to the backend's alignment, so
  // REQUIRES `data` to have room for AlignUp(len, alignment()) bytes. On
  // error, on_complete(tag) has been called (or will be, if the write
  // started) and the error is sticky.
  Status Write(uint64_t offset, void* data, size_t len, uint64_t tag, bool tail);

  // Room in the queue's current buffer for the current object: at least
  // one byte, written there by the caller and then counted by Fill().
  // REQUIRES options.buffer_bytes > 0; not mixed with Write() in one object.
  Result<std::pair<uint8_t*, size_t>> Space();
  // `n` bytes were put at Space(); a full buffer is written at once.
  Status Fill(size_t n);

  // Ends the current object at `final_size` logical bytes (writing the
  // queue's partial buffer first); it is finished (trimmed to that size and
  // made durable) once its writes are reaped.
  Status EndObject(uint64_t final_size);

  // Reaps one completion (REQUIRES in_flight() > 0); returns the sticky error.
  Status ReapOne();
  size_t in_flight() const { return in_flight_; }

  // Reaps every write and finishes every ended object. After OK, every
  // object is durable at its final size and listed by objects().
  Status Finish();

  // Waits out every write in flight without finishing anything, so that no
  // caller buffer is read any more. False if a write could not be reaped
  // (its buffer may still be in use: the caller must not reuse it).
  bool WaitOut();

  const Status& error() const { return error_; }
  // Objects finished so far, in the order they were begun, under the names
  // they are stored under.
  const std::vector<DataObjectRef>& objects() const { return finished_; }

 private:
  struct Open {
    std::unique_ptr<WritableObject> object;
    std::string name;
    uint64_t final_size = 0;
    bool ended = false;
  };
  size_t Depth() const;
  // Writes the queue's current buffer (`tail`: the object's last write).
  Status FlushOwned(bool tail);
  // The on_complete of every write: the queue's own buffers come back to
  // its free list, the caller's go to options_.on_complete.
  void Completed(uint64_t tag);
  void Fail(const Status& st);
  // Finishes ended objects at the front that have nothing in flight.
  void FinishReady();

  Backend& backend_;
  WriteQueueOptions options_;
  size_t align_;
  std::deque<Open> open_;  // oldest first; the back one is current unless ended
  size_t in_flight_ = 0;
  bool stuck_ = false;      // a write could not be reaped (its buffer stays lent)
  bool abandoned_ = false;  // waited out: objects are no longer finished
  Status error_;
  std::vector<DataObjectRef> finished_;
  // The queue's own buffers (Space/Fill). Their writes are tagged
  // kOwnedTag | index.
  static constexpr uint64_t kOwnedTag = 1ull << 63;
  uint64_t buffer_bytes_ = 0;
  std::vector<AlignedBuffer> buffers_;
  std::vector<size_t> free_;
  int current_ = -1;       // buffer being filled, -1 if none
  size_t fill_ = 0;        // bytes in it
  uint64_t appended_ = 0;  // the current object's offset where it begins
};

}  // namespace sluice

#endif  // SLUICE_ENGINE_WRITE_QUEUE_H_
