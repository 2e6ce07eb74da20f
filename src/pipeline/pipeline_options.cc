// The pipeline's option checks and names, and opening the tiers its options
// name, apart from the machinery (pipeline.cc).
#include "sluice/pipeline.h"

#include "sluice/aligned_buffer.h"
#include "pipeline/deferred_backend.h"
#include "sluice/maintenance.h"
#include "pipeline/staging_arena.h"

namespace sluice {

const char* TierStateName(TierState state) {
  switch (state) {
    case TierState::kPending: return "pending";
    case TierState::kWriting: return "writing";
    case TierState::kCommitted: return "committed";
    case TierState::kFailed: return "failed";
    case TierState::kSkipped: return "skipped";
    case TierState::kSuperseded: return "superseded";
  }
  return "unknown";
}

const char* BacklogPolicyName(BacklogPolicy policy) {
  switch (policy) {
    case BacklogPolicy::kCoalesce: return "coalesce";
    case BacklogPolicy::kDrainEvery: return "drain-every";
  }
  return "unknown";
}

Status PipelineOptions::Validate() const {
  if (tiers.empty()) return Status::InvalidArgument("a pipeline needs at least one tier");
  RETURN_IF_ERROR(store.Validate());
  RETURN_IF_ERROR(StagingArena::CheckBudget(staging_bytes, AlignUp(store.io_bytes, 4096)));
  if (copy_threads == 0 || copy_threads > 256) {
    return Status::InvalidArgument("copy threads " + std::to_string(copy_threads) + " outside 1..256");
  }
  if (lazy_copy_threads == 0 || lazy_copy_threads > 256) {
    return Status::InvalidArgument("lazy copy threads " + std::to_string(lazy_copy_threads) +
                                   " outside 1..256");
  }
  if (max_in_flight == 0) return Status::InvalidArgument("max in-flight saves must be at least 1");
  if (retry_initial_ms > retry_max_ms) {
    return Status::InvalidArgument("first drain retry after " + std::to_string(retry_initial_ms) +
                                   " ms, later than the longest interval, " + std::to_string(retry_max_ms) + " ms");
  }
  if (tier0_per_host) {
    if (tiers.size() > 1 && tiers[1].backlog != BacklogPolicy::kDrainEvery) {
      return Status::InvalidArgument(
          "with a per-host tier 0, tier 1 (" + tiers[1].uri +
          ") must drain every step (backlog policy drain-every): every rank copies its part of every step there");
    }
    if (rebuild_rate_bytes_per_sec > 0) {
      // It would copy every rank onto one host's tier 0.
      return Status::InvalidArgument("a per-host tier 0 is not rebuilt from later tiers (rebuild rate must be 0)");
    }
  }
  return Status::OK();
}

Result<std::unique_ptr<Pipeline>> Pipeline::Open(const PipelineOptions& options) {
  // Bad options (a budget, a layout) are refused before any store is opened
  // (or created).
  RETURN_IF_ERROR(options.Validate());
  std::vector<std::unique_ptr<Store>> stores;
  Status first_error;
  bool opened_any = false;
  for (size_t k = 0; k < options.tiers.size(); ++k) {
    auto b = OpenBackend(options.tiers[k].uri, options.store.create_if_missing);
    if (!b.ok()) {
      // Tier 0 is where saves land: a pipeline that may create stores needs
      // it there. A bad URI is a bad URI on any tier. A later tier that
      // cannot be a store (not a directory, an unknown pool, refused
      // credentials) stays so however long a writing pipeline retries: it
      // fails at open too. What can pass (a cluster down, a device not
      // mounted: Unavailable) is retried, in the background. A reading
      // pipeline (restore, ls) does without any tier but one.
      const bool writes = options.store.create_if_missing;
      const bool can_pass = b.status().code() == StatusCode::kUnavailable;
      // The tier is named where there are several (its URI is in the message).
      const Status named = options.tiers.size() > 1 ? b.status().WithContext("tier " + std::to_string(k)) : b.status();
      if ((k == 0 && writes) || b.status().code() == StatusCode::kInvalidArgument || (writes && !can_pass)) {
        return named;
      }
      if (first_error.ok()) first_error = named;
      b = NewDeferredBackend(options.tiers[k].uri, options.store.create_if_missing, b.status());
    } else {
      opened_any = true;
    }
    stores.push_back(Store::Open(std::move(b).value(), options.store));
  }
  if (!opened_any) return first_error;
  return Open(options, std::move(stores));
}

}  // namespace sluice
