// libFuzzer target: a safetensors file's header (and an index file) from
// arbitrary bytes must parse to a Status, never crash, hang or read out of
// bounds (run under ASan/UBSan). A header that parses must describe tensors
// inside the file that do not overlap, and re-encode to a header that parses
// to the same tensors.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "sluice/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  std::string file(reinterpret_cast<const char*>(data), size);
  (void)ParseSafetensorsIndex(file, "fuzz").ok();
  auto n = SafetensorsHeaderLength(file, file.size(), "fuzz");
  if (!n.ok()) return 0;
  auto header = ParseSafetensorsHeader(std::string_view(file).substr(8, *n), file.size(), "fuzz");
  if (!header.ok()) return 0;
  uint64_t prev_end = 0;
  std::vector<SafetensorsTensor> packed;
  uint64_t at = 0;
  for (const auto& t : header->tensors) {
    if (t.begin < prev_end || t.end < t.begin || header->data_start + t.end > file.size()) std::abort();
    prev_end = t.end;
    SafetensorsTensor p = t;
    p.begin = at;
    p.end = at + (t.end - t.begin);
    at = p.end;
    packed.push_back(p);
  }
  std::string again = EncodeSafetensorsHeader(packed, header->metadata);
  const uint64_t file2 = again.size() + at;
  auto n2 = SafetensorsHeaderLength(again, file2, "fuzz");
  if (!n2.ok()) std::abort();
  auto back = ParseSafetensorsHeader(std::string_view(again).substr(8, *n2), file2, "fuzz");
  if (!back.ok() || back->tensors.size() != packed.size() || back->metadata != header->metadata) std::abort();
  return 0;
}
