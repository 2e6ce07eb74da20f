// What `sluice ls` and drains see of a pipeline's tiers: which names and
// steps each tier holds committed, what retention wants of each tier
// (PlanTiers, drain.h), and each checkpoint's state on every tier.
//
// Thread-safety: free functions over stores (thread-safe as Store is).
#ifndef SLUICE_PIPELINE_TIER_LISTING_H_
#define SLUICE_PIPELINE_TIER_LISTING_H_

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/drain.h"
#include "sluice/pipeline.h"
#include "sluice/store.h"

namespace sluice {

// `name` alone if given; else every name committed on any tier (an error
// only if no tier could be listed).
Result<std::set<std::string>> NamesOnAnyTier(const std::vector<Store*>& stores, std::string_view name);

// Retention and drain plans of `name` from what each tier holds committed; a
// tier that cannot be listed counts as holding nothing and sets
// *unreachable (optional).
// `draining` as in PlanTiers.
std::vector<TierPlan> PlanTiersOf(const std::vector<Store*>& stores, const std::vector<TierOptions>& tiers,
                                  const std::string& name, bool* unreachable,
                                  const std::vector<std::set<uint64_t>>& draining = {});

// Every checkpoint on any tier (of `name`, or all), with its state on each:
// committed, draining (a live writer holds the step there), pending,
// failed (with the drain note's reason, or the tier cannot be listed),
// superseded (the tier's backlog policy skips it for a newer step), or
// absent (nothing earlier holds it, or retention keeps it off the tier).
Result<std::vector<TieredCheckpointInfo>> ListTiered(const std::vector<Store*>& stores,
                                                     const std::vector<TierOptions>& tiers,
                                                     std::string_view name);

// Why a new save may not start with backlog `now` (per tier) under the
// limits (PipelineOptions::max_backlog_*; both 0: no limit), naming the
// tier; empty if it may.
std::string BacklogOverLimit(const std::vector<TierBacklog>& now, uint32_t max_steps, uint64_t max_bytes);

}  // namespace sluice

#endif  // SLUICE_PIPELINE_TIER_LISTING_H_
