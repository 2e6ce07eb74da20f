// Names: what a checkpoint, a step and an item key may be, and how a
// checkpoint is named in messages. Shared by every entry point (and by the
// CLI before it touches a store) and by the format's decoders.
//
// Thread-safety: pure functions.
#ifndef SLUICE_NAMES_H_
#define SLUICE_NAMES_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice {

// Names: valid UTF-8 of 1..255 bytes, no '/', no control characters (C0,
// DEL, C1), not "." or "..": text that is shown and typed back. Item keys: relative '/'-separated paths, 1..4096 bytes, no empty,
// "." or ".." components, no NUL.
Status ValidateCheckpointName(std::string_view name);
Status ValidateItemKey(std::string_view key);
// An item as a save takes it: a valid key and metadata of at most 16 MiB.
Status ValidateItem(std::string_view key, std::string_view metadata);
// Parses a step: decimal digits only, fits in uint64.
Result<uint64_t> ParseStep(std::string_view text);

// "checkpoint NAME@STEP": how every message names one checkpoint.
std::string CheckpointLabel(std::string_view name, uint64_t step);

}  // namespace sluice

#endif  // SLUICE_NAMES_H_
