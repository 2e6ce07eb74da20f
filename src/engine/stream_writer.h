// StreamWriter: the synchronous front of the write engine, for callers that
// hand over items one at a time from an ItemSource (Store::BeginCheckpoint's
// CheckpointWriter). It pulls each item's bytes into a small ring of aligned
// I/O buffers on the caller's thread, places chunks with the one planner
// (ChunkLayout) and hands each full buffer to the one WriteQueue, which
// keeps the writes in flight, checksums, pads and finishes. Memory stays
// bounded by the queue depth times io_bytes, whatever the checkpoint's size.
//
// Thread-safety: one thread.
#ifndef SLUICE_ENGINE_STREAM_WRITER_H_
#define SLUICE_ENGINE_STREAM_WRITER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/chunk_layout.h"
#include "engine/write_queue.h"
#include "format/manifest.h"
#include "io/aligned_buffer.h"
#include "sluice/backend.h"
#include "sluice/item_source.h"

namespace sluice {

class StreamWriter {
 public:
  // `object_name(seq)` names the seq-th data object.
  StreamWriter(Backend& backend, std::function<std::string(uint32_t)> object_name,
               uint64_t object_bytes, uint64_t io_bytes, uint64_t chunk_bytes);
  // Waits out every write in flight (an abandoned save finishes nothing).
  ~StreamWriter();

  // Item bytes still to come, for preallocating objects (0: unknown).
  void SetExpectedBytes(uint64_t bytes) { expected_remaining_ = bytes; }

  // Appends `size` bytes from `source` as chunks; appends their refs to `out`.
  Status Append(uint64_t size, ItemSource& source, std::vector<ChunkRef>* out);

  // Writes the last partial buffer, waits for every write and makes every
  // object durable. After OK, objects() lists them with their sizes.
  Status Finish();
  // Waits for every write in flight, so that none reads a buffer any more.
  // False if a write could not be reaped.
  bool WaitOutWrites() { return queue_.WaitOut(); }

  const std::vector<DataObjectRef>& objects() const { return queue_.objects(); }

 private:
  Status TakeBuffer();
  Status FlushBuffer(bool tail);
  Status EndObject(uint64_t final_size);

  std::function<std::string(uint32_t)> object_name_;
  uint64_t io_bytes_;
  ChunkLayout layout_;
  uint64_t expected_remaining_ = 0;
  // Buffers, and the free list the queue's completions fill, are declared
  // before the queue: its destructor waits out writes from them.
  std::vector<AlignedBuffer> buffers_;
  std::vector<size_t> free_;
  WriteQueue queue_;
  bool object_open_ = false;
  uint64_t flushed_offset_ = 0;  // object offset where the current buffer begins
  int current_ = -1;             // buffer being filled
  size_t fill_ = 0;              // bytes in it
};

}  // namespace sluice

#endif  // SLUICE_ENGINE_STREAM_WRITER_H_
