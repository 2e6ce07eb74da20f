#include "engine/read_stream.h"

#include <algorithm>
#include <deque>

#include "io/aligned_buffer.h"
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

Status ReadChunksAcross(Backend& backend, const std::vector<ObjectChunks>& objects,
                        uint64_t io_bytes, const ObjectChunkCallback& callback) {
  const uint64_t align = std::max<uint64_t>(backend.caps().io_alignment, 1);
  // Group each object's tasks into extents of about io_bytes, each covering
  // whole chunks.
  std::vector<Extent> extents;
  uint64_t max_extent = 0;
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
      max_extent = std::max(max_extent, e.length);
      extents.push_back(e);
    }
  }
  if (extents.empty()) return Status::OK();
  // Round up so that buffers of nearby sizes are reused from the pool.
  max_extent = AlignUp(max_extent, 1 << 20);

  // Declared before the objects so that the objects (whose destructors wait
  // for reads in flight) are destroyed first.
  std::vector<AlignedBuffer> buffers;
  std::vector<size_t> free_buffers;
  struct Opened {
    bool tried = false;
    std::unique_ptr<ReadableObject> object;
    std::string problem;  // why it could not be opened
  };
  std::vector<Opened> opened(objects.size());
  auto open = [&](size_t k) -> Status {
    Opened& o = opened[k];
    if (o.tried) return Status::OK();
    o.tried = true;
    // Where the chunks end: the object's size as its manifest has it (the
    // caller checked it with a Stat), so a backend need not ask again.
    uint64_t known = 0;
    for (const auto& t : objects[k].tasks) known = std::max<uint64_t>(known, t.ref->offset + t.ref->length);
    OpenOptions options;
    options.known_size = known;
    auto r = backend.Open(objects[k].object, options);
    if (!r.ok()) {
      o.problem = r.status().IsNotFound() ? "object missing" : r.status().ToString();
      return Status::OK();
    }
    o.object = std::move(r).value();
    // Every byte is checked and handed out from wherever it landed, so the
    // backend may keep it where it arrived (RADOS: saves a copy per byte).
    if (const LentReadBuffers* lending = backend.caps().lent_read_buffers) lending->Allow(*o.object);
    if (buffers.empty()) {
      // The first object opened sets the depth (one backend: all alike).
      const size_t depth = std::max<size_t>(1, std::min(o.object->queue_depth(), extents.size()));
      for (size_t i = 0; i < depth; ++i) {
        ASSIGN_OR_RETURN(AlignedBuffer b, BufferPool::Take(static_cast<size_t>(max_extent)));
        buffers.push_back(std::move(b));
        free_buffers.push_back(depth - 1 - i);
      }
    }
    return Status::OK();
  };
  auto wait_out = [&] {
    for (auto& o : opened) {
      while (o.object && o.object->in_flight() > 0) (void)o.object->Reap();
    }
  };

  size_t next_submit = 0;   // next extent to submit
  size_t next_deliver = 0;  // next extent to hand out, in order
  Status stop;
  while (next_deliver < extents.size()) {
    while (next_submit < extents.size() && stop.ok()) {
      Extent& e = extents[next_submit];
      Status st = open(e.object);
      if (!st.ok()) {
        wait_out();
        return st;
      }
      ReadableObject* obj = opened[e.object].object.get();
      if (obj == nullptr) {  // not there: its chunks are reported bad
        e.done = true;
        ++next_submit;
        continue;
      }
      if (free_buffers.empty()) break;
      e.buffer = free_buffers.back();
      free_buffers.pop_back();
      e.submitted = true;
      st = obj->StartRead(e.offset, buffers[e.buffer].data(), e.length, next_submit);
      if (!st.ok()) {
        e.done = true;
        e.result.status = st;
      }
      ++next_submit;
    }
    Extent& head = extents[next_deliver];
    ReadableObject* obj = opened[head.object].object.get();
    if (!head.done) {
      // Completions come per object: reap the one the head waits on.
      auto c = obj->Reap();
      if (!c.ok()) {
        wait_out();
        return c.status();
      }
      Extent& e = extents[static_cast<size_t>(c->tag)];
      e.done = true;
      e.result = std::move(c).value();
      continue;
    }
    // Deliver the head extent's chunks.
    const auto& tasks = objects[head.object].tasks;
    const uint8_t* base = head.result.data != nullptr ? head.result.data
                          : head.submitted           ? buffers[head.buffer].data()
                                                     : nullptr;
    for (size_t i = head.first; i < head.last && stop.ok(); ++i) {
      const ChunkRef& r = *tasks[i].ref;
      uint64_t rel = r.offset - head.offset;
      std::string problem;
      if (obj == nullptr) {
        problem = opened[head.object].problem;
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
      stop = callback(head.object, tasks[i], problem.empty() ? base + rel : nullptr, problem);
    }
    if (head.submitted) free_buffers.push_back(head.buffer);
    head.result.crc32c = nullptr;  // refers into the lent buffer
    head.result.lent.reset();
    ++next_deliver;
    // An object whose extents are all handed out has nothing in flight.
    if (next_deliver == extents.size() || extents[next_deliver].object != head.object) {
      opened[head.object].object.reset();
    }
    if (!stop.ok()) {
      // Wait out what is in flight before the buffers go away.
      wait_out();
      break;
    }
  }
  for (auto& b : buffers) BufferPool::Give(std::move(b));
  return stop;
}

}  // namespace sluice
