// ChunkLayout: the one planner of where chunks go, for every writer. Items
// are cut into chunks of at most chunk_bytes, each item on its own (a chunk
// never holds bytes of two items); chunks are packed back to back into data
// objects, and a new object begins before one would pass object_bytes (an
// object holds at least one chunk). doc/format.md describes the result.
//
// Thread-safety: one thread.
#ifndef SLUICE_ENGINE_CHUNK_LAYOUT_H_
#define SLUICE_ENGINE_CHUNK_LAYOUT_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "format/manifest.h"

namespace sluice {

class ChunkLayout {
 public:
  // `object_bytes` is the store's wish, already clamped to the backend's
  // maximum by the caller; raised to one chunk if smaller.
  ChunkLayout(uint64_t chunk_bytes, uint64_t object_bytes)
      : chunk_bytes_(chunk_bytes), object_bytes_(std::max(object_bytes, chunk_bytes)) {}

  // Places the next chunk of an item that has `remaining` (> 0) bytes left
  // to place: its object and offset (crc32c left 0). `*new_object` is set
  // when the chunk begins a new object.
  ChunkRef Place(uint64_t remaining, bool* new_object) {
    const uint64_t len = std::min(chunk_bytes_, remaining);
    *new_object = sizes_.empty() || sizes_.back() + len > object_bytes_;
    if (*new_object) sizes_.push_back(0);
    ChunkRef ref{static_cast<uint32_t>(sizes_.size() - 1), sizes_.back(),
                 static_cast<uint32_t>(len), 0, false, {}};
    sizes_.back() += len;
    return ref;
  }

  // Logical size of every object begun so far.
  const std::vector<uint64_t>& object_sizes() const { return sizes_; }
  uint64_t object_bytes() const { return object_bytes_; }

 private:
  uint64_t chunk_bytes_;
  uint64_t object_bytes_;
  std::vector<uint64_t> sizes_;
};

}  // namespace sluice

#endif  // SLUICE_ENGINE_CHUNK_LAYOUT_H_
