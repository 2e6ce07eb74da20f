// Rebuild: the resilver. Repopulates a tier that was lost (an empty or
// replaced directory, a reformatted disk, a recreated RADOS pool) from the
// other tiers: the newest keep_last committed steps of each name, newest
// first, each copied verbatim and every chunk verified on the way (the
// drain's path: the one read stream into the one write queue, committed with
// the same atomic publish), its writes paced by a token bucket so that the
// training job keeps the device.
//
// A killed rebuild leaves only uncommitted objects in the step it was
// copying (gc removes them); the next rebuild copies that step again.
// Restores meanwhile read whichever tier holds a committed copy.
//
// Thread-safety: Rebuild runs on the caller's thread.
#ifndef SLUICE_PIPELINE_REBUILD_H_
#define SLUICE_PIPELINE_REBUILD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sluice/backend.h"
#include "sluice/store.h"

namespace sluice {

struct RebuildStep {
  std::string name;
  uint64_t step = 0;
  // "rebuilt" (copied from `source`), "present" (already committed intact
  // there), "damaged" (a damaged copy is there: scrub repairs it, rebuild
  // leaves it), "failed" (reason).
  std::string state;
  size_t source = 0;
  std::string reason;
  uint64_t bytes = 0;
  double seconds = 0;
};

struct RebuildOptions {
  size_t target = 0;                // index of the tier to repopulate
  uint32_t keep_last = 1;           // newest steps of each name to restore there; 0: all
  std::string name;                 // only this name; empty: all
  uint64_t rate_bytes_per_sec = 0;  // cap on writes into the target; 0: none
  StoreOptions store;               // io_bytes
  const std::atomic<bool>* stop = nullptr;  // optional
  // Called as each step is done. Optional.
  std::function<void(const RebuildStep&)> on_step;
};

struct RebuildReport {
  std::vector<RebuildStep> steps;
  std::vector<std::string> tier_errors;  // source tiers that could not be listed
  uint64_t bytes = 0;
  double seconds = 0;
  bool stopped = false;
  bool ok() const;  // nothing failed
};

Result<RebuildReport> Rebuild(const std::vector<Backend*>& tiers, const RebuildOptions& options);

// What Rebuild would restore on `target`: true when it holds no committed
// step of any name while another tier holds some (a lost tier).
bool TierLooksLost(const std::vector<Backend*>& tiers, size_t target);

}  // namespace sluice

#endif  // SLUICE_PIPELINE_REBUILD_H_
