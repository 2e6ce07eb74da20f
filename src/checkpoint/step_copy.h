// A committed step copied from one store to another as the same save: the
// primitive under drains, rebuilds and relays of a whole step. The copy is
// written under the names of a writer of its own on the destination
// (checkpoint/copies.h; its data objects placed and hedged where the
// destination has a Placement), every chunk is verified against its crc on
// the way, and it is committed there by the one commit module
// (step_commit.h) with the claim and seal a save uses (doc/format.md,
// "Tiers and drains").
//
// A killed or failed copy leaves only uncommitted objects, which gc
// removes, and its claim, which the next copy of the step (a retry) seals
// under names of its own (step_commit.h, keep_claim_on_failure).
//
// Thread-safety: a free function; two copies of one step may run at once.
#ifndef SLUICE_CHECKPOINT_STEP_COPY_H_
#define SLUICE_CHECKPOINT_STEP_COPY_H_

#include <cstdint>
#include <string>

#include "engine/object_copy.h"
#include "sluice/backend.h"

namespace sluice {

// Copies (name, step) from `src` to `dst`. OK if the same save is committed
// on `dst` afterwards (also when it already was, or another copier of the
// step committed it meanwhile); AlreadyExists if another save of the step
// is. Two copiers of one step may run at once: each copies under its own
// names and exactly one copy is committed. `control` caps, stops and counts
// the copy (engine/object_copy.h).
Status CopyCommittedStep(Backend& src, Backend& dst, const std::string& name, uint64_t step,
                         const CopyControl& control);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_STEP_COPY_H_
