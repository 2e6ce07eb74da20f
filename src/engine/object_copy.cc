#include "engine/object_copy.h"

#include <algorithm>
#include <cstring>
#include <deque>

#include "engine/read_stream.h"
#include "engine/write_queue.h"
#include "sluice/aligned_buffer.h"

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

std::vector<ObjectToCopy> ObjectsToCopy(const Manifest& m) {
  auto chunks = ChunksPerObject(m);
  std::vector<ObjectToCopy> out;
  for (uint32_t o = 0; o < m.objects.size(); ++o) {
    ObjectToCopy c;
    c.name = m.objects[o].name;
    c.size = m.objects[o].size;
    c.chunks = std::move(chunks[o]);
    c.shared = m.IsReference(o);
    out.push_back(std::move(c));
  }
  return out;
}

namespace {

// The size of a copy's writes: its I/O size, but under a rate cap at most an
// eighth of a second of the cap (at least 64 KiB), so that a capped copy's
// bytes go out as the cap allows rather than a whole I/O size at once after
// seconds of waiting for tokens, and what it wrote so far shows (status).
uint64_t CopyWriteBytes(const CopyControl& control) {
  uint64_t bytes = std::max<uint64_t>(control.io_bytes, 4096);
  if (control.bucket != nullptr && control.bucket->rate() > 0) {
    bytes = std::min(bytes, std::max<uint64_t>(64 << 10, control.bucket->rate() / 8 / 4096 * 4096));
  }
  return bytes;
}

// The destination side of a copy: chunks arrive verified and in order, and
// are packed into the write queue's own buffers.
class CopySink {
 public:
  CopySink(Backend& src, Backend& dst, const std::vector<ObjectToCopy>& objects,
           const CopyControl& control)
      : src_(src),
        dst_(dst),
        objects_(objects),
        control_(control),
        queue_(dst, WriteQueueOptions{control.bucket, control.written, 0, nullptr, CopyWriteBytes(control),
                                      control.stop,
                                      control.written_total, kMaxHeldBytes,
                                      /*buffers_stay_mapped=*/true}) {}

  // A copy whose cap makes its writes smaller than the I/O size gets no
  // object size up front (no preallocation): its objects grow as bytes land,
  // so a listing shows its progress (sluice status). Such a cap is far below
  // what writes one at a time reach (a file store extends a file one
  // O_DIRECT write at a time); a faster copy keeps the preallocation.
  bool Capped() const { return CopyWriteBytes(control_) < std::max<uint64_t>(control_.io_bytes, 4096); }

  std::string What(size_t k) const {
    return "copy " + objects_[k].name + " from " + src_.uri() + " to " + dst_.uri();
  }

  // Ends every object before `k` and begins `k` (objects without chunks are
  // created empty on the way).
  Status AdvanceTo(size_t k) {
    while (current_ < static_cast<int64_t>(k)) {
      if (current_ >= 0) RETURN_IF_ERROR(queue_.EndObject(objects_[static_cast<size_t>(current_)].size));
      ++current_;
      const ObjectToCopy& o = objects_[static_cast<size_t>(current_)];
      const std::string& to = o.dst_name.empty() ? o.name : o.dst_name;
      if (!o.placed) {
        Status removed = dst_.Remove(to);
        if (!removed.ok() && !removed.IsNotFound()) return removed.WithContext(What(current_));
      }
      RETURN_IF_ERROR(
          queue_.BeginObject(to, Capped() ? 0 : AlignUp(o.size, queue_.alignment()), o.placed)
              .WithContext(What(current_)));
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
      ASSIGN_OR_RETURN(auto space, queue_.Space());
      size_t n = std::min(left, space.second);
      std::memcpy(space.first, data, n);
      data += n;
      left -= n;
      RETURN_IF_ERROR(queue_.Fill(n).WithContext(What(k)));
    }
    return Status::OK();
  }

