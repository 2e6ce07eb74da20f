#include "pipeline/chunk_reader.h"

#include <algorithm>
#include <deque>

#include "io/aligned_buffer.h"
#include "io/crc32c.h"

namespace sluice {
namespace {

struct Extent {
  uint64_t offset = 0;  // aligned object offset of buf[0]
  uint64_t length = 0;  // aligned bytes to read
  size_t first = 0;     // tasks [first, last)
  size_t last = 0;
  size_t buffer = 0;
  bool done = false;
  IoCompletion result;
};

}  // namespace

Status ReadChunks(Backend& backend, const std::string& object, const std::vector<ChunkTask>& tasks,
                  uint64_t io_bytes, const ChunkCallback& callback) {
  if (tasks.empty()) return Status::OK();
  // Declared before the object so that the object (whose destructor waits
  // for reads in flight) is destroyed first.
  std::vector<AlignedBuffer> buffers;
  auto opened = backend.Open(object);
  if (!opened.ok()) {
    std::string why = opened.status().IsNotFound() ? "object missing" : opened.status().ToString();
    for (const auto& t : tasks) RETURN_IF_ERROR(callback(t, nullptr, why));
    return Status::OK();
  }
  std::unique_ptr<ReadableObject> obj = std::move(opened).value();
  // Every byte is checked and handed out from wherever it landed, so the
  // backend may keep it where it arrived (RADOS: saves a copy per byte).
  obj->AllowLentBuffers();
  const uint64_t align = std::max<uint64_t>(backend.caps().io_alignment, 1);

  // Group tasks into extents of about io_bytes, each covering whole chunks.
  std::vector<Extent> extents;
  uint64_t max_extent = 0;
  for (size_t i = 0; i < tasks.size();) {
    Extent e;
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

  // Round up so that buffers of nearby sizes are reused from the pool.
  max_extent = AlignUp(max_extent, 1 << 20);
  const size_t depth = std::max<size_t>(1, std::min(obj->queue_depth(), extents.size()));
  for (size_t i = 0; i < depth; ++i) {
    ASSIGN_OR_RETURN(AlignedBuffer b, BufferPool::Take(static_cast<size_t>(max_extent)));
    buffers.push_back(std::move(b));
  }
  std::vector<size_t> free_buffers;
  for (size_t i = 0; i < depth; ++i) free_buffers.push_back(depth - 1 - i);

  size_t next_submit = 0;  // next extent to submit
  size_t next_deliver = 0; // next extent to hand out, in order
  Status stop;
  while (next_deliver < extents.size()) {
    while (next_submit < extents.size() && !free_buffers.empty() && stop.ok()) {
      Extent& e = extents[next_submit];
      e.buffer = free_buffers.back();
      free_buffers.pop_back();
      Status st = obj->StartRead(e.offset, buffers[e.buffer].data(), e.length, next_submit);
      if (!st.ok()) {
        e.done = true;
        e.result.status = st;
      }
      ++next_submit;
    }
    Extent& head = extents[next_deliver];
    if (!head.done) {
      ASSIGN_OR_RETURN(IoCompletion c, obj->Reap());
      Extent& e = extents[static_cast<size_t>(c.tag)];
      e.done = true;
      e.result = std::move(c);
      continue;
    }
    // Deliver the head extent's chunks.
    const uint8_t* base = head.result.data != nullptr ? head.result.data : buffers[head.buffer].data();
    for (size_t i = head.first; i < head.last && stop.ok(); ++i) {
      const ChunkRef& r = *tasks[i].ref;
      uint64_t rel = r.offset - head.offset;
      std::string problem;
      if (!head.result.status.ok()) {
        problem = head.result.status.ToString();
      } else if (head.result.bytes < rel + r.length) {
        problem = "object truncated (" + std::to_string(obj->size()) + " bytes)";
      } else if (Crc32c(base + rel, r.length) != r.crc32c) {
        problem = "checksum mismatch";
      }
      stop = callback(tasks[i], problem.empty() ? base + rel : nullptr, problem);
    }
    free_buffers.push_back(head.buffer);
    head.result.lent.reset();
    ++next_deliver;
    if (!stop.ok()) {
      // Wait out what is in flight before the buffers go away.
      while (obj->in_flight() > 0) (void)obj->Reap();
      break;
    }
  }
  for (auto& b : buffers) BufferPool::Give(std::move(b));
  return stop;
}

}  // namespace sluice
