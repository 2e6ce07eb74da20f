// DataWriter: appends chunks to a sequence of large data objects through a
// ring of aligned I/O buffers, so the backend sees big sequential writes with
// queue_depth of them in flight whatever the item sizes are. Where the
// backend takes writes at any address (io_alignment 1) and a source lends
// its memory (ItemSource::Lend), large pieces are written straight from it
// instead of through a buffer. Chunks are
// packed back to back (no per-chunk padding); only an object's tail is padded
// to the backend's alignment and then trimmed by Finish. A chunk never spans
// two objects; objects roll over before object_bytes. At a rollover the next
// object is opened while the previous one's writes are still in flight (it is
// finished once they are reaped), so the queue stays full across object
// boundaries; at most one such previous object is outstanding.
//
// Thread-safety: one thread.
#ifndef SLUICE_PIPELINE_DATA_WRITER_H_
#define SLUICE_PIPELINE_DATA_WRITER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "format/manifest.h"
#include "io/aligned_buffer.h"
#include "sluice/backend.h"
#include "sluice/store.h"

namespace sluice {

class DataWriter {
 public:
  // `object_name(seq)` names the seq-th data object.
  DataWriter(Backend& backend, std::function<std::string(uint32_t)> object_name,
             uint64_t object_bytes, uint64_t io_bytes, uint64_t chunk_bytes);
  ~DataWriter();

  void SetExpectedBytes(uint64_t bytes) { expected_remaining_ = bytes; }

  // Appends `size` bytes from `source` as chunks; appends their refs to `out`.
  Status Append(uint64_t size, ItemSource& source, std::vector<ChunkRef>* out);

  // Writes the last partial buffer, waits for every write and makes every
  // object durable. After OK, objects() lists them with their sizes.
  Status Finish();
  // Waits for every write in flight (of an abandoned save: nothing is
  // finished), so that none reads a buffer or lent memory any more. False
  // if a write could not be reaped (it may still be in flight).
  bool WaitOutWrites();

  const std::vector<DataObjectRef>& objects() const { return objects_; }

 private:
  Status OpenNextObject(uint64_t first_chunk);
  Status FlushCurrentBuffer(bool last);
  // Reaps until the current object can take one more write and fewer than
  // its queue depth are in flight across all objects.
  Status WaitForWriteSlot();
  // Writes `len` bytes of memory an item source lent, at the current
  // object's end. REQUIRES: nothing buffered (fill_ == 0).
  Status StartLentWrite(const void* data, size_t len);
  Status GetFreeBuffer();
  Status ReapOne();
  // Flushes the current object's tail and moves it to draining_.
  Status RetireObject();
  // Reaps every write of the oldest draining object, then finishes it.
  Status DrainOldest();
  // Finishes (unless a write failed) and drops the oldest draining object,
  // which has nothing in flight.
  Status FinishOldest();

  Backend& backend_;
  std::function<std::string(uint32_t)> object_name_;
  uint64_t object_bytes_;
  uint64_t io_bytes_;
  uint64_t chunk_bytes_;
  size_t align_;
  uint64_t expected_remaining_ = 0;

  // Buffers are declared before the object so the object (whose engine
  // waits for writes in flight) is destroyed first.
  std::vector<AlignedBuffer> buffers_;
  std::unique_ptr<WritableObject> object_;
  // Earlier objects, oldest first, whose writes are still in flight.
  struct Draining {
    std::unique_ptr<WritableObject> object;
    uint64_t size;  // logical bytes appended
    size_t index;   // into objects_
  };
  std::deque<Draining> draining_;
  uint64_t object_size_ = 0;      // logical bytes appended to the current object
  uint64_t flushed_offset_ = 0;   // object offset where the current buffer begins
  std::vector<size_t> free_;      // indices of idle buffers
  int current_ = -1;              // buffer being filled
  size_t fill_ = 0;               // bytes in the current buffer
  Status error_;                  // first write error, sticky
  std::vector<DataObjectRef> objects_;
};

}  // namespace sluice

#endif  // SLUICE_PIPELINE_DATA_WRITER_H_
