// The CheckpointWriter implementation: streams items through a DataWriter,
// publishes this rank's manifest, and runs the commit protocol (rank 0
// gathers every rank's manifest and publishes the commit record; the others
// wait for it). See doc/format.md, "Commit protocol".
#ifndef SLUICE_PIPELINE_CHECKPOINT_WRITER_H_
#define SLUICE_PIPELINE_CHECKPOINT_WRITER_H_

#include <memory>

#include "sluice/store.h"

namespace sluice {

Result<std::unique_ptr<CheckpointWriter>> NewCheckpointWriter(Backend& backend,
                                                              const StoreOptions& options,
                                                              const CheckpointId& id,
                                                              uint32_t rank, uint32_t world,
                                                              const SaveOptions& save);

}  // namespace sluice

#endif  // SLUICE_PIPELINE_CHECKPOINT_WRITER_H_
