#include "checkpoint/latest_hint.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "format/layout.h"

namespace sluice {
namespace {

bool SlotSlow(const Backend& backend, std::string_view name, uint32_t slot) {
  const HedgedWrites* hedged = backend.caps().hedged_writes;
  return hedged != nullptr && hedged->PlacementSlow(LatestHintObject(name, slot));
}

// The slot a save writes and a reader asks first: slot 0 unless its
// placement is slow, else the first that is not (slot 0 if every one is:
// with one slow OSD of six in a 3-host pool, one name in 256).
uint32_t PreferredSlot(const Backend& backend, std::string_view name) {
  if (backend.caps().hedged_writes == nullptr) return 0;
  for (uint32_t slot = 0; slot < kLatestHintSlots; ++slot) {
    if (!SlotSlow(backend, name, slot)) return slot;
  }
  return 0;
}

}  // namespace

std::optional<uint64_t> ParseHintedStep(std::string_view bytes) {
  if (bytes.empty() || bytes.size() > 20) return std::nullopt;
  if (!std::all_of(bytes.begin(), bytes.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  // 20 digits may pass UINT64_MAX: such a step has no commit record anyway.
  return std::strtoull(std::string(bytes).c_str(), nullptr, 10);
}

void PublishLatestHint(Backend& backend, std::string_view name, uint64_t step) {
  const std::string hint = LatestHintObject(name, PreferredSlot(backend, name));
  (void)backend.Remove(hint);
  (void)backend.PublishIfAbsent(hint, std::to_string(step));
}

std::vector<uint64_t> ReadLatestHints(Backend& backend, std::string_view name, bool other_slots) {
  std::vector<uint32_t> slots;
  const uint32_t preferred = PreferredSlot(backend, name);
  if (!other_slots) {
    slots.push_back(preferred);
  } else if (backend.caps().hedged_writes != nullptr) {
    for (uint32_t slot = 0; slot < kLatestHintSlots; ++slot) {
      if (slot != preferred) slots.push_back(slot);
    }
  }
  std::vector<uint64_t> steps;
  for (uint32_t slot : slots) {
    auto bytes = backend.ReadSmall(LatestHintObject(name, slot));
    if (!bytes.ok()) continue;
    if (auto step = ParseHintedStep(*bytes)) steps.push_back(*step);
  }
  std::sort(steps.rbegin(), steps.rend());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

void RemoveLatestHintsNaming(Backend& backend, std::string_view name, uint64_t step) {
  for (uint32_t slot = 0; slot < kLatestHintSlots; ++slot) {
    const std::string hint = LatestHintObject(name, slot);
    auto bytes = backend.ReadSmall(hint);
    if (bytes.ok() && ParseHintedStep(*bytes) == step) (void)backend.Remove(hint);
  }
}

}  // namespace sluice
