#include "pipeline/data_writer.h"

#include <algorithm>
#include <cstring>

#include "io/crc32c.h"

namespace sluice {
namespace {

// The tag of a write from lent memory: it holds no buffer of ours.
constexpr uint64_t kLentTag = UINT64_MAX;
// Lent pieces smaller than this are copied into a buffer instead: a write
// of their own would cost the store an operation for a few bytes.
constexpr size_t kMinLentWriteBytes = 1 << 20;

}  // namespace

DataWriter::DataWriter(Backend& backend, std::function<std::string(uint32_t)> object_name,
                       uint64_t object_bytes, uint64_t io_bytes, uint64_t chunk_bytes)
    : backend_(backend),
      object_name_(std::move(object_name)),
      chunk_bytes_(chunk_bytes),
      align_(std::max<size_t>(backend.caps().io_alignment, 1)) {
  io_bytes_ = AlignUp(std::max<uint64_t>(io_bytes, align_), AlignedBuffer::kAlignment);
  object_bytes_ = std::min(object_bytes, backend.caps().max_object_bytes);
  // An object must hold at least one full chunk.
  object_bytes_ = std::max(object_bytes_, chunk_bytes_);
}

DataWriter::~DataWriter() {
  // Abandoned mid-write (error path): wait for in-flight writes so the kernel
  // never touches freed buffers. The objects themselves are left for the
  // caller or gc to remove.
  if (WaitOutWrites()) {
    for (auto& b : buffers_) BufferPool::Give(std::move(b));
  }
}

bool DataWriter::WaitOutWrites() {
  bool quiet = true;
  auto wait_out = [&](WritableObject* o) {
    while (o->in_flight() > 0) {
      auto c = o->Reap();
      if (!c.ok()) break;
      if (c->tag != kLentTag) free_.push_back(static_cast<size_t>(c->tag));
      if (!c->status.ok() && error_.ok()) error_ = c->status;
    }
    if (o->in_flight() > 0) quiet = false;
  };
  for (auto& d : draining_) wait_out(d.object.get());
  if (object_) wait_out(object_.get());
  return quiet;
}

// Reaps one completion, from the oldest object with writes in flight (its
// writes were started first); finishes that object once it has none left.
Status DataWriter::ReapOne() {
  const bool from_draining = !draining_.empty();
  WritableObject* o = from_draining ? draining_.front().object.get() : object_.get();
  auto c = o->Reap();
  if (!c.ok()) {
    if (error_.ok()) error_ = c.status();
    return error_;
  }
  if (c->tag != kLentTag) free_.push_back(static_cast<size_t>(c->tag));
  if (!c->status.ok() && error_.ok()) error_ = c->status;
  if (from_draining && o->in_flight() == 0) return FinishOldest();
  return error_;
}

Status DataWriter::FinishOldest() {
  Draining d = std::move(draining_.front());
  draining_.pop_front();
  if (error_.ok()) {
    Status st = d.object->Finish(d.size);
    if (!st.ok()) error_ = st;
    else objects_[d.index].size = d.size;
  }
  return error_;
}

Status DataWriter::DrainOldest() {
  WritableObject* o = draining_.front().object.get();
  while (o->in_flight() > 0) {
    auto c = o->Reap();
    if (!c.ok()) {
      // Cannot reap: leave the object to the destructor.
      if (error_.ok()) error_ = c.status();
      return error_;
    }
    if (c->tag != kLentTag) free_.push_back(static_cast<size_t>(c->tag));
    if (!c->status.ok() && error_.ok()) error_ = c->status;
  }
  return FinishOldest();
}

Status DataWriter::GetFreeBuffer() {
  if (free_.empty() && buffers_.size() < object_->queue_depth()) {
    ASSIGN_OR_RETURN(AlignedBuffer b, BufferPool::Take(static_cast<size_t>(io_bytes_)));
    buffers_.push_back(std::move(b));
    free_.push_back(buffers_.size() - 1);
  }
  while (free_.empty()) RETURN_IF_ERROR(ReapOne());
  current_ = static_cast<int>(free_.back());
  free_.pop_back();
  fill_ = 0;
  return Status::OK();
}

Status DataWriter::WaitForWriteSlot() {
  size_t in_flight = object_->in_flight();
  for (const auto& d : draining_) in_flight += d.object->in_flight();
  // Lent writes hold no buffer, so the buffers alone no longer bound what
  // is in flight: the current object's queue and the total both are.
  while ((object_->in_flight() >= object_->queue_depth() || in_flight >= object_->queue_depth()) &&
         in_flight > 0) {
    RETURN_IF_ERROR(ReapOne());
    --in_flight;
  }
  return Status::OK();
}

Status DataWriter::StartLentWrite(const void* data, size_t len) {
  RETURN_IF_ERROR(WaitForWriteSlot());
  Status st = object_->StartWrite(flushed_offset_, data, len, kLentTag);
  if (!st.ok()) {
    if (error_.ok()) error_ = st;
    return st;
  }
  flushed_offset_ += len;
  object_size_ += len;
  return Status::OK();
}

Status DataWriter::FlushCurrentBuffer(bool last) {
  size_t len = fill_;
  if (last) {
    AlignedBuffer& b = buffers_[static_cast<size_t>(current_)];
    len = static_cast<size_t>(AlignUp(fill_, align_));
    std::memset(b.data() + fill_, 0, len - fill_);
  }
  if (Status slot = WaitForWriteSlot(); !slot.ok()) {
    free_.push_back(static_cast<size_t>(current_));
    current_ = -1;
    return slot;
  }
  AlignedBuffer& b = buffers_[static_cast<size_t>(current_)];
  Status st = object_->StartWrite(flushed_offset_, b.data(), len, static_cast<uint64_t>(current_));
  if (!st.ok()) {
    free_.push_back(static_cast<size_t>(current_));
    current_ = -1;
    if (error_.ok()) error_ = st;
    return st;
  }
  flushed_offset_ += len;
  current_ = -1;
  fill_ = 0;
  return Status::OK();
}

Status DataWriter::OpenNextObject(uint64_t first_chunk) {
  std::string name = object_name_(static_cast<uint32_t>(objects_.size()));
  uint64_t hint = 0;
  if (expected_remaining_ > 0) {
    hint = AlignUp(std::min(object_bytes_, std::max(expected_remaining_, first_chunk)), align_);
  }
  ASSIGN_OR_RETURN(object_, backend_.Create(name, hint));
  objects_.push_back(DataObjectRef{name, 0});
  object_size_ = 0;
  flushed_offset_ = 0;
  return Status::OK();
}

Status DataWriter::RetireObject() {
  if (current_ >= 0) {
    if (fill_ > 0) {
      RETURN_IF_ERROR(FlushCurrentBuffer(true));
    } else {
      free_.push_back(static_cast<size_t>(current_));
      current_ = -1;
    }
  }
  draining_.push_back(Draining{std::move(object_), object_size_, objects_.size() - 1});
  // At most one earlier object outstanding besides the one just retired.
  while (draining_.size() > 1 ||
         (!draining_.empty() && draining_.front().object->in_flight() == 0)) {
    RETURN_IF_ERROR(DrainOldest());
  }
  return error_;
}

Status DataWriter::Append(uint64_t size, ItemSource& source, std::vector<ChunkRef>* out) {
  RETURN_IF_ERROR(error_);
  uint64_t remaining = size;
  bool source_lends = true;  // until it declines once
  while (remaining > 0) {
    uint64_t clen = std::min(chunk_bytes_, remaining);
    if (!object_ || object_size_ + clen > object_bytes_) {
      if (object_) RETURN_IF_ERROR(RetireObject());
      RETURN_IF_ERROR(OpenNextObject(clen));
    }
    ChunkRef ref;
    ref.object = static_cast<uint32_t>(objects_.size() - 1);
    ref.offset = object_size_;
    ref.length = static_cast<uint32_t>(clen);
    uint32_t crc = 0;
    uint64_t left = clen;
    while (left > 0) {
      const void* lent = nullptr;
      size_t lent_bytes = 0;
      // Memory the source lends is written from where it is, with no copy,
      // where the store takes writes at any address and nothing is buffered
      // ahead of it (a buffer's bytes must reach the object first).
      if (source_lends && align_ == 1 && fill_ == 0 && left >= kMinLentWriteBytes &&
          io_bytes_ >= kMinLentWriteBytes) {
        size_t want = static_cast<size_t>(std::min<uint64_t>(left, io_bytes_));
        lent_bytes = source.Lend(want, &lent);
        if (lent_bytes > want || (lent_bytes > 0 && lent == nullptr)) {
          return Status::InvalidArgument("item source lent " + std::to_string(lent_bytes) + " bytes where " +
                                         std::to_string(want) + " were asked for");
        }
        if (lent_bytes == 0) source_lends = false;
        if (lent_bytes >= kMinLentWriteBytes) {
          crc = object_->ChecksumForWrite(crc, lent, lent_bytes);
          RETURN_IF_ERROR(StartLentWrite(lent, lent_bytes));
          left -= lent_bytes;
          continue;
        }
      }
      if (current_ < 0) RETURN_IF_ERROR(GetFreeBuffer());
      uint8_t* dst = buffers_[static_cast<size_t>(current_)].data() + fill_;
      size_t want = static_cast<size_t>(std::min<uint64_t>(left, io_bytes_ - fill_));
      size_t got = 0;
      if (lent_bytes > 0) {  // too small a piece to write on its own
        std::memcpy(dst, lent, lent_bytes);
        got = lent_bytes;
      } else {
        ASSIGN_OR_RETURN(got, source.Read(dst, want));
      }
      if (got == 0 || got > want) {
        return Status::InvalidArgument("item source delivered " +
                                       std::to_string(size - remaining + (clen - left)) +
                                       " bytes, " + std::to_string(size) + " were declared");
      }
      crc = object_->ChecksumForWrite(crc, dst, got);
      fill_ += got;
      left -= got;
      object_size_ += got;
      if (fill_ == io_bytes_) RETURN_IF_ERROR(FlushCurrentBuffer(false));
    }
    ref.crc32c = crc;
    out->push_back(ref);
    remaining -= clen;
    expected_remaining_ = expected_remaining_ > clen ? expected_remaining_ - clen : 0;
  }
  return Status::OK();
}

Status DataWriter::Finish() {
  RETURN_IF_ERROR(error_);
  if (object_) RETURN_IF_ERROR(RetireObject());
  while (!draining_.empty()) RETURN_IF_ERROR(DrainOldest());
  for (auto& b : buffers_) BufferPool::Give(std::move(b));
  buffers_.clear();
  free_.clear();
  return Status::OK();
}

}  // namespace sluice
