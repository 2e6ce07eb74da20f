// Removal of checkpoints: one step (`rm --step`), or every step of a name
// (`rm --all-steps`), and the fence that keeps a dead writer's claim from
// being sealed while it goes (gc uses it too).
//
// A step is hidden first (its seals, its commit record, its part records,
// the latest-step hints naming it), then what it held goes, except data
// objects another step still names (an incremental save's references) or a
// live writer's refs record protects. Which those are is asked once per
// call, after everything it removes is hidden: removing every step of a
// name costs two walks of the name and one read of each step's records,
// not a round of listings per step.
//
// Thread-safety: thread-safe (no state of its own); rms, gcs and writers may
// run against one store at once (doc/format.md, "Why a commit is final").
#ifndef SLUICE_CHECKPOINT_STEP_REMOVAL_H_
#define SLUICE_CHECKPOINT_STEP_REMOVAL_H_

#include <cstdint>
#include <string>

#include "sluice/backend.h"
#include "sluice/store.h"

namespace sluice {

// NotFound if nothing is under the step; Unavailable if a writer of it is
// running (nothing is removed then).
Status RemoveCheckpoint(Backend& backend, const CheckpointId& id);

// Removes every step of `name`, committed or not; returns how many. Steps a
// writer is in are left, and after the others went, Unavailable names them.
// NotFound if the name holds nothing.
Result<uint64_t> RemoveAllSteps(Backend& backend, const std::string& name);

// Makes the unsealed claim at (name, step)'s COMMIT unsealable before gc or
// rm removes it, so that no seal outlives its claim. Returns the fenced
// seal's name; "" when COMMIT holds a damaged claim (which nobody can seal);
// NotFound when COMMIT is gone (then it must not be removed by name either:
// a claim made since would go); AlreadyExists when it holds a record, or a
// claim that is sealed; the backend's error when COMMIT cannot be read.
Result<std::string> FenceUnsealedClaim(Backend& backend, const std::string& name, uint64_t step);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_STEP_REMOVAL_H_
