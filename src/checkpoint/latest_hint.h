// The latest-step hint of a checkpoint name (format/layout.h,
// LatestHintObject): rank 0 rewrites it after each commit, and the next
// incremental save reads it to find its base without a listing (a listing
// may wait on every placement of the store, a slow one's too:
// Backend::caps().child_listing). Best effort throughout: a hint lost, lagging or garbled costs a
// listing or an older base, never correctness, because readers check the
// step's commit record before building on it.
//
// A hint carries the step's commit record after the step number, when the
// record is small enough: the next save then takes it for its first look at
// the record instead of reading it (one wait fewer where the record's
// placement is slow), and still reads the record once after
// publishing its refs record, and builds on the step only if the bytes
// match (references.h). Where the record was published at a claim's seal
// (format/commit_record.h, CommitClaim), the hint names the seal too, and
// that read is of the seal alone, placed away from slow placements, not of the
// claim at `COMMIT`, whose placement was slow when it was made.
//
// Slots: where the backend can tell that a name's placement is slow
// (Placement::Slow), a save writes slot 0 while it is not, and
// else the first slot that is not; a reader asks that same slot first. So a
// hint whose fixed name falls in a slow placement costs no waits behind
// it. Elsewhere only slot 0 is used.
//
// Thread-safety: thread-safe (no state of its own).
#ifndef SLUICE_CHECKPOINT_LATEST_HINT_H_
#define SLUICE_CHECKPOINT_LATEST_HINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/backend.h"

namespace sluice {

// A hint's records beyond this size are left out (the hint names the step
// alone): a commit record of a few hundred ranks fits.
constexpr size_t kMaxHintedRecordBytes = 64 << 10;

struct LatestHint {
  uint64_t step = 0;
  // The step's commit record as its writer published it, or empty (an older
  // writer's hint, or a record too large). Unchecked: a reader decodes it.
  std::string record;
  // The seal it was published at, or empty (published at `COMMIT`).
  // Unchecked: a reader checks it names a seal of the step (IsSealOf).
  std::string seal;
};

// Records `step` (and its commit record `record`, if it is at most
// kMaxHintedRecordBytes, with the `seal` it was published at, if any) as
// `name`'s latest: remove, then publish, per slot.
void PublishLatestHint(Backend& backend, std::string_view name, uint64_t step,
                       std::string_view record = {}, std::string_view seal = {});
// What the slot a save writes now holds (none, or one hint); with
// `other_slots`, what every other slot holds, newest step first, one hint
// per step: a caller that found no committed step in the first asks them
// before listing (the newest step may have been written while another slot
// was preferred, e.g. slot 0 before its placement turned slow).
std::vector<LatestHint> ReadLatestHints(Backend& backend, std::string_view name, bool other_slots = false);
// Removes every slot that names `step` (its checkpoint is being removed).
void RemoveLatestHintsNaming(Backend& backend, std::string_view name, uint64_t step);
// A hint's bytes: 1 to 20 decimal digits, then optionally a newline and the
// commit record, or a newline, the seal's name, a newline and the record (a
// record starts with its magic, a seal's name never does); nullopt for
// anything else.
std::optional<LatestHint> ParseLatestHint(std::string_view bytes);
// The step a hint's bytes name (ParseLatestHint's), or nullopt.
std::optional<uint64_t> ParseHintedStep(std::string_view bytes);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_LATEST_HINT_H_
