#include "format/layout.h"

#include <functional>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "io/fnv1a.h"

namespace sluice {

std::string CheckpointsPrefix() { return "ckpt/"; }
std::string NamePrefix(std::string_view name) { return "ckpt/" + std::string(name) + "/"; }

std::string StepPrefix(std::string_view name, uint64_t step) {
  char buf[32];
  snprintf(buf, sizeof buf, "%020llu", static_cast<unsigned long long>(step));
  return NamePrefix(name) + buf + "/";
}

std::string CommitObject(std::string_view name, uint64_t step) {
  return StepPrefix(name, step) + "COMMIT";
}
std::string SealPrefix(std::string_view name, uint64_t step) { return StepPrefix(name, step) + "seal/"; }

std::string SealObject(std::string_view name, uint64_t step, std::string_view writer, uint32_t salt) {
  char buf[8];
  snprintf(buf, sizeof buf, "-%02x", salt & 0xffu);
  return SealPrefix(name, step) + std::string(writer) + buf;
}

bool IsSealOf(std::string_view object, std::string_view name, uint64_t step) {
  const std::string prefix = SealPrefix(name, step);
  return object.size() > prefix.size() && object.substr(0, prefix.size()) == prefix &&
         object.find('/', prefix.size()) == std::string_view::npos;
}

std::string WriterOfSeal(std::string_view seal) {
  const size_t slash = seal.rfind('/');
  const size_t dash = seal.rfind('-');
  if (slash == std::string_view::npos || dash == std::string_view::npos || dash <= slash + 1) return "";
  return std::string(seal.substr(slash + 1, dash - slash - 1));
}

std::string LatestHintObject(std::string_view name, uint32_t slot) {
  return NamePrefix(name) + "LATEST" + (slot == 0 ? "" : "." + std::to_string(slot));
}

std::optional<std::string> NameOfLatestHint(std::string_view object) {
  const std::string_view top = "ckpt/";
  if (object.substr(0, top.size()) != top) return std::nullopt;
  const std::string_view rest = object.substr(top.size());
  const size_t slash = rest.find('/');
  if (slash == 0 || slash == std::string_view::npos) return std::nullopt;
  const std::string name(rest.substr(0, slash));
  for (uint32_t slot = 0; slot < kLatestHintSlots; ++slot) {
    if (object == LatestHintObject(name, slot)) return name;
  }
  return std::nullopt;
}

std::string ManifestPrefix(std::string_view name, uint64_t step) {
  return StepPrefix(name, step) + "manifest/";
}

std::string ManifestObject(std::string_view name, uint64_t step, uint32_t rank,
                           std::string_view writer) {
  char buf[32];
  snprintf(buf, sizeof buf, "r%06u-", rank);
  return ManifestPrefix(name, step) + buf + std::string(writer) + ".man";
}

std::string RankPointerPrefix(std::string_view name, uint64_t step) {
  return StepPrefix(name, step) + "ranks/";
}

std::string RankPointerObject(std::string_view name, uint64_t step, uint32_t rank, uint32_t k) {
  char buf[40];
  snprintf(buf, sizeof buf, "%06u.%04u", rank, k);
  return RankPointerPrefix(name, step) + buf;
}

std::string DrainNotePrefix(std::string_view name, uint64_t step) {
  return StepPrefix(name, step) + "drain/";
}

std::string PartPrefix(std::string_view name, uint64_t step) { return StepPrefix(name, step) + "parts/"; }

std::string PartObject(std::string_view name, uint64_t step, uint32_t rank) {
  char buf[32];
  snprintf(buf, sizeof buf, "r%06u.part", rank);
  return PartPrefix(name, step) + buf;
}

std::string PeerCommitObject(std::string_view name, uint64_t step) {
  return PartPrefix(name, step) + "peer.commit";
}

std::string DrainNoteObject(std::string_view name, uint64_t step, std::string_view tier_uri) {
  return DrainNotePrefix(name, step) + Fnv1aHex(tier_uri) + ".note";
}

std::string AbortNoteObject(std::string_view name, uint64_t step, std::string_view attempt) {
  return StepPrefix(name, step) + "aborts/" + Fnv1aHex(attempt) + ".abort";
}

std::string WritersPrefix(std::string_view name, uint64_t step) {
  return StepPrefix(name, step) + "writers/";
}

std::string WriterLockObject(std::string_view name, uint64_t step, std::string_view writer) {
  return WritersPrefix(name, step) + std::string(writer) + ".lock";
}

std::string WriterRefsObject(std::string_view name, uint64_t step, std::string_view writer) {
  return WritersPrefix(name, step) + std::string(writer) + ".refs";
}

std::string WriterOfObject(std::string_view rest) {
  // manifest/rRRRRRR-<writer>.man, data/rRRRRRR-<writer>-SSSSSS.dat, writers/<writer>.lock
  size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return "";
  std::string_view file = rest.substr(slash + 1);
  if (rest.substr(0, slash) == "writers") return std::string(file.substr(0, file.find('.')));
  if (file.size() < 8 || file[0] != 'r' || file[7] != '-') return "";
  file.remove_prefix(8);
  size_t end = file.find_first_of("-.");
  return std::string(file.substr(0, end));
}

std::string RepairStagingObject(std::string_view name, uint64_t step, std::string_view writer,
                                std::string_view object) {
  const std::string step_prefix = StepPrefix(name, step);
  const std::string base = step_prefix + "repair/" + std::string(writer) + "/";
  if (object.substr(0, step_prefix.size()) == step_prefix) return base + std::string(object.substr(step_prefix.size()));
  const std::string name_prefix = NamePrefix(name);
  if (object.substr(0, name_prefix.size()) == name_prefix) {
    return base + "shared/" + std::string(object.substr(name_prefix.size()));
  }
  return base + "other/" + std::to_string(std::hash<std::string_view>()(object));
}

std::string DataObject(std::string_view name, uint64_t step, uint32_t rank,
                       std::string_view writer, uint32_t seq) {
  char buf[64];
  snprintf(buf, sizeof buf, "r%06u-%.*s-%06u.dat", rank, static_cast<int>(writer.size()),
           writer.data(), seq);
  return StepPrefix(name, step) + "data/" + buf;
}

std::optional<ParsedObjectName> ParseObjectName(std::string_view object) {
  if (object.substr(0, 5) != "ckpt/") return std::nullopt;
  object.remove_prefix(5);
  size_t s1 = object.find('/');
  if (s1 == std::string_view::npos || s1 == 0) return std::nullopt;
  ParsedObjectName p;
  p.name = std::string(object.substr(0, s1));
  object.remove_prefix(s1 + 1);
  size_t s2 = object.find('/');
  if (s2 != 20) return std::nullopt;
  uint64_t step = 0;
  for (char c : object.substr(0, 20)) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (step > (UINT64_MAX - d) / 10) return std::nullopt;
    step = step * 10 + d;
  }
  p.step = step;
  p.rest = std::string(object.substr(21));
  if (p.rest.empty()) return std::nullopt;
  return p;
}

std::optional<uint32_t> RankOfManifest(std::string_view rest) {
  constexpr std::string_view kDir = "manifest/r";
  if (rest.substr(0, kDir.size()) != kDir) return std::nullopt;
  rest.remove_prefix(kDir.size());
  if (rest.size() < 7 || rest[6] != '-') return std::nullopt;
  // Exactly "<rank>-<writer>.man": nothing after the suffix.
  if (rest.size() < 11 || rest.substr(rest.size() - 4) != ".man" ||
      rest.find('.') != rest.size() - 4) {
    return std::nullopt;
  }
  uint32_t r = 0;
  for (char c : rest.substr(0, 6)) {
    if (c < '0' || c > '9') return std::nullopt;
    r = r * 10 + static_cast<uint32_t>(c - '0');
  }
  return r;
}

std::string NewWriterId() {
  std::random_device rd;
  uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
               static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
               (static_cast<uint64_t>(::getpid()) << 17);
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace sluice
