// Manifest: the index of one rank's items -> chunks -> (data object, offset,
// length, crc32c). Published once per rank, after its data objects are
// durable. Decoding treats the bytes as untrusted (see doc/format.md).
//
// Thread-safety: values and pure functions.
#ifndef SLUICE_FORMAT_MANIFEST_H_
#define SLUICE_FORMAT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice {

// The record's magic: the first 8 bytes of its envelope (record_frame.h).
constexpr std::string_view kManifestMagic = "SLUICEMF";

struct ChunkRef {
  uint32_t object = 0;   // index into Manifest::objects
  uint64_t offset = 0;   // byte offset in that object
  uint32_t length = 0;   // bytes; > 0
  uint32_t crc32c = 0;   // of those bytes
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
};

std::string EncodeManifest(const Manifest& m);

// Parses and validates: framing and crc, every index and range in bounds,
// chunk lengths summing to item sizes, chunks inside their objects, keys
// valid and unique. `what` names the object in errors.
Result<Manifest> DecodeManifest(std::string_view bytes, const std::string& what);

}  // namespace sluice

#endif  // SLUICE_FORMAT_MANIFEST_H_
