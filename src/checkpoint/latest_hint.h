// The latest-step hint of a checkpoint name (format/layout.h,
// LatestHintObject): rank 0 rewrites it after each commit, and the next
// incremental save reads it to find its base without a listing (a RADOS
// listing walks every placement group of the pool: seconds when one OSD is
// slow). Best effort throughout: a hint lost, lagging or garbled costs a
// listing or an older base, never correctness, because readers check the
// step's commit record before building on it.
//
// Slots: where the backend can tell that a name's placement is slow
// (HedgedWrites::PlacementSlow), a save writes slot 0 while it is not, and
// else the first slot that is not; a reader asks that same slot first. So a
// hint whose fixed name falls in a slow OSD's placement group costs no
// waits in that OSD's queue. Elsewhere only slot 0 is used.
//
// Thread-safety: thread-safe (no state of its own).
#ifndef SLUICE_CHECKPOINT_LATEST_HINT_H_
#define SLUICE_CHECKPOINT_LATEST_HINT_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "sluice/backend.h"

namespace sluice {

// Records `step` as `name`'s latest (remove, then publish, per slot).
void PublishLatestHint(Backend& backend, std::string_view name, uint64_t step);
// The step the slot a save writes now names (none, or one); with
// `other_slots`, the steps every other slot names, newest first, without
// repeats: a caller that found no committed step in the first asks them
// before listing (the newest step may have been written while another slot
// was preferred, e.g. slot 0 before its placement turned slow).
std::vector<uint64_t> ReadLatestHints(Backend& backend, std::string_view name, bool other_slots = false);
// Removes every slot that names `step` (its checkpoint is being removed).
void RemoveLatestHintsNaming(Backend& backend, std::string_view name, uint64_t step);
// The step a hint's bytes name: 1 to 20 decimal digits; nullopt otherwise.
std::optional<uint64_t> ParseHintedStep(std::string_view bytes);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_LATEST_HINT_H_
