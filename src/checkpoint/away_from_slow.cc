#include "checkpoint/away_from_slow.h"

namespace sluice {

uint32_t PickAwayFromSlow(const Backend& backend, uint32_t count,
                          const std::function<std::vector<std::string>(uint32_t k)>& records) {
  const Placement* placement = backend.caps().placement;
  if (placement == nullptr) return 0;
  uint32_t best = 0;
  size_t fewest = SIZE_MAX;
  for (uint32_t k = 0; k < count && fewest > 0; ++k) {
    size_t slow = 0;
    for (const auto& name : records(k)) slow += placement->Slow(name) ? 1 : 0;
    if (slow < fewest) {
      fewest = slow;
      best = k;
    }
  }
  return best;
}

bool NamesMayBeSlow(const Backend& backend) { return backend.caps().placement != nullptr; }

}  // namespace sluice
