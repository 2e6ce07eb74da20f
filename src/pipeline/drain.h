// Draining, around the copy of one committed step from tier to tier
// (checkpoint/step_copy.h): what `ls` shows about it (drain notes), and
// which steps each tier drains, keeps and removes (retention).
//
// Thread-safety: free functions; callers serialize per (tier, step).
#ifndef SLUICE_PIPELINE_DRAIN_H_
#define SLUICE_PIPELINE_DRAIN_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "sluice/backend.h"
#include "sluice/pipeline.h"
#include "sluice/store.h"

namespace sluice {

// Drain notes: kept in the source tier's step, one per destination tier.
void WriteDrainNote(Backend& src, const std::string& name, uint64_t step,
                    const std::string& dst_uri, const std::string& reason);
void ClearDrainNote(Backend& src, const std::string& name, uint64_t step, const std::string& dst_uri);
// The reason recorded for `dst_uri`, empty if none.
std::string ReadDrainNote(Backend& src, const std::string& name, uint64_t step,
                          const std::string& dst_uri);

// Retention and drain planning for one name, from which steps each tier
// holds committed, each tier's keep_last (0 keeps all) and backlog policy,
// and (optional) the steps being drained into each tier right now.
//
// Under kCoalesce a step waiting for tier k is superseded there once a newer
// step is committed on k or waiting for it too, unless it is draining now
// (its source must stay): only the newest waiting step is due.
struct TierPlan {
  std::set<uint64_t> keep;        // steps tier k should hold
  std::set<uint64_t> to_drain;    // in keep, not yet committed on tier k, due to drain there
  std::set<uint64_t> superseded;  // in keep, not committed on k, never to drain there
  std::set<uint64_t> to_remove;   // committed on k, outside keep, safe to remove
};
std::vector<TierPlan> PlanTiers(const std::vector<std::set<uint64_t>>& committed,
                                const std::vector<TierOptions>& tiers,
                                const std::vector<std::set<uint64_t>>& draining = {});

}  // namespace sluice

#endif  // SLUICE_PIPELINE_DRAIN_H_
