// Flags every store-touching command shares (--store and the layout knobs),
// and opening the store from them.
#ifndef SLUICE_TOOLS_SLUICE_STORE_FLAGS_H_
#define SLUICE_TOOLS_SLUICE_STORE_FLAGS_H_

#include <memory>
#include <optional>
#include <vector>

#include "flags.h"
#include "sluice/pipeline.h"
#include "sluice/store.h"

namespace sluice::cli {

// --store / --tier plus, for writers, --chunk-size, --io-size, --object-size.
std::vector<FlagSpec> StoreFlagSpecs(bool writer);
// --rate-limit TIER=RATE, --keep-last TIER=K and --backlog-policy
// [TIER=]POLICY (repeatable), for commands
// that write into tiers in the background (save, drain).
std::vector<FlagSpec> TierPolicyFlagSpecs();
// --backlog-policy [TIER=]POLICY alone (ls takes it to show superseded steps).
FlagSpec BacklogPolicyFlagSpec();

// The tiers, fastest first: the --tier values, or the lone --store.
// InvalidArgument if neither or both are given.
Result<std::vector<std::string>> TierUrisFromFlags(const Flags& flags);
// Tiers with their --rate-limit/--keep-last policies and the store options.
// Staging is one I/O buffer unless the caller sets it.
Result<PipelineOptions> PipelineOptionsFromFlags(const Flags& flags, bool create);

// Reads the flags of StoreFlagSpecs into options (defaults where absent).
Result<StoreOptions> StoreOptionsFromFlags(const Flags& flags);

Result<std::unique_ptr<Store>> OpenStoreFromFlags(const Flags& flags, bool create);

// --name (validated) and --step (N, or "latest" or "latest-good" when
// allow_latest: nullopt).
Result<std::string> NameFromFlags(const Flags& flags);
// --name where given (validated); empty where not (every name).
Result<std::string> OptionalNameFromFlags(const Flags& flags);
Result<std::optional<uint64_t>> StepFromFlags(const Flags& flags, bool allow_latest, bool required);
// True for --step latest-good: a damaged newest step is skipped, and said so.
bool LatestGoodFromFlags(const Flags& flags);
// What every command that reads one checkpoint takes, parsed once:
// --store/--tier with the store options, --name, --step (N, latest,
// latest-good) and --json. Errors are usage errors (InvalidArgument).
struct CheckpointArgs {
  PipelineOptions pipeline;       // the tiers, fastest first, and the store options
  std::string name;
  std::optional<uint64_t> step;   // nullopt: the newest
  bool latest_good = false;       // --step latest-good
  bool json = false;
  std::vector<std::string> uris() const;
};
Result<CheckpointArgs> CheckpointArgsFromFlags(const Flags& flags);

// What the commands that walk every tier's copies take (scrub, rebuild),
// parsed once: the tiers and store options, an optional --name, and one
// --rate-limit for every tier (no TIER=). Errors are usage errors.
struct TierWalkArgs {
  std::vector<std::string> uris;
  StoreOptions store;
  std::string name;             // empty: every name
  uint64_t rate_bytes_per_sec;  // 0: no cap
};
Result<TierWalkArgs> TierWalkArgsFromFlags(const Flags& flags);

// Opens NAME@STEP (nullopt: the newest) through the pipeline. With
// latest_good, a damaged newest step is named on stderr and the newest
// intact step opened instead; without, it is an error naming the step.
Result<std::unique_ptr<CheckpointReader>> OpenCheckpointFromFlags(Pipeline& pipeline, const std::string& name,
                                                                  std::optional<uint64_t> step, bool latest_good,
                                                                  ReadRecovery* recovery);
// The same for one store (verify).
Result<uint64_t> ResolveStepOnStore(Store& store, const std::string& name, std::optional<uint64_t> step,
                                    bool latest_good);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SLUICE_STORE_FLAGS_H_
