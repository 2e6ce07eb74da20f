#include "engine/stream_writer.h"

#include <algorithm>

namespace sluice {

StreamWriter::StreamWriter(Backend& backend, std::function<std::string(uint32_t)> object_name,
                           uint64_t object_bytes, uint64_t io_bytes, uint64_t chunk_bytes)
    : object_name_(std::move(object_name)),
      io_bytes_(AlignUp(std::max<uint64_t>(io_bytes, backend.caps().io_alignment),
                        AlignedBuffer::kAlignment)),
      layout_(chunk_bytes, std::min(object_bytes, backend.caps().max_object_bytes)),
      queue_(backend, WriteQueueOptions{nullptr, nullptr, 0,
                                        [this](uint64_t tag) { free_.push_back(static_cast<size_t>(tag)); }}) {}

StreamWriter::~StreamWriter() {
  if (queue_.WaitOut()) {
    for (auto& b : buffers_) BufferPool::Give(std::move(b));
  } else {
    // A write that could not be reaped may still read its buffer: leak them
    // all on purpose rather than free memory the kernel may still touch.
    for (auto& b : buffers_) new AlignedBuffer(std::move(b));
  }
}

Status StreamWriter::TakeBuffer() {
  // Every buffer not free is in flight (or current), and the queue bounds
  // what is in flight: the ring grows to the queue depth and no further.
  if (free_.empty()) {
    ASSIGN_OR_RETURN(AlignedBuffer b, BufferPool::Take(static_cast<size_t>(io_bytes_)));
    buffers_.push_back(std::move(b));
    free_.push_back(buffers_.size() - 1);
  }
  current_ = static_cast<int>(free_.back());
  free_.pop_back();
  fill_ = 0;
  return Status::OK();
}

Status StreamWriter::FlushBuffer(bool tail) {
  const size_t len = fill_;
  const size_t index = static_cast<size_t>(current_);
  current_ = -1;
  fill_ = 0;
  RETURN_IF_ERROR(queue_.Write(flushed_offset_, buffers_[index].data(), len, index, tail));
  flushed_offset_ += len;
  return Status::OK();
}

Status StreamWriter::EndObject(uint64_t final_size) {
  if (current_ >= 0) {
    if (fill_ > 0) {
      RETURN_IF_ERROR(FlushBuffer(true));
    } else {
      free_.push_back(static_cast<size_t>(current_));
      current_ = -1;
    }
  }
  object_open_ = false;
  return queue_.EndObject(final_size);
}

Status StreamWriter::Append(uint64_t size, ItemSource& source, std::vector<ChunkRef>* out) {
  RETURN_IF_ERROR(queue_.error());
  uint64_t remaining = size;
  while (remaining > 0) {
    bool new_object = false;
    ChunkRef ref = layout_.Place(remaining, &new_object);
    if (new_object) {
      const auto& sizes = layout_.object_sizes();
      if (object_open_) RETURN_IF_ERROR(EndObject(sizes[sizes.size() - 2]));
      uint64_t hint = 0;
      if (expected_remaining_ > 0) {
        hint = AlignUp(std::min(layout_.object_bytes(), std::max<uint64_t>(expected_remaining_, ref.length)),
                       queue_.alignment());
      }
      RETURN_IF_ERROR(queue_.BeginObject(
          object_name_(static_cast<uint32_t>(layout_.object_sizes().size() - 1)), hint));
      object_open_ = true;
      flushed_offset_ = 0;
    }
    uint32_t crc = 0;
    uint64_t left = ref.length;
    while (left > 0) {
      if (current_ < 0) RETURN_IF_ERROR(TakeBuffer());
      uint8_t* dst = buffers_[static_cast<size_t>(current_)].data() + fill_;
      size_t want = static_cast<size_t>(std::min<uint64_t>(left, io_bytes_ - fill_));
      ASSIGN_OR_RETURN(size_t got, source.Read(dst, want));
      if (got == 0 || got > want) {
        return Status::InvalidArgument("item source delivered " +
                                       std::to_string(size - remaining + (ref.length - left)) +
                                       " bytes, " + std::to_string(size) + " were declared");
      }
      crc = queue_.Checksum(crc, dst, got);
      fill_ += got;
      left -= got;
      if (fill_ == io_bytes_) RETURN_IF_ERROR(FlushBuffer(false));
    }
    ref.crc32c = crc;
    out->push_back(ref);
    remaining -= ref.length;
    expected_remaining_ = expected_remaining_ > ref.length ? expected_remaining_ - ref.length : 0;
  }
  return Status::OK();
}

Status StreamWriter::Finish() {
  if (object_open_) RETURN_IF_ERROR(EndObject(layout_.object_sizes().back()));
  RETURN_IF_ERROR(queue_.Finish());
  for (auto& b : buffers_) BufferPool::Give(std::move(b));
  buffers_.clear();
  free_.clear();
  return Status::OK();
}

}  // namespace sluice
