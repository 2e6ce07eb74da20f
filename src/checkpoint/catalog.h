// Catalog: what a store holds, derived from one walk of its objects
// (store_walk.h): committed and incomplete checkpoints, the latest step of a
// name. Removal: step_removal.h. Garbage collection: garbage_collector.h.
#ifndef SLUICE_CHECKPOINT_CATALOG_H_
#define SLUICE_CHECKPOINT_CATALOG_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "sluice/store.h"

namespace sluice {

Result<std::vector<CheckpointInfo>> ListCheckpoints(Backend& backend, std::string_view name,
                                                    bool include_incomplete);
// The highest step of `name` with a commit record, and why it is damaged
// ("" if intact: records verify, data objects all there). NotFound if none.
struct NewestStep {
  uint64_t step = 0;
  std::string problem;
};
Result<NewestStep> NewestCommittedStep(Backend& backend, std::string_view name);
// The highest committed step of `name`; NotFound if none, Corruption naming
// it if it is damaged: an older step is used only when asked for, through
// LatestGoodStep.
Result<uint64_t> LatestStep(Backend& backend, std::string_view name);
// The highest intact committed step; NotFound if none.
Result<uint64_t> LatestGoodStep(Backend& backend, std::string_view name);
// True if a writer (a save, or a drain into this store) of the step is, or
// may be, still running.
bool AnyLiveWriter(Backend& backend, const std::string& name, uint64_t step,
                   std::string_view except_writer = {});

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_CATALOG_H_
