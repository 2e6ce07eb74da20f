// Rank 0's side of a multi-rank commit (doc/format.md, "Commit protocol"):
// each rank names its manifest at the first free of its rank pointers;
// rank 0 finds them there, judges which manifest of each rank belongs to
// this save attempt (its writer still alive, the newest of a rank), and
// turns them into the commit record and the plan that publishes it
// (commit_coordinator.h). No listing: on RADOS that walks every placement
// group of the pool.
//
// Thread-safety: one thread.
#ifndef SLUICE_CHECKPOINT_RANK_GATHERER_H_
#define SLUICE_CHECKPOINT_RANK_GATHERER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "checkpoint/commit_coordinator.h"
#include "format/manifest.h"
#include "sluice/backend.h"
#include "sluice/store.h"

namespace sluice {

// One rank's manifest as the commit record names it.
struct RankManifest {
  std::string object;
  uint64_t bytes = 0;
  uint32_t crc = 0;
  Manifest manifest;
};

class RankGatherer {
 public:
  // Rank 0 of save attempt `attempt` of `id` over `world` ranks, whose own
  // manifest is `own`.
  RankGatherer(Backend& backend, const CheckpointId& id, uint32_t world, std::string attempt, RankManifest own);

  // One round of looking: true once every rank has a manifest of this
  // attempt and every rank's pointers were read to their end (so that a
  // newer writer of a rank, a relaunch whose crashed predecessor still
  // counts as alive, wins over an older one found first); false: look
  // again later. Errors are the backend's.
  Result<bool> Gather();
  // The ranks with no manifest yet, as "1,3".
  std::string Missing() const;
  // The commit of what Gather() found (REQUIRES: it returned true), for
  // `label` ("checkpoint NAME@STEP"), created at `created_unix_ms`.
  // InvalidArgument when two ranks save one item key: keys name restored
  // files.
  Result<CommitPlan> Plan(const std::string& label, int64_t created_unix_ms) const;

 private:
  // Judges manifest `object` as rank `rank`'s; false where it cannot tell
  // yet (asked again on the next round).
  bool Consider(const std::string& object, uint32_t rank);
  struct Round {
    bool extended = false;    // a rank's pointers reach past what was probed
    bool unresolved = false;  // a pointer could not be judged yet
  };
  // One Stat of the unsettled pointers (of the ranks still missing only,
  // where asked), then each one found is judged.
  Result<Round> ProbeRound(bool missing_ranks_only);
  bool AllChosen() const;

  Backend& backend_;
  const CheckpointId id_;
  const uint32_t world_;
  const std::string attempt_;
  std::vector<std::optional<RankManifest>> chosen_;
  std::unordered_set<std::string> rejected_;  // manifests judged not of this attempt
  // The ones before a rank's first free pointer (earlier writers of that
  // rank) are judged once and then not asked about again. Probing runs a
  // few pointers past the highest seen, and a hole (a pointer gc removed
  // before this save, which a writer of the rank may take again) stays
  // probed.
  struct RankPointers {
    uint32_t next = 0;  // every pointer below it is settled
    uint32_t end = 0;   // probe below this
    std::set<uint32_t> settled;
  };
  std::vector<RankPointers> pointers_;
};

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_RANK_GATHERER_H_
