// The tiered reader: reads a checkpoint from the fastest tier holding a
// committed copy, serves a chunk that is missing or bad there from the next
// tier that has it (through that tier's reader, so every chunk is verified),
// and afterwards rewrites each bad object on the faster tier from the good
// copy (CopyObjects: the one read stream into the one write queue). Restores
// (`sluice restore`, sluice.load, DCP reads) get it through
// Pipeline::OpenCheckpoint; scrub and rebuild can reuse it.
//
// Thread-safety: one thread at a time, as any CheckpointReader.
#ifndef SLUICE_PIPELINE_TIERED_READER_H_
#define SLUICE_PIPELINE_TIERED_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "sluice/pipeline.h"
#include "sluice/store.h"

namespace sluice {

// A reader of (name, step) as `loaded` from tiers[primary], falling back to
// the tiers after it. `recovery` (optional) must outlive the reader.
Result<std::unique_ptr<CheckpointReader>> OpenTieredReader(std::vector<Store*> tiers, size_t primary,
                                                           const std::string& name, uint64_t step,
                                                           const StoreOptions& options,
                                                           ReadRecovery* recovery,
                                                           LoadedCheckpoint loaded);

}  // namespace sluice

#endif  // SLUICE_PIPELINE_TIERED_READER_H_
