#include "engine/object_copy.h"

#include <algorithm>
#include <cstring>

#include "engine/read_stream.h"
#include "engine/write_queue.h"
#include "io/aligned_buffer.h"

namespace sluice {

std::vector<std::vector<ChunkRef>> ChunksPerObject(const Manifest& m) {
  std::vector<std::vector<ChunkRef>> out(m.objects.size());
  for (const auto& it : m.items) {
    for (const auto& c : it.chunks) out[c.object].push_back(c);
  }
  for (auto& v : out) {
    std::sort(v.begin(), v.end(), [](const ChunkRef& a, const ChunkRef& b) { return a.offset < b.offset; });
  }
  return out;
}

namespace {

// The destination side of a copy: chunks arrive verified and in order, and
// are packed into aligned buffers handed to the write queue.
class CopySink {
 public:
  CopySink(Backend& src, Backend& dst, const std::vector<ObjectToCopy>& objects,
           const CopyControl& control)
      : src_(src),
        dst_(dst),
        objects_(objects),
        control_(control),
        io_bytes_(AlignUp(std::max<uint64_t>(control.io_bytes, 4096),
                          std::max<uint64_t>(dst.caps().io_alignment, 4096))),
        queue_(dst, WriteQueueOptions{control.bucket, control.written, 0,
                                      [this](uint64_t tag) { free_.push_back(static_cast<size_t>(tag)); }}) {}

  ~CopySink() {
    if (queue_.WaitOut()) {
      for (auto& b : buffers_) BufferPool::Give(std::move(b));
    } else {
      for (auto& b : buffers_) new AlignedBuffer(std::move(b));  // may still be read: leak
    }
  }

  std::string What(size_t k) const {
    return "copy " + objects_[k].name + " from " + src_.uri() + " to " + dst_.uri();
  }

  // Ends every object before `k` and begins `k` (objects without chunks are
  // created empty on the way).
  Status AdvanceTo(size_t k) {
    while (current_ < static_cast<int64_t>(k)) {
      if (current_ >= 0) RETURN_IF_ERROR(EndCurrent());
      ++current_;
      const ObjectToCopy& o = objects_[static_cast<size_t>(current_)];
      Status removed = dst_.Remove(o.name);
      if (!removed.ok() && !removed.IsNotFound()) return removed.WithContext(What(current_));
      RETURN_IF_ERROR(queue_.BeginObject(o.name, AlignUp(o.size, queue_.alignment()))
                          .WithContext(What(current_)));
      flushed_ = 0;
    }
    return Status::OK();
  }

  Status Take(size_t k, const ChunkTask& task, const uint8_t* data, const std::string& problem) {
    if (control_.stop != nullptr && control_.stop->load()) {
      return Status::Unavailable(What(k) + ": stopped");
    }
    const ChunkRef& ref = *task.ref;
    if (data == nullptr) {
      return Status::Corruption(What(k) + ": chunk at offset " + std::to_string(ref.offset) +
                                " length " + std::to_string(ref.length) + ": " + problem +
                                " in the source copy");
    }
    RETURN_IF_ERROR(AdvanceTo(k));
    size_t left = ref.length;
    while (left > 0) {
      if (current_buffer_ < 0) RETURN_IF_ERROR(TakeBuffer());
      size_t n = static_cast<size_t>(std::min<uint64_t>(left, io_bytes_ - fill_));
      std::memcpy(buffers_[static_cast<size_t>(current_buffer_)].data() + fill_, data, n);
      data += n;
      fill_ += n;
      left -= n;
      if (fill_ == io_bytes_) RETURN_IF_ERROR(Flush(false));
    }
    return Status::OK();
  }

  Status Finish() {
    if (!objects_.empty()) {
      RETURN_IF_ERROR(AdvanceTo(objects_.size() - 1));
      RETURN_IF_ERROR(EndCurrent());
    }
    RETURN_IF_ERROR(queue_.Finish());
    return Status::OK();
  }

 private:
  Status TakeBuffer() {
    if (free_.empty()) {
      ASSIGN_OR_RETURN(AlignedBuffer b, BufferPool::Take(static_cast<size_t>(io_bytes_)));
      buffers_.push_back(std::move(b));
      free_.push_back(buffers_.size() - 1);
    }
    current_buffer_ = static_cast<int>(free_.back());
    free_.pop_back();
    fill_ = 0;
    return Status::OK();
  }

  Status Flush(bool tail) {
    const size_t index = static_cast<size_t>(current_buffer_);
    const size_t len = fill_;
    current_buffer_ = -1;
    fill_ = 0;
    RETURN_IF_ERROR(queue_.Write(flushed_, buffers_[index].data(), len, index, tail)
                        .WithContext(What(static_cast<size_t>(current_))));
    flushed_ += len;
    return Status::OK();
  }

  Status EndCurrent() {
    if (current_buffer_ >= 0) {
      if (fill_ > 0) {
        RETURN_IF_ERROR(Flush(true));
      } else {
        free_.push_back(static_cast<size_t>(current_buffer_));
        current_buffer_ = -1;
      }
    }
    return queue_.EndObject(objects_[static_cast<size_t>(current_)].size);
  }

  Backend& src_;
  Backend& dst_;
  const std::vector<ObjectToCopy>& objects_;
  const CopyControl& control_;
  const uint64_t io_bytes_;
  std::vector<AlignedBuffer> buffers_;
  std::vector<size_t> free_;
  WriteQueue queue_;  // after the buffers: destroyed (writes waited out) first
  int64_t current_ = -1;      // object being written
  uint64_t flushed_ = 0;      // its offset where the current buffer begins
  int current_buffer_ = -1;
  size_t fill_ = 0;
};

}  // namespace

Status CopyObjects(Backend& src, Backend& dst, const std::vector<ObjectToCopy>& objects,
                   const CopyControl& control) {
  std::vector<ObjectChunks> reads;
  reads.reserve(objects.size());
  for (const auto& o : objects) {
    const std::string what = "copy " + o.name + " from " + src.uri() + " to " + dst.uri();
    if (o.size > dst.caps().max_object_bytes) {
      return Status::NotSupported(what + ": the object's " + std::to_string(o.size) +
                                  " bytes exceed the destination's maximum object size of " +
                                  std::to_string(dst.caps().max_object_bytes));
    }
    // Chunks tile the object, so the chunk stream is the object's bytes.
    uint64_t end = 0;
    ObjectChunks r{o.name, {}};
    for (const auto& c : o.chunks) {
      if (c.offset != end) {
        return Status::Corruption(what + ": its chunks do not cover it back to back (a chunk at " +
                                  std::to_string(c.offset) + ", " + std::to_string(end) + " expected)");
      }
      end += c.length;
      r.tasks.push_back(ChunkTask{&c, 0});
    }
    if (end != o.size) {
      return Status::Corruption(what + ": its chunks cover " + std::to_string(end) + " of its " +
                                std::to_string(o.size) + " bytes");
    }
    reads.push_back(std::move(r));
  }
  CopySink sink(src, dst, objects, control);
  RETURN_IF_ERROR(ReadChunksAcross(src, reads, control.io_bytes,
                                   [&](size_t k, const ChunkTask& t, const uint8_t* data,
                                       const std::string& problem) {
                                     return sink.Take(k, t, data, problem);
                                   }));
  return sink.Finish();
}

}  // namespace sluice
