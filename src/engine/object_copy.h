// Copying data objects between stores byte for byte, under the same name or
// one the caller gives (or the destination's placement picks), as drains
// and repairs do. The bytes travel through the one read stream
// (ReadChunksAcross: reads in flight across objects, every chunk verified
// against its CRC32C before it is passed on) into the one write queue
// (WriteQueue: writes in flight across objects, throttled, padded,
// finished), so a bad source copy is never propagated and a copy runs at
// the speed and under the cap of any other write.
//
// Thread-safety: free functions; callers serialize per destination object.
#ifndef SLUICE_ENGINE_OBJECT_COPY_H_
#define SLUICE_ENGINE_OBJECT_COPY_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "format/manifest.h"
#include "io/token_bucket.h"
#include "sluice/backend.h"
#include "sluice/metrics.h"

namespace sluice {

struct CopyControl {
  TokenBucket* bucket = nullptr;            // paces writes into the destination (optional)
  const std::atomic<bool>* stop = nullptr;  // abandon when it turns true (optional)
  std::atomic<uint64_t>* written = nullptr; // bytes written, as they complete (optional)
  Counter* written_total = nullptr;         // the same, for the process's metrics (optional)
  uint64_t io_bytes = 4ull << 20;
  // Read and verify every chunk of the source before the destination
  // object is touched (it is then removed and written again): for a repair,
  // where the destination is a committed object that must not be lost to a
  // source that turns out bad too. A drain streams in one pass: it writes
  // objects no commit on the destination names yet (it skips those one
  // does), and stages shared ones beside and swaps them in.
  bool verify_source_first = false;
};

struct ObjectToCopy {
  std::string name;
  uint64_t size = 0;
  // Every chunk the object holds, sorted by offset; they must cover the
  // object back to back (doc/format.md), or the copy fails as Corruption,
  // except in a shared object (below). A chunk listed twice (two items
  // sharing it) is copied once.
  std::vector<ChunkRef> chunks;
  // Where it goes on the destination; empty: under the same name. A repair
  // writes beside the bad object, then swaps it in (Backend::Replace).
  std::string dst_name;
  // Stored where the destination's Placement puts `dst_name` (a name beside
  // it, away from slow placements) and hedged like a save's data object
  // (engine/write_queue.h); CopyObjects says which name it ended under.
  // `dst_name` must be new (a name of the copier's own writer): it is not
  // removed first.
  bool placed = false;
  // An object of another step that the manifest shares chunks with: it may
  // hold chunks this manifest does not name (other steps' chunks). Bytes no
  // listed chunk covers are copied as they are, unverified, so that the copy
  // is the whole object; callers list every chunk they know of
  // (AddKnownChunks), so those are bytes no committed step reads.
  bool shared = false;
};

// Copies `objects` from `src` to `dst` in order, replacing any object of
// the same name there (but for placed ones); each is durable on `dst` when
// this returns OK, and `stored` (optional) gets the name each was stored
// under, in order. Corruption names the object and chunk whose source copy
// is bad; a failed copy leaves the destination objects undefined (the
// caller's commit protocol never names them), never a source object
// changed.
Status CopyObjects(Backend& src, Backend& dst, const std::vector<ObjectToCopy>& objects,
                   const CopyControl& control, std::vector<std::string>* stored = nullptr);

// The chunks of every data object of a manifest, sorted by offset.
std::vector<std::vector<ChunkRef>> ChunksPerObject(const Manifest& m);
// Every data object of a manifest to copy under its own name, with its
// chunks (ChunksPerObject) and `shared` set for objects of other steps.
std::vector<ObjectToCopy> ObjectsToCopy(const Manifest& m);

}  // namespace sluice

#endif  // SLUICE_ENGINE_OBJECT_COPY_H_
