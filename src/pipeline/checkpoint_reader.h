// Reading committed checkpoints: loading and cross-checking the commit
// record and manifests, range reads, whole-checkpoint streaming, verify.
#ifndef SLUICE_PIPELINE_CHECKPOINT_READER_H_
#define SLUICE_PIPELINE_CHECKPOINT_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/commit_record.h"
#include "format/manifest.h"
#include "sluice/store.h"

namespace sluice {

// A commit record with its manifests, each checked against the size and
// crc32c the commit recorded.
struct LoadedCheckpoint {
  CommitRecord commit;
  std::vector<Manifest> manifests;  // indexed by rank
};

Result<LoadedCheckpoint> LoadCheckpoint(Backend& backend, std::string_view name, uint64_t step);

Result<std::unique_ptr<CheckpointReader>> NewCheckpointReader(Backend& backend,
                                                              const StoreOptions& options,
                                                              LoadedCheckpoint loaded);

// Reads every chunk and returns the bad ones (never stops at the first).
Result<VerifyReport> VerifyCheckpoint(Backend& backend, const StoreOptions& options,
                                      const LoadedCheckpoint& loaded);

CheckpointInfo InfoOf(const CommitRecord& commit);

}  // namespace sluice

#endif  // SLUICE_PIPELINE_CHECKPOINT_READER_H_
