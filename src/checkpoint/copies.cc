#include "checkpoint/copies.h"

namespace sluice {
namespace {

bool SameChunk(const ChunkRef& a, const ChunkRef& b) {
  return a.object == b.object && a.offset == b.offset && a.length == b.length && a.crc32c == b.crc32c &&
         a.has_hash == b.has_hash && (!a.has_hash || a.hash == b.hash);
}

bool SameItem(const ManifestItem& a, const ManifestItem& b) {
  if (a.key != b.key || a.metadata != b.metadata || a.size != b.size || a.chunks.size() != b.chunks.size()) {
    return false;
  }
  for (size_t i = 0; i < a.chunks.size(); ++i) {
    if (!SameChunk(a.chunks[i], b.chunks[i])) return false;
  }
  return true;
}

// The writer id and object names aside.
bool SameContents(const Manifest& a, const Manifest& b) {
  if (a.name != b.name || a.step != b.step || a.rank != b.rank || a.world != b.world || a.attempt != b.attempt ||
      a.created_unix_ms != b.created_unix_ms || a.chunk_bytes != b.chunk_bytes ||
      a.objects.size() != b.objects.size() || a.items.size() != b.items.size()) {
    return false;
  }
  for (size_t i = 0; i < a.objects.size(); ++i) {
    if (a.objects[i].size != b.objects[i].size) return false;
  }
  for (size_t i = 0; i < a.items.size(); ++i) {
    if (!SameItem(a.items[i], b.items[i])) return false;
  }
  return true;
}

}  // namespace

bool SameSave(const CommitRecord& a, const CommitRecord& b) {
  if (a.name != b.name || a.step != b.step || a.world != b.world || a.created_unix_ms != b.created_unix_ms ||
      a.ranks.size() != b.ranks.size()) {
    return false;
  }
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    const CommittedRank& x = a.ranks[r];
    const CommittedRank& y = b.ranks[r];
    if (x.rank != y.rank || x.items != y.items || x.bytes != y.bytes) return false;
  }
  return true;
}

bool SameSave(const LoadedCheckpoint& a, const LoadedCheckpoint& b) {
  if (!SameSave(a.commit, b.commit) || a.manifests.size() != b.manifests.size()) return false;
  for (size_t r = 0; r < a.manifests.size(); ++r) {
    if (!SameContents(a.manifests[r], b.manifests[r])) return false;
  }
  return true;
}

std::map<std::string, std::string> ObjectNamesAcross(const LoadedCheckpoint& from, const LoadedCheckpoint& to) {
  std::map<std::string, std::string> out;
  for (size_t r = 0; r < from.manifests.size() && r < to.manifests.size(); ++r) {
    const auto& a = from.manifests[r].objects;
    const auto& b = to.manifests[r].objects;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) out.emplace(a[i].name, b[i].name);
  }
  return out;
}

}  // namespace sluice
