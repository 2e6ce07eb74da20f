#include "format/commit_record.h"

#include "format/encoding.h"
#include "format/record_frame.h"
#include "sluice/names.h"
#include "format/limits.h"

namespace sluice {
namespace {
}  // namespace

uint64_t CommitRecord::TotalBytes() const {
  uint64_t t = 0;
  for (const auto& r : ranks) t += r.bytes;
  return t;
}
uint64_t CommitRecord::TotalItems() const {
  uint64_t t = 0;
  for (const auto& r : ranks) t += r.items;
  return t;
}

std::string EncodeCommitRecord(const CommitRecord& c) {
  Encoder e;
  e.PutBytes(c.name);
  e.PutVarint(c.step);
  e.PutVarint(c.world);
  e.PutVarint(static_cast<uint64_t>(c.created_unix_ms));
  e.PutVarint(c.ranks.size());
  for (const auto& r : c.ranks) {
    e.PutVarint(r.rank);
    e.PutBytes(r.manifest);
    e.PutVarint(r.manifest_bytes);
    e.PutFixed32(r.manifest_crc32c);
    e.PutVarint(r.items);
    e.PutVarint(r.bytes);
  }
  return FrameRecord(kCommitMagic, e.buffer());
}

Result<CommitRecord> DecodeCommitRecord(std::string_view bytes, const std::string& what) {
  ASSIGN_OR_RETURN(std::string_view body, UnframeRecord(bytes, kCommitMagic, what));
  Decoder d(body, what);
  CommitRecord c;
  uint64_t created, n;
  RETURN_IF_ERROR(d.Bytes(&c.name, limits::kMaxNameBytes, "checkpoint name"));
  RETURN_IF_ERROR(d.Varint(&c.step));
  RETURN_IF_ERROR(d.Varint32(&c.world, "world"));
  RETURN_IF_ERROR(d.Varint(&created));
  c.created_unix_ms = static_cast<int64_t>(created);
  if (Status st = ValidateCheckpointName(c.name); !st.ok()) return d.Bad(st.message());
  if (c.world == 0 || c.world > limits::kMaxWorld) return d.Bad("world " + std::to_string(c.world));
  RETURN_IF_ERROR(d.Count(&n, 8, "rank"));
  if (n != c.world) return d.Bad(std::to_string(n) + " ranks listed for world " + std::to_string(c.world));
  c.ranks.resize(static_cast<size_t>(n));
  for (uint32_t i = 0; i < c.ranks.size(); ++i) {
    auto& r = c.ranks[i];
    RETURN_IF_ERROR(d.Varint32(&r.rank, "rank"));
    RETURN_IF_ERROR(d.Bytes(&r.manifest, 1024, "manifest name"));
    RETURN_IF_ERROR(d.Varint(&r.manifest_bytes));
    RETURN_IF_ERROR(d.Fixed32(&r.manifest_crc32c));
    RETURN_IF_ERROR(d.Varint(&r.items));
    RETURN_IF_ERROR(d.Varint(&r.bytes));
    if (r.rank != i) return d.Bad("rank entry " + std::to_string(i) + " is for rank " + std::to_string(r.rank));
  }
  if (d.remaining() != 0) return d.Bad(std::to_string(d.remaining()) + " trailing bytes");
  return c;
}

std::string EncodeCommitClaim(const CommitClaim& c) {
  Encoder e;
  e.PutBytes(c.name);
  e.PutVarint(c.step);
  e.PutBytes(c.seal);
  e.PutVarint(static_cast<uint64_t>(c.created_unix_ms));
  return FrameRecord(kCommitClaimMagic, e.buffer());
}

Result<CommitClaim> DecodeCommitClaim(std::string_view bytes, const std::string& what) {
  ASSIGN_OR_RETURN(std::string_view body, UnframeRecord(bytes, kCommitClaimMagic, what));
  Decoder d(body, what);
  CommitClaim c;
  uint64_t created;
  RETURN_IF_ERROR(d.Bytes(&c.name, limits::kMaxNameBytes, "checkpoint name"));
  RETURN_IF_ERROR(d.Varint(&c.step));
  RETURN_IF_ERROR(d.Bytes(&c.seal, 1024, "seal name"));
  RETURN_IF_ERROR(d.Varint(&created));
  c.created_unix_ms = static_cast<int64_t>(created);
  if (Status st = ValidateCheckpointName(c.name); !st.ok()) return d.Bad(st.message());
  if (c.seal.empty()) return d.Bad("empty seal name");
  if (d.remaining() != 0) return d.Bad(std::to_string(d.remaining()) + " trailing bytes");
  return c;
}

bool IsCommitClaim(std::string_view bytes) {
  return bytes.substr(0, kCommitClaimMagic.size()) == kCommitClaimMagic;
}

}  // namespace sluice
