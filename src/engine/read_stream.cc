#include "engine/read_stream.h"

#include <algorithm>
#include <deque>

#include "sluice/aligned_buffer.h"
#include "io/crc32c.h"

namespace sluice {
namespace {

struct Extent {
  size_t object = 0;    // index into the objects read
  uint64_t offset = 0;  // aligned object offset of buf[0]
  uint64_t length = 0;  // aligned bytes to read
  size_t first = 0;     // tasks [first, last) of that object
  size_t last = 0;
  size_t buffer = 0;
  bool submitted = false;  // holds a buffer
  bool done = false;
  IoCompletion result;
};

}  // namespace

Status ReadChunks(Backend& backend, const std::string& object, const std::vector<ChunkTask>& tasks,
                  uint64_t io_bytes, const ChunkCallback& callback) {
  if (tasks.empty()) return Status::OK();
  std::vector<ObjectChunks> one{ObjectChunks{object, tasks}};
  return ReadChunksAcross(backend, one, io_bytes,
                          [&](size_t, const ChunkTask& t, const uint8_t* data, const std::string& problem) {
                            return callback(t, data, problem);
                          });
}

namespace {

// Each object's tasks grouped into extents of about `io_bytes`, each
// covering whole chunks; `*max_extent` gets the longest, rounded up so that
// buffers of nearby sizes are reused from the pool.
std::vector<Extent> PlanExtents(const std::vector<ObjectChunks>& objects, uint64_t io_bytes, uint64_t align,
                                uint64_t* max_extent) {
  std::vector<Extent> extents;
  *max_extent = 0;
  for (size_t k = 0; k < objects.size(); ++k) {
    const auto& tasks = objects[k].tasks;
    for (size_t i = 0; i < tasks.size();) {
      Extent e;
      e.object = k;
      e.first = i;
      uint64_t start = tasks[i].ref->offset;
      uint64_t end = start + tasks[i].ref->length;
      ++i;
      while (i < tasks.size()) {
        uint64_t s = tasks[i].ref->offset;
        uint64_t t = s + tasks[i].ref->length;
        // Merge while contiguous-ish (gaps below one alignment unit are read
        // through) and the extent stays near the target size.
        if (s < start || s > end + align || t - start > io_bytes) break;
        end = std::max(end, t);
        ++i;
      }
      e.last = i;
      e.offset = AlignDown(start, align);
      e.length = AlignUp(end, align) - e.offset;
      *max_extent = std::max(*max_extent, e.length);
      extents.push_back(e);
    }
  }
  *max_extent = AlignUp(*max_extent, 1 << 20);
  return extents;
}

// One ReadChunksAcross: extents submitted ahead as buffers allow, delivered
// in order.
class ChunkStream {
 public:
  ChunkStream(Backend& backend, const std::vector<ObjectChunks>& objects, uint64_t io_bytes,
              const ObjectChunkCallback& callback)
      : backend_(backend), objects_(objects), callback_(callback), opened_(objects.size()) {
    const uint64_t align = std::max<uint64_t>(backend.caps().io_alignment, 1);
    extents_ = PlanExtents(objects, io_bytes, align, &max_extent_);
  }
  ~ChunkStream() {
    WaitOut();  // before the buffers go away
    opened_.clear();
    for (auto& b : buffers_) BufferPool::Give(std::move(b));
  }

  Status Run() {
    Status stop;
    while (next_deliver_ < extents_.size()) {
      RETURN_IF_ERROR(SubmitAhead());
      Extent& head = extents_[next_deliver_];
      if (!head.done) {
        // Completions come per object: reap the one the head waits on.
        ASSIGN_OR_RETURN(IoCompletion c, opened_[head.object].object->Reap());
        Extent& e = extents_[static_cast<size_t>(c.tag)];
        e.done = true;
        e.result = std::move(c);
        continue;
      }
      stop = DeliverHead();
      if (!stop.ok()) break;
    }
    return stop;
  }

 private:
  struct Opened {
    bool tried = false;
    std::unique_ptr<ReadableObject> object;
    std::string problem;  // why it could not be opened
  };

