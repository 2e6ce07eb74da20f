// WriteQueue: the one place where writes are kept in flight. Every path that
// writes data objects (a save's tier-0 writes from staging, the synchronous
// streaming writer, drains and repairs) hands its buffers to a WriteQueue,
// which owns what those paths used to repeat: the queue depth across object
// boundaries, per-write completion (the caller's buffer comes back through
// `on_complete`), the token bucket, tail padding, the chunk checksum
// (through the backend's TransportChecksum where it offers one), Finish, and
// waiting out every write still in flight after an error.
//
// It is also the one place where writes are hedged. On a backend with a
// Placement (sluice/backend.h) an object begun `placed` is stored under the
// name the placement picks (away from placements found slow), and while its
// bytes are held (its buffers come back only once it is finished, while it
// is within policy().max_held_bytes) a write late past the placement's deadline gets
// the object written again, whole, under a sibling name in another
// placement. The first copy holding every byte is finished and listed by
// objects(); the others (losers) are discarded once their writes are done,
// by the queue when it is destroyed or in the background (LoserReaper, see
// buffers_stay_mapped), or left to garbage collection if the process dies
// first.
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
// Write/Reap/Finish/WaitOut and the destructor.
#ifndef SLUICE_ENGINE_WRITE_QUEUE_H_
#define SLUICE_ENGINE_WRITE_QUEUE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "format/manifest.h"
#include "sluice/aligned_buffer.h"
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
  // At most this many bytes of written buffers are held for hedges at once
  // (the caller's and the queue's own); 0: no limit but the placement's
  // per-object one. A caller whose buffers are scarce (a staging arena)
  // keeps it well under what it has.
  uint64_t max_held_bytes = 0;
  // The caller's buffers stay mapped until LoserReaper::WaitIdle() returns
  // (a staging arena's slabs), though the caller may reuse them once they
  // come back: a hedge's loser, whose bytes nobody reads, then goes on
  // writing from them in the background (LoserReaper) instead of being
  // waited for. Otherwise losers are waited for by WaitOut and the
  // destructor.
  bool buffers_stay_mapped = false;
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
  // `size_hint` lets the backend preallocate (0: unknown). `placed`: on a
  // backend with a Placement, it may be stored under a name beside `name`
  // (Placement::Place), and hedged; objects() lists the name it ends under.
  Status BeginObject(const std::string& name, uint64_t size_hint, bool placed = false);

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
  // object is durable at its final size and listed by objects(). Losers of
  // hedges may still be writing: the buffers they read come back by
  // WaitOut or the destructor.
  Status Finish();

  // Waits out every write in flight (losers' too) without finishing
  // anything more, so that no caller buffer is read any more. False if a
  // write could not be reaped (its buffer may still be in use: the caller
  // must not reuse it).
  bool WaitOut();

  const Status& error() const { return error_; }
  // Objects finished so far, in the order they were begun, under the names
  // they are stored under.
  const std::vector<DataObjectRef>& objects() const { return finished_; }

 private:
  using Clock = std::chrono::steady_clock;
  // One Write(): the caller's bytes, and who still reads them.
  struct Piece {
    uint64_t offset = 0;
    void* data = nullptr;
    size_t len = 0;
    uint64_t tag = 0;      // the caller's
    unsigned pins = 0;     // writes of it in flight, over all copies
    bool returned = false; // on_complete(tag) was called
    bool counted = false;  // its bytes were counted written
    bool bucket = false;   // holds a bucket slot until its first write is reaped
  };
  // Where an object's pieces go: its first copy, or a hedge. A write's
  // backend tag is its piece's index.
  struct Copy {
    std::unique_ptr<WritableObject> object;
    std::string name;
    std::vector<Clock::time_point> sent_at;  // per piece sent
    std::vector<bool> done;                  // per piece sent
    size_t next = 0;   // pieces [0, next) were sent to it
    size_t done_count = 0;
    Status error;
    bool late = false;  // a write of it was found late (hedged, or refused)
  };
  struct Open {
    std::string name;  // the caller's
    std::vector<Copy> copies;
    size_t target = 0;  // new pieces go to copies[target]
    std::shared_ptr<std::vector<Piece>> pieces;  // shared with its losers
    uint64_t size_hint = 0;
    bool placed = false;   // named by the placement, which hears how its writes went
    bool hold = false;     // pieces come back once the object is decided
    uint64_t held = 0;     // bytes of pieces held
    uint64_t final_size = 0;
    bool ended = false;
  };
  // A copy that lost, with writes still in flight, and the pieces they read.
  struct Loser {
    std::shared_ptr<std::vector<Piece>> pieces;
    Copy copy;
  };
  size_t Depth() const;
  // Writes the queue's current buffer (`tail`: the object's last write).
  Status FlushOwned(bool tail);
  // The caller's (or the queue's own) buffer of `tag` is free again.
  void Completed(uint64_t tag);
  // Hands piece `p` back unless a write still reads it or it is held.
  void MaybeReturn(Piece& p, bool held);
  void Fail(const Status& st);
  // Finishes ended objects at the front whose winner holds every byte.
  void FinishReady();
  // Sends `open`'s pieces to copy `c` from its `next`, while it has room.
  Status Send(Open& open, size_t c);
  // Reaps every completion ready now, waiting for none.
  Status ReapReady();
  // What ReapOne does with one completion of `open`'s copy `c`.
  void Apply(Open& open, size_t c, const IoCompletion& done);
  // Makes another copy that can still take every piece the target (whose
  // write failed); false when none is left.
  bool Retarget(Open& open);
  // Copy `c` of `open` was late: a hedge, unless refused.
  void Late(Open& open, size_t c);
  // Stops holding `open`'s pieces (too many bytes): what is done goes back.
  void StopHolding(Open& open);
  // Reaps what losers' writes completed (blocking: until all have).
  void ReapLosers(bool block);
  // Copy `loser` of `open` lost: waited for here, or handed to the
  // LoserReaper; the pieces it read are no longer pinned by it.
  void Lose(Open& open, Copy loser);
  bool Hedging(const Open& open) const;

  Backend& backend_;
  Placement* const placement_;  // null where the backend has none
  WriteQueueOptions options_;
  size_t align_;
  std::deque<Open> open_;  // oldest first; the back one is current unless ended
  size_t in_flight_ = 0;   // writes of open objects (not losers') in flight
  uint64_t held_ = 0;      // bytes held over all open objects
  bool stuck_ = false;      // a write could not be reaped (its buffer stays lent)
  bool abandoned_ = false;  // waited out: objects are no longer finished
  Status error_;
  std::vector<DataObjectRef> finished_;
  std::vector<Loser> losers_;  // waited for here (not buffers_stay_mapped)
  std::vector<std::unique_ptr<WritableObject>> to_discard_;  // losers whose writes are done
  // The queue's own buffers (Space/Fill). Their writes are tagged
  // kOwnedTag | index.
  static constexpr uint64_t kOwnedTag = 1ull << 63;
  uint64_t buffer_bytes_ = 0;
  // Shared with losers the LoserReaper waits for, which may read them.
  std::shared_ptr<std::vector<AlignedBuffer>> buffers_;
  std::vector<size_t> free_;
  int current_ = -1;       // buffer being filled, -1 if none
  size_t fill_ = 0;        // bytes in it
  uint64_t appended_ = 0;  // the current object's offset where it begins
};

}  // namespace sluice

#endif  // SLUICE_ENGINE_WRITE_QUEUE_H_
