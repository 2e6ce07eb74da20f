// The pipeline's option checks and names, apart from the machinery.
#include "sluice/pipeline.h"

#include "io/aligned_buffer.h"
#include "pipeline/staging_arena.h"

namespace sluice {

const char* TierStateName(TierState state) {
  switch (state) {
    case TierState::kPending: return "pending";
    case TierState::kWriting: return "writing";
    case TierState::kCommitted: return "committed";
    case TierState::kFailed: return "failed";
    case TierState::kSkipped: return "skipped";
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
  if (max_in_flight == 0) return Status::InvalidArgument("max in-flight saves must be at least 1");
  if (retry_initial_ms > retry_max_ms) {
    return Status::InvalidArgument("first drain retry after " + std::to_string(retry_initial_ms) +
                                   " ms, later than the longest interval, " + std::to_string(retry_max_ms) + " ms");
  }
  return Status::OK();
}

}  // namespace sluice
