#include "engine/stream_writer.h"

#include <algorithm>

#include "sluice/aligned_buffer.h"

namespace sluice {

StreamWriter::StreamWriter(Backend& backend, std::function<std::string(uint32_t)> object_name,
                           uint64_t object_bytes, uint64_t io_bytes, uint64_t chunk_bytes)
    : object_name_(std::move(object_name)),
      layout_(chunk_bytes, std::min(object_bytes, backend.caps().max_object_bytes)),
      // The queue's own buffers held for hedges: 64 MiB at most at once.
      queue_(backend, WriteQueueOptions{nullptr, nullptr, 0, nullptr, io_bytes, nullptr, nullptr, 64ull << 20}) {}

Status StreamWriter::Append(uint64_t size, ItemSource& source, std::vector<ChunkRef>* out) {
  RETURN_IF_ERROR(queue_.error());
  uint64_t remaining = size;
  while (remaining > 0) {
    bool new_object = false;
    ChunkRef ref = layout_.Place(remaining, &new_object);
    if (new_object) {
      const auto& sizes = layout_.object_sizes();
      if (object_open_) RETURN_IF_ERROR(queue_.EndObject(sizes[sizes.size() - 2]));
      uint64_t hint = 0;
      if (expected_remaining_ > 0) {
        hint = AlignUp(std::min(layout_.object_bytes(), std::max<uint64_t>(expected_remaining_, ref.length)),
                       queue_.alignment());
      }
      RETURN_IF_ERROR(
          queue_.BeginObject(object_name_(static_cast<uint32_t>(sizes.size() - 1)), hint, /*placed=*/true));
      object_open_ = true;
    }
    uint32_t crc = 0;
    hasher_.Reset();
    uint64_t left = ref.length;
    while (left > 0) {
      ASSIGN_OR_RETURN(auto space, queue_.Space());
      size_t want = static_cast<size_t>(std::min<uint64_t>(left, space.second));
      ASSIGN_OR_RETURN(size_t got, source.Read(space.first, want));
      if (got == 0 || got > want) {
        return Status::InvalidArgument("item source delivered " +
                                       std::to_string(size - remaining + (ref.length - left)) +
                                       " bytes, " + std::to_string(size) + " were declared");
      }
      crc = queue_.Checksum(crc, space.first, got);
      hasher_.Update(space.first, got);
      left -= got;
      RETURN_IF_ERROR(queue_.Fill(got));
    }
    ref.crc32c = crc;
    ref.hash = hasher_.Digest();
    ref.has_hash = true;
    out->push_back(ref);
    remaining -= ref.length;
    expected_remaining_ = expected_remaining_ > ref.length ? expected_remaining_ - ref.length : 0;
  }
  return Status::OK();
}

Status StreamWriter::Finish() {
  if (object_open_) RETURN_IF_ERROR(queue_.EndObject(layout_.object_sizes().back()));
  object_open_ = false;
  return queue_.Finish();
}

}  // namespace sluice
