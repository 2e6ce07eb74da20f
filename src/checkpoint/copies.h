// Copies of one save on different stores. A drain writes its copy under
// names of its own: its writer's manifests and data objects, placed away
// from slow placements where the destination has a Placement (so a copy is
// hedged like a save). Two copies of one save therefore hold the same
// items, chunks and bytes under different object and manifest names, and
// every comparison of copies across stores goes through here, never
// through the bytes of their records.
//
// Thread-safety: pure functions.
#ifndef SLUICE_CHECKPOINT_COPIES_H_
#define SLUICE_CHECKPOINT_COPIES_H_

#include <map>
#include <string>

#include "checkpoint/checkpoint_reader.h"

namespace sluice {

// Whether two commit records commit the same save: every field but the
// manifests' names, sizes and crcs (a copy's manifests name its objects).
bool SameSave(const CommitRecord& a, const CommitRecord& b);
// Whether two loaded copies hold the same save: the same record (above)
// and manifests that differ at most in their writer id and in their data
// objects' names, index for index (same count, same sizes, same items and
// chunks).
bool SameSave(const LoadedCheckpoint& a, const LoadedCheckpoint& b);

// Each data object name `from`'s manifests give, mapped to the name `to`'s
// give the same object (same rank, same index). REQUIRES SameSave(from, to).
std::map<std::string, std::string> ObjectNamesAcross(const LoadedCheckpoint& from, const LoadedCheckpoint& to);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_COPIES_H_
