// ChunkReader: reads a list of chunks of one data object, merging adjacent
// chunks into large aligned extents read with many requests in flight, and
// verifies each chunk's crc32c before handing it out. Chunks are delivered
// in the order given, whatever order the reads complete in.
//
// Thread-safety: one thread.
#ifndef SLUICE_ENGINE_READ_STREAM_H_
#define SLUICE_ENGINE_READ_STREAM_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/manifest.h"
#include "sluice/backend.h"

namespace sluice {

struct ChunkTask {
  const ChunkRef* ref = nullptr;
  uint64_t user = 0;  // caller's cookie (e.g. item and chunk index)
  // False for bytes no chunk covers (a gap in an object shared with other
  // steps, copied as it is): handed out without a checksum test.
  bool verify = true;
};

// Called once per task, in task order. `data` is null when the chunk could
// not be read or failed its checksum; `problem` then says why ("checksum
// mismatch", "object truncated", the I/O error). Returning a non-OK Status
// stops the read and is returned from ReadChunks.
using ChunkCallback = std::function<Status(const ChunkTask& task, const uint8_t* data,
                                           const std::string& problem)>;

// `tasks` must be sorted by ref->offset. `io_bytes` is the target extent size.
// A missing object reports every task as bad ("object missing") rather than
// failing, so verify can name each chunk.
Status ReadChunks(Backend& backend, const std::string& object, const std::vector<ChunkTask>& tasks,
                  uint64_t io_bytes, const ChunkCallback& callback);

// The chunks of several objects, read as one stream: reads stay in flight
// across object boundaries (the next object is opened while the last reads
// of the previous one are outstanding), so a restore of many objects keeps
// the backend's queue full. Objects are handed out in the order given, each
// one's tasks in order; `object` is the index into `objects`. An object
// that cannot be opened, a failed read and a checksum mismatch are reported
// per chunk (data null, `problem` says why) and reading goes on; only a
// failure to reap a read, or the callback's non-OK Status, stops it.
// ReadChunks is this for one object.
struct ObjectChunks {
  std::string object;
  std::vector<ChunkTask> tasks;  // sorted by ref->offset
};
using ObjectChunkCallback = std::function<Status(size_t object, const ChunkTask& task,
                                                 const uint8_t* data, const std::string& problem)>;
Status ReadChunksAcross(Backend& backend, const std::vector<ObjectChunks>& objects,
                        uint64_t io_bytes, const ObjectChunkCallback& callback);

}  // namespace sluice

#endif  // SLUICE_ENGINE_READ_STREAM_H_
