#include "format/manifest.h"

#include <string>
#include <new>
#include <unordered_set>

#include "format/encoding.h"
#include "format/record_frame.h"
#include "sluice/names.h"
#include "format/limits.h"
#include "format/layout.h"

namespace sluice {
namespace {
constexpr uint64_t kMaxChunkBytes = 1ull << 31;
}  // namespace

uint64_t Manifest::TotalBytes() const {
  uint64_t t = 0;
  for (const auto& it : items) t += it.size;
  return t;
}

std::optional<uint64_t> StepOfDataObject(std::string_view name, std::string_view object) {
  auto parsed = ParseObjectName(object);
  if (!parsed || parsed->name != name || parsed->rest.rfind("data/", 0) != 0) return std::nullopt;
  return parsed->step;
}

bool Manifest::IsReference(uint32_t index) const {
  if (index >= objects.size()) return false;
  // Another step's object, or one a removed earlier save of this very step
  // number left in its folder (written by another writer).
  auto parsed = ParseObjectName(objects[index].name);
  if (!parsed || parsed->name != name || parsed->step != step) return true;
  return WriterOfObject(parsed->rest) != writer_id;
}

uint64_t Manifest::OwnBytes() const {
  uint64_t t = 0;
  for (const auto& it : items) {
    for (const auto& c : it.chunks) {
      if (!IsReference(c.object)) t += c.length;
    }
  }
  return t;
}

std::string EncodeManifest(const Manifest& m) {
  Encoder e;
  e.PutBytes(m.name);
  e.PutVarint(m.step);
  e.PutVarint(m.rank);
  e.PutVarint(m.world);
  e.PutBytes(m.writer_id);
  e.PutBytes(m.attempt);
  e.PutVarint(static_cast<uint64_t>(m.created_unix_ms));
  e.PutVarint(m.chunk_bytes);
  e.PutVarint(m.objects.size());
  for (const auto& o : m.objects) {
    e.PutBytes(o.name);
    e.PutVarint(o.size);
  }
  e.PutVarint(m.items.size());
  for (const auto& it : m.items) {
    e.PutBytes(it.key);
    e.PutBytes(it.metadata);
    e.PutVarint(it.size);
    e.PutVarint(it.chunks.size());
    for (const auto& c : it.chunks) {
      e.PutVarint(c.object);
      e.PutVarint(c.offset);
      e.PutVarint(c.length);
      e.PutFixed32(c.crc32c);
      e.PutVarint(c.has_hash ? 1 : 0);  // flags: bit 0, a content hash follows
      if (c.has_hash) {
        e.PutFixed64(c.hash.low);
        e.PutFixed64(c.hash.high);
      }
    }
  }
  return FrameRecord(kManifestMagic, e.buffer(), kManifestVersion);
}

namespace {
Result<Manifest> DecodeManifestBody(std::string_view bytes, const std::string& what) {
  uint32_t version = 0;
  ASSIGN_OR_RETURN(std::string_view body, UnframeRecord(bytes, kManifestMagic, what, kManifestVersion, &version));
  Decoder d(body, what);
  Manifest m;
  uint64_t created;
  RETURN_IF_ERROR(d.Bytes(&m.name, limits::kMaxNameBytes, "checkpoint name"));
  RETURN_IF_ERROR(d.Varint(&m.step));
  RETURN_IF_ERROR(d.Varint32(&m.rank, "rank"));
  RETURN_IF_ERROR(d.Varint32(&m.world, "world"));
  RETURN_IF_ERROR(d.Bytes(&m.writer_id, 64, "writer id"));
  RETURN_IF_ERROR(d.Bytes(&m.attempt, 128, "attempt"));
  RETURN_IF_ERROR(d.Varint(&created));
  m.created_unix_ms = static_cast<int64_t>(created);
  RETURN_IF_ERROR(d.Varint(&m.chunk_bytes));
  if (Status st = ValidateCheckpointName(m.name); !st.ok()) return d.Bad(st.message());
  if (m.world == 0 || m.rank >= m.world) {
    return d.Bad("rank " + std::to_string(m.rank) + " of world " + std::to_string(m.world));
  }
  uint64_t nobj;
  RETURN_IF_ERROR(d.Count(&nobj, 2, "object"));
  // Elements are appended as they parse rather than allocated from the
  // count up front: memory follows the bytes actually present.
  for (uint64_t i = 0; i < nobj; ++i) {
    DataObjectRef o;
    RETURN_IF_ERROR(d.Bytes(&o.name, 1024, "object name"));
    RETURN_IF_ERROR(d.Varint(&o.size));
    m.objects.push_back(std::move(o));
  }
  uint64_t nitems;
  RETURN_IF_ERROR(d.Count(&nitems, 4, "item"));
  std::unordered_set<std::string> keys;
  for (uint64_t item_index = 0; item_index < nitems; ++item_index) {
    ManifestItem it;
    RETURN_IF_ERROR(d.Bytes(&it.key, limits::kMaxKeyBytes, "item key"));
    RETURN_IF_ERROR(d.Bytes(&it.metadata, limits::kMaxMetadataBytes, "item metadata"));
    RETURN_IF_ERROR(d.Varint(&it.size));
    if (Status st = ValidateItemKey(it.key); !st.ok()) return d.Bad(st.message());
    uint64_t nchunks;
    RETURN_IF_ERROR(d.Count(&nchunks, version >= 2 ? 8 : 7, "chunk"));
    uint64_t sum = 0;
    for (uint64_t ci = 0; ci < nchunks; ++ci) {
      ChunkRef c;
      uint64_t obj, len;
      RETURN_IF_ERROR(d.Varint(&obj));
      RETURN_IF_ERROR(d.Varint(&c.offset));
      RETURN_IF_ERROR(d.Varint(&len));
      RETURN_IF_ERROR(d.Fixed32(&c.crc32c));
      if (version >= 2) {
        uint64_t flags;
        RETURN_IF_ERROR(d.Varint(&flags));
        if (flags > 1) return d.Bad("item '" + it.key + "': unknown chunk flags " + std::to_string(flags));
        if (flags & 1) {
          c.has_hash = true;
          RETURN_IF_ERROR(d.Fixed64(&c.hash.low));
          RETURN_IF_ERROR(d.Fixed64(&c.hash.high));
        }
      }
      if (obj >= m.objects.size()) return d.Bad("item '" + it.key + "': chunk names object " + std::to_string(obj) + " of " + std::to_string(m.objects.size()));
      if (len == 0 || len > kMaxChunkBytes) return d.Bad("item '" + it.key + "': chunk length " + std::to_string(len));
      const uint64_t osize = m.objects[obj].size;
      if (c.offset > osize || len > osize - c.offset) return d.Bad("item '" + it.key + "': chunk at " + std::to_string(c.offset) + "+" + std::to_string(len) + " lies outside object " + m.objects[obj].name);
      c.object = static_cast<uint32_t>(obj);
      c.length = static_cast<uint32_t>(len);
      if (sum > UINT64_MAX - len) return d.Bad("item '" + it.key + "': size overflows");
      sum += len;
      it.chunks.push_back(c);
    }
    if (sum != it.size) return d.Bad("item '" + it.key + "': chunks hold " + std::to_string(sum) + " bytes, item says " + std::to_string(it.size));
    if (!keys.insert(it.key).second) return d.Bad("duplicate item key '" + it.key + "'");
    m.items.push_back(std::move(it));
  }
  if (d.remaining() != 0) return d.Bad(std::to_string(d.remaining()) + " trailing bytes");
  return m;
}
}  // namespace

Result<Manifest> DecodeManifest(std::string_view bytes, const std::string& what) {
  try {
    return DecodeManifestBody(bytes, what);
  } catch (const std::bad_alloc&) {
    // A crafted record with a valid crc can still describe more than memory
    // holds; no exception crosses the API.
    return Status::Corruption(what + ": too large to decode in memory");
  }
}

}  // namespace sluice
