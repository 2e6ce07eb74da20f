#include "checkpoint/latest_hint.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "checkpoint/away_from_slow.h"
#include "format/commit_record.h"
#include "format/layout.h"

namespace sluice {
namespace {

// The slot a save writes and a reader asks first: slot 0 unless its
// placement is slow, else the first that is not (slot 0 if every one is).
uint32_t PreferredSlot(const Backend& backend, std::string_view name) {
  return PickAwayFromSlow(backend, kLatestHintSlots, [&](uint32_t slot) {
    return std::vector<std::string>{LatestHintObject(name, slot)};
  });
}

}  // namespace

std::optional<LatestHint> ParseLatestHint(std::string_view bytes) {
  const size_t newline = bytes.find('\n');
  const std::string_view digits = bytes.substr(0, newline);
  if (digits.empty() || digits.size() > 20) return std::nullopt;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  LatestHint hint;
  // 20 digits may pass UINT64_MAX: such a step has no commit record anyway.
  hint.step = std::strtoull(std::string(digits).c_str(), nullptr, 10);
  if (newline == std::string_view::npos) return hint;
  std::string_view rest = bytes.substr(newline + 1);
  // (Anything else after the step is taken for the record, and fails to
  // decode where it is read: the step alone still serves.)
  const size_t end = rest.find('\n');
  if (rest.substr(0, kCommitMagic.size()) != kCommitMagic && end != std::string_view::npos && end > 0) {
    hint.seal = std::string(rest.substr(0, end));
    rest.remove_prefix(end + 1);
  }
  hint.record = std::string(rest);
  return hint;
}

std::optional<uint64_t> ParseHintedStep(std::string_view bytes) {
  auto hint = ParseLatestHint(bytes);
  if (!hint) return std::nullopt;
  return hint->step;
}

void PublishLatestHint(Backend& backend, std::string_view name, uint64_t step, std::string_view record,
                       std::string_view seal) {
  const std::string hint = LatestHintObject(name, PreferredSlot(backend, name));
  std::string bytes = std::to_string(step);
  if (!record.empty() && record.size() <= kMaxHintedRecordBytes) {
    bytes += '\n';
    if (!seal.empty() && seal.find('\n') == std::string_view::npos) {
      bytes.append(seal);
      bytes += '\n';
    }
    bytes.append(record);
  }
  (void)backend.Remove(hint);
  (void)backend.PublishIfAbsent(hint, bytes);
}

std::vector<LatestHint> ReadLatestHints(Backend& backend, std::string_view name, bool other_slots) {
  std::vector<uint32_t> slots;
  const uint32_t preferred = PreferredSlot(backend, name);
  if (!other_slots) {
    slots.push_back(preferred);
  } else if (NamesMayBeSlow(backend)) {
    for (uint32_t slot = 0; slot < kLatestHintSlots; ++slot) {
      if (slot != preferred) slots.push_back(slot);
    }
  }
  std::vector<LatestHint> hints;
  for (uint32_t slot : slots) {
    auto bytes = backend.ReadSmall(LatestHintObject(name, slot));
    if (!bytes.ok()) continue;
    if (auto hint = ParseLatestHint(*bytes)) hints.push_back(std::move(*hint));
  }
  // Newest first; of two hints of one step, the one read first (its record
  // is checked against the commit record anyway).
  std::stable_sort(hints.begin(), hints.end(), [](const LatestHint& a, const LatestHint& b) { return a.step > b.step; });
  hints.erase(std::unique(hints.begin(), hints.end(),
                          [](const LatestHint& a, const LatestHint& b) { return a.step == b.step; }),
              hints.end());
  return hints;
}

void RemoveLatestHintsNaming(Backend& backend, std::string_view name, uint64_t step) {
  for (uint32_t slot = 0; slot < kLatestHintSlots; ++slot) {
    const std::string hint = LatestHintObject(name, slot);
    auto bytes = backend.ReadSmall(hint);
    if (bytes.ok() && ParseHintedStep(*bytes) == step) (void)backend.Remove(hint);
  }
}

}  // namespace sluice