  // Opens object `k` once; one that cannot be opened is recorded as such
  // (its chunks are reported bad), not an error.
  Status Open(size_t k) {
    Opened& o = opened_[k];
    if (o.tried) return Status::OK();
    o.tried = true;
    // Where the chunks end: the object's size as its manifest has it (the
    // caller checked it with a Stat), so a backend need not ask again.
    uint64_t known = 0;
    for (const auto& t : objects_[k].tasks) known = std::max<uint64_t>(known, t.ref->offset + t.ref->length);
    OpenOptions options;
    options.known_size = known;
    auto r = backend_.Open(objects_[k].object, options);
    if (!r.ok()) {
      o.problem = r.status().IsNotFound() ? "object missing" : r.status().ToString();
      return Status::OK();
    }
    o.object = std::move(r).value();
    // Every byte is checked and handed out from wherever it landed, so the
    // backend may keep it where it arrived (RADOS: saves a copy per byte).
    if (const LentReadBuffers* lending = backend_.caps().lent_read_buffers) lending->Allow(*o.object);
    if (buffers_.empty()) {
      // The first object opened sets the depth (one backend: all alike).
      const size_t depth = std::max<size_t>(1, std::min(o.object->queue_depth(), extents_.size()));
      for (size_t i = 0; i < depth; ++i) {
        ASSIGN_OR_RETURN(AlignedBuffer b, BufferPool::Take(static_cast<size_t>(max_extent_)));
        buffers_.push_back(std::move(b));
        free_buffers_.push_back(depth - 1 - i);
      }
    }
    return Status::OK();
  }

  void WaitOut() {
    for (auto& o : opened_) {
      while (o.object && o.object->in_flight() > 0) (void)o.object->Reap();
    }
  }

  // Starts reads of the next extents while a buffer is free.
  Status SubmitAhead() {
    while (next_submit_ < extents_.size()) {
      Extent& e = extents_[next_submit_];
      RETURN_IF_ERROR(Open(e.object));
      ReadableObject* obj = opened_[e.object].object.get();
      if (obj == nullptr) {  // not there: its chunks are reported bad
        e.done = true;
        ++next_submit_;
        continue;
      }
      if (free_buffers_.empty()) break;
      e.buffer = free_buffers_.back();
      free_buffers_.pop_back();
      e.submitted = true;
      Status st = obj->StartRead(e.offset, buffers_[e.buffer].data(), e.length, next_submit_);
      if (!st.ok()) {
        e.done = true;
        e.result.status = st;
      }
      ++next_submit_;
    }
    return Status::OK();
  }

  // Hands out the head extent's chunks, each verified or with its problem.
  Status DeliverHead() {
    Extent& head = extents_[next_deliver_];
    ReadableObject* obj = opened_[head.object].object.get();
    const auto& tasks = objects_[head.object].tasks;
    const uint8_t* base = head.result.data != nullptr ? head.result.data
                          : head.submitted           ? buffers_[head.buffer].data()
                                                     : nullptr;
    Status stop;
    for (size_t i = head.first; i < head.last && stop.ok(); ++i) {
      const ChunkRef& r = *tasks[i].ref;
      uint64_t rel = r.offset - head.offset;
      std::string problem;
      if (obj == nullptr) {
        problem = opened_[head.object].problem;
      } else if (head.result.status.IsNotFound()) {
        problem = "object missing";  // found at the read (OpenOptions::known_size)
      } else if (!head.result.status.ok()) {
        problem = head.result.status.ToString();
      } else if (head.result.bytes < rel + r.length) {
        problem = "object truncated (" + std::to_string(head.offset + head.result.bytes) + " bytes or fewer)";
      } else if (tasks[i].verify && (rel == 0 && r.length == head.result.bytes && head.result.crc32c
                                         ? head.result.crc32c()  // the backend knows it already
                                         : Crc32c(base + rel, r.length)) != r.crc32c) {
        problem = "checksum mismatch";
      }
      stop = callback_(head.object, tasks[i], problem.empty() ? base + rel : nullptr, problem);
    }
    if (head.submitted) free_buffers_.push_back(head.buffer);
    head.result.crc32c = nullptr;  // refers into the lent buffer
    head.result.lent.reset();
    ++next_deliver_;
    // An object whose extents are all handed out has nothing in flight.
    if (next_deliver_ == extents_.size() || extents_[next_deliver_].object != head.object) {
      opened_[head.object].object.reset();
    }
    return stop;
  }

  Backend& backend_;
  const std::vector<ObjectChunks>& objects_;
  const ObjectChunkCallback& callback_;
  std::vector<Extent> extents_;
  uint64_t max_extent_ = 0;
  // Before the objects: the objects (whose destructors wait for reads in
  // flight) go first.
  std::vector<AlignedBuffer> buffers_;
  std::vector<size_t> free_buffers_;
  std::vector<Opened> opened_;
  size_t next_submit_ = 0;   // next extent to submit
  size_t next_deliver_ = 0;  // next extent to hand out, in order
};

}  // namespace

Status ReadChunksAcross(Backend& backend, const std::vector<ObjectChunks>& objects,
                        uint64_t io_bytes, const ObjectChunkCallback& callback) {
  ChunkStream stream(backend, objects, io_bytes, callback);
  return stream.Run();
}

}  // namespace sluice
