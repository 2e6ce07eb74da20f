#include "checkpoint/latest_hint.h"

#include <algorithm>
#include <string>

#include "format/layout.h"

namespace sluice {
namespace {

bool SlotSlow(const Backend& backend, std::string_view name, uint32_t slot) {
  const HedgedWrites* hedged = backend.caps().hedged_writes;
  return hedged != nullptr && hedged->PlacementSlow(LatestHintObject(name, slot));
}

// Slot 0 unless it is slow; then the others that are not (slot 0 again if
// every slot is).
std::vector<uint32_t> SlotsToWrite(const Backend& backend, std::string_view name) {
  if (backend.caps().hedged_writes == nullptr || !SlotSlow(backend, name, 0)) return {0};
  std::vector<uint32_t> slots;
  for (uint32_t slot = 1; slot < kLatestHintSlots; ++slot) {
    if (!SlotSlow(backend, name, slot)) slots.push_back(slot);
  }
  if (slots.empty()) slots.push_back(0);
  return slots;
}

// Every slot that is not slow: a writer that did not find slot 0 slow
// wrote it, one that did wrote the others. Slot 0 if every slot is slow.
// With `slow_ones`, the others.
std::vector<uint32_t> SlotsToRead(const Backend& backend, std::string_view name, bool slow_ones) {
  if (backend.caps().hedged_writes == nullptr) return slow_ones ? std::vector<uint32_t>{} : std::vector<uint32_t>{0};
  std::vector<uint32_t> fast, slow;
  for (uint32_t slot = 0; slot < kLatestHintSlots; ++slot) {
    (SlotSlow(backend, name, slot) ? slow : fast).push_back(slot);
  }
  if (fast.empty()) {
    fast.push_back(0);
    slow.erase(slow.begin());
  }
  return slow_ones ? slow : fast;
}

}  // namespace

std::optional<uint64_t> ParseHintedStep(std::string_view bytes) {
  if (bytes.empty() || bytes.size() > 20) return std::nullopt;
  if (!std::all_of(bytes.begin(), bytes.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  // 20 digits may pass UINT64_MAX: such a step has no commit record anyway.
  return std::strtoull(std::string(bytes).c_str(), nullptr, 10);
}

void PublishLatestHint(Backend& backend, std::string_view name, uint64_t step) {
  for (uint32_t slot : SlotsToWrite(backend, name)) {
    const std::string hint = LatestHintObject(name, slot);
    (void)backend.Remove(hint);
    (void)backend.PublishIfAbsent(hint, std::to_string(step));
  }
}

std::vector<uint64_t> ReadLatestHints(Backend& backend, std::string_view name, bool slow_ones) {
  std::vector<uint64_t> steps;
  for (uint32_t slot : SlotsToRead(backend, name, slow_ones)) {
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
