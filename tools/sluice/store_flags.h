// Flags every store-touching command shares (--store and the layout knobs),
// and opening the store from them.
#ifndef SLUICE_TOOLS_SLUICE_STORE_FLAGS_H_
#define SLUICE_TOOLS_SLUICE_STORE_FLAGS_H_

#include <memory>
#include <optional>
#include <vector>

#include "flags.h"
#include "sluice/store.h"

namespace sluice::cli {

// --store plus, for writers, --chunk-size, --io-size, --object-size.
std::vector<FlagSpec> StoreFlagSpecs(bool writer);

// Reads the flags of StoreFlagSpecs into options (defaults where absent).
Result<StoreOptions> StoreOptionsFromFlags(const Flags& flags);

Result<std::unique_ptr<Store>> OpenStoreFromFlags(const Flags& flags, bool create);

// --name (validated) and --step (N, or "latest" when allow_latest: nullopt).
Result<std::string> NameFromFlags(const Flags& flags);
Result<std::optional<uint64_t>> StepFromFlags(const Flags& flags, bool allow_latest, bool required);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SLUICE_STORE_FLAGS_H_
