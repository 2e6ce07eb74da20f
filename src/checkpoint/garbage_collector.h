// Garbage collection: mark and sweep over a whole store. Everything a commit
// record reaches, or a live writer may still commit, is kept; every other
// object older than a minimum age goes.
//
// Cost: one walk of the store (store_walk.h), one read of each step's commit
// record and manifests, and, only when something is to be removed, one more
// walk to see what started since the first. Never a listing per step.
// Reads and removals run on several threads, as on a remote store each is
// a round trip.
//
// Thread-safety: thread-safe (no state of its own); any number of gcs, rms
// and writers may run against one store at once.
#ifndef SLUICE_CHECKPOINT_GARBAGE_COLLECTOR_H_
#define SLUICE_CHECKPOINT_GARBAGE_COLLECTOR_H_

#include <cstdint>

#include "sluice/backend.h"
#include "sluice/store.h"

namespace sluice {

// Removes what no commit and no live writer reaches and is older than
// `min_age_ms`. On success, what was removed. An error of the backend stops
// it (what was removed stays removed; the next gc goes on from there).
Result<GcReport> CollectGarbage(Backend& backend, uint64_t min_age_ms);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_GARBAGE_COLLECTOR_H_
