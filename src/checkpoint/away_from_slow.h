// The one way the checkpoint layer chooses a name away from a slow
// placement (Placement::Slow, sluice/backend.h): a writer id (which names
// its lock, references and manifest records), a commit claim's seal, the
// latest-step hint's slot. Data objects are placed by the write queue
// instead (Placement::Place).
//
// Thread-safety: a free function.
#ifndef SLUICE_CHECKPOINT_AWAY_FROM_SLOW_H_
#define SLUICE_CHECKPOINT_AWAY_FROM_SLOW_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sluice/backend.h"

namespace sluice {

// Of the candidates k = 0 .. count-1, each naming the records `records(k)`,
// the first none of whose placements is slow; where every one has a slow
// record, the one with the fewest (the lowest k among ties). 0 where the
// store has no Placement (then `records` is never called). No I/O.
uint32_t PickAwayFromSlow(const Backend& backend, uint32_t count,
                          const std::function<std::vector<std::string>(uint32_t k)>& records);

// Whether a name's placement on `backend` may be slow at all (it has a
// Placement): where not, every name is as good as another, and a wait on a
// fixed name costs nothing special. The one other question the checkpoint
// layer asks about placement.
bool NamesMayBeSlow(const Backend& backend);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_AWAY_FROM_SLOW_H_
