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
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "sluice/pipeline.h"
#include "sluice/store.h"

namespace sluice {

// A reader of (name, step) as `loaded` from tiers[primary], falling back to
// the tiers after it. `recovery` (optional) must outlive the reader.
// `held_elsewhere`: objects the primary is not meant to hold (the ranks a
// host's part lacks, parts.h), read from later tiers without a word of
// fallback and never repaired on the primary.
Result<std::unique_ptr<CheckpointReader>> OpenTieredReader(std::vector<Store*> tiers, size_t primary,
                                                           const std::string& name, uint64_t step,
                                                           const StoreOptions& options,
                                                           ReadRecovery* recovery,
                                                           LoadedCheckpoint loaded,
                                                           std::set<std::string> held_elsewhere = {});

// Pipeline::OpenCheckpoint over `stores` (fastest first): `step` nullopt is
// the newest step committed on any tier, damaged or not; Corruption naming
// the step if no tier holds an intact copy of it. Else a tiered reader from
// the fastest tier whose records load, or which holds a part of the step
// (checkpoint/parts.h) that a later tier's copy completes, or, for tier 0,
// that `elsewhere` completes (Pipeline::OpenCheckpoint).
Result<std::unique_ptr<CheckpointReader>> OpenOnTiers(const std::vector<Store*>& stores, std::string_view name,
                                                      std::optional<uint64_t> step, const StoreOptions& options,
                                                      ReadRecovery* recovery, const ManifestsElsewhere& elsewhere = {});
// Pipeline::LatestGoodStep: the newest step some tier holds intact.
Result<uint64_t> LatestGoodStepOnTiers(const std::vector<Store*>& stores, std::string_view name);

}  // namespace sluice

#endif  // SLUICE_PIPELINE_TIERED_READER_H_
