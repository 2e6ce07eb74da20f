// Manifest: the index of one rank's items -> chunks -> (data object, offset,
// length, crc32c). Published once per rank, after its data objects are
// durable. Decoding treats the bytes as untrusted (see doc/format.md).
//
// Thread-safety: values and pure functions.
#ifndef SLUICE_FORMAT_MANIFEST_H_
#define SLUICE_FORMAT_MANIFEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/content_hash.h"
#include "sluice/status.h"

namespace sluice {

// The record's magic: the first 8 bytes of its envelope (record_frame.h).
constexpr std::string_view kManifestMagic = "SLUICEMF";
// Version 2 adds each chunk's content hash; version 1 manifests (no hashes)
// are still read, and their chunks are never matched by an incremental save.
constexpr uint32_t kManifestVersion = 2;

struct ChunkRef {
  uint32_t object = 0;   // index into Manifest::objects
  uint64_t offset = 0;   // byte offset in that object
  uint32_t length = 0;   // bytes; > 0
  uint32_t crc32c = 0;   // of those bytes
  // XXH3-128 of those bytes (content_hash.h), when has_hash: what an
  // incremental save matches a chunk of its base by.
  bool has_hash = false;
  Hash128 hash;
};

struct ManifestItem {
  std::string key;
  std::string metadata;  // opaque to sluice
  uint64_t size = 0;     // == sum of chunk lengths
  std::vector<ChunkRef> chunks;
};

struct DataObjectRef {
  std::string name;      // backend object name
  uint64_t size = 0;     // bytes the object must hold
};

// A data object of an incremental save may belong to an earlier step (the
// base it shares chunks with): its name lies under that step's prefix. The
// step whose prefix holds `object`, if it is a data object of `name`.
std::optional<uint64_t> StepOfDataObject(std::string_view name, std::string_view object);

struct Manifest {
  std::string name;
  uint64_t step = 0;
  uint32_t rank = 0;
  uint32_t world = 1;
  std::string writer_id;
  std::string attempt;   // SaveOptions::attempt
  int64_t created_unix_ms = 0;
  uint64_t chunk_bytes = 0;
  std::vector<DataObjectRef> objects;
  std::vector<ManifestItem> items;

  uint64_t TotalBytes() const;
  // Item bytes whose chunks lie in data objects of this step / of other
  // steps (references an incremental save made instead of writing them).
  uint64_t OwnBytes() const;
  uint64_t ReferencedBytes() const { return TotalBytes() - OwnBytes(); }
  // True if object `index` was not written by this manifest's writer: it
  // lies under another step's prefix, or was left in this step's folder by
  // a removed earlier save of the same step number.
  bool IsReference(uint32_t index) const;
};

std::string EncodeManifest(const Manifest& m);

// Parses and validates: framing and crc, every index and range in bounds,
// chunk lengths summing to item sizes, chunks inside their objects, keys
// valid and unique. `what` names the object in errors.
Result<Manifest> DecodeManifest(std::string_view bytes, const std::string& what);

}  // namespace sluice

#endif  // SLUICE_FORMAT_MANIFEST_H_
