// StreamWriter: the synchronous front of the write engine, for callers that
// hand over items one at a time from an ItemSource (Store::BeginCheckpoint's
// CheckpointWriter). Each item's bytes are read straight into the write
// queue's own buffers on the caller's thread, chunks are placed by the one
// planner (ChunkLayout), and the one WriteQueue keeps the writes in flight,
// checksums, pads and finishes. Chunks get their content hash too (this
// writer never references a base: it writes every chunk). Memory stays bounded by the queue depth
// times io_bytes, whatever the checkpoint's size.
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
#include "io/content_hash.h"
#include "sluice/backend.h"
#include "sluice/item_source.h"

namespace sluice {

class StreamWriter {
 public:
  // `object_name(seq)` names the seq-th data object.
  StreamWriter(Backend& backend, std::function<std::string(uint32_t)> object_name,
               uint64_t object_bytes, uint64_t io_bytes, uint64_t chunk_bytes);

  // Item bytes still to come, for preallocating objects (0: unknown).
  void SetExpectedBytes(uint64_t bytes) { expected_remaining_ = bytes; }

  // Appends `size` bytes from `source` as chunks; appends their refs to `out`.
  Status Append(uint64_t size, ItemSource& source, std::vector<ChunkRef>* out);

  // Writes the last partial buffer, waits for every write and makes every
  // object durable. After OK, objects() lists them with their sizes.
  Status Finish();
  // Waits for every write in flight (an abandoned save finishes nothing).
  // False if a write could not be reaped.
  bool WaitOutWrites() { return queue_.WaitOut(); }

  const std::vector<DataObjectRef>& objects() const { return queue_.objects(); }

 private:
  std::function<std::string(uint32_t)> object_name_;
  ChunkLayout layout_;
  uint64_t expected_remaining_ = 0;
  bool object_open_ = false;
  ContentHasher hasher_;  // each chunk's XXH3-128, so a later incremental save can match it
  WriteQueue queue_;
};

}  // namespace sluice

#endif  // SLUICE_ENGINE_STREAM_WRITER_H_