  Status Finish() {
    if (!objects_.empty()) {
      RETURN_IF_ERROR(AdvanceTo(objects_.size() - 1));
      RETURN_IF_ERROR(queue_.EndObject(objects_.back().size));
    }
    return queue_.Finish();
  }

  // REQUIRES Finish() returned OK.
  std::vector<std::string> Stored() const {
    std::vector<std::string> names;
    for (const auto& o : queue_.objects()) names.push_back(o.name);
    return names;
  }

 private:
  // Bytes held for hedges of placed objects at once (as a streaming save
  // holds): a few objects' worth. The buffers are the queue's own, so a
  // hedge's loser may go on writing from them in the background
  // (buffers_stay_mapped): its bytes are discarded, and the copy does not
  // wait for a late write it no longer needs.
  static constexpr uint64_t kMaxHeldBytes = 64ull << 20;

  Backend& src_;
  Backend& dst_;
  const std::vector<ObjectToCopy>& objects_;
  const CopyControl& control_;
  WriteQueue queue_;
  int64_t current_ = -1;  // object being written
};

}  // namespace

Status CopyObjects(Backend& src, Backend& dst, const std::vector<ObjectToCopy>& objects,
                   const CopyControl& control, std::vector<std::string>* stored) {
  std::vector<ObjectChunks> reads;
  reads.reserve(objects.size());
  // The gaps of shared objects, as chunks without a checksum (the tasks
  // point at them: a deque does not move its elements).
  std::deque<ChunkRef> gaps;
  auto add_gap = [&](ObjectChunks& r, uint64_t from, uint64_t to) {
    const uint64_t piece = std::max<uint64_t>(control.io_bytes, 4096);
    for (uint64_t at = from; at < to; at += piece) {
      gaps.push_back(ChunkRef{0, at, static_cast<uint32_t>(std::min(piece, to - at)), 0, false, {}});
      ChunkTask t{&gaps.back(), 0};
      t.verify = false;
      r.tasks.push_back(t);
    }
  };
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
      if (c.offset < end && !r.tasks.empty() && c.offset == r.tasks.back().ref->offset &&
          c.length == r.tasks.back().ref->length) {
        continue;  // the same chunk again
      }
      if (o.shared && c.offset > end) {
        add_gap(r, end, c.offset);
        end = c.offset;
      }
      if (c.offset != end) {
        return Status::Corruption(what + ": its chunks do not cover it back to back (a chunk at " +
                                  std::to_string(c.offset) + ", " + std::to_string(end) + " expected)");
      }
      end += c.length;
      r.tasks.push_back(ChunkTask{&c, 0});
    }
    if (o.shared && end < o.size) {
      add_gap(r, end, o.size);
      end = o.size;
    }
    if (end != o.size) {
      return Status::Corruption(what + ": its chunks cover " + std::to_string(end) + " of its " +
                                std::to_string(o.size) + " bytes");
    }
    reads.push_back(std::move(r));
  }
  if (control.verify_source_first) {
    RETURN_IF_ERROR(ReadChunksAcross(src, reads, control.io_bytes,
                                     [&](size_t k, const ChunkTask& t, const uint8_t* data,
                                         const std::string& problem) -> Status {
                                       if (data != nullptr) return Status::OK();
                                       return Status::Corruption(
                                           "copy " + objects[k].name + " from " + src.uri() + ": chunk at offset " +
                                           std::to_string(t.ref->offset) + ": " + problem +
                                           " in the source copy; the destination was left as it was");
                                     }));
  }
  CopySink sink(src, dst, objects, control);
  RETURN_IF_ERROR(ReadChunksAcross(src, reads, control.io_bytes,
                                   [&](size_t k, const ChunkTask& t, const uint8_t* data,
                                       const std::string& problem) {
                                     return sink.Take(k, t, data, problem);
                                   }));
  RETURN_IF_ERROR(sink.Finish());
  if (stored != nullptr) *stored = sink.Stored();
  return Status::OK();
}

}  // namespace sluice
