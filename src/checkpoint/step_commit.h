// The coordination of one step's ranks on one store (doc/format.md,
// "Commit protocol"), as a rank writer (checkpoint_writer.h) runs it once
// its own manifest is published: rank 0 gathers every rank's manifest
// (rank_gatherer.h) and seals the commit record (commit_coordinator.h);
// every other rank names its manifest at a rank pointer and waits for that
// commit; abort notes tell the ranks of one attempt at once that no commit
// will come. The rank writer keeps what is its own: items, data objects,
// its manifest, its lock.
//
// Thread-safety: one thread (the claim is published on one of its own).
#ifndef SLUICE_CHECKPOINT_STEP_COMMIT_H_
#define SLUICE_CHECKPOINT_STEP_COMMIT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "checkpoint/commit_coordinator.h"
#include "format/manifest.h"
#include "sluice/backend.h"
#include "sluice/store.h"

namespace sluice {

struct StepCommitOptions {
  uint32_t rank = 0;
  uint32_t world = 1;
  std::string attempt;           // SaveOptions::attempt
  uint64_t rank_timeout_ms = 0;  // StoreOptions::rank_timeout_ms
  // This writer commits the step (rank 0 of a whole save or of a relay):
  // its claim of `COMMIT` starts at construction.
  bool commits = false;
  // Abort notes are written and heeded: world > 1, not a part writer, and an
  // attempt id this save alone uses (SaveOptions::attempt_is_unique).
  bool abort_notes = false;
};

class StepCommit {
 public:
  // Made after the writer's lock is published (the claim must be).
  StepCommit(Backend& backend, const CheckpointId& id, const std::string& writer_id, StepCommitOptions options);

  bool commits() const { return claim_ != nullptr; }
  // Whether this writer's claim was refused because the step is committed:
  // without waiting, or (Committed) once the claim's publish is done.
  // False for a writer that does not commit.
  bool RefusedAsCommitted();
  bool Committed();

  // Rank 0: waits for every rank's manifest, then seals the commit record
  // that names them all (`own_name`, `own_bytes`: this rank's manifest as
  // published, `own` decoded). Unavailable when a rank did not publish
  // within the rank timeout; the other ranks are told (abort note).
  Status CommitAsCoordinator(const std::string& own_name, const std::string& own_bytes, const Manifest& own);
  // After CommitAsCoordinator: the record and the seal it went to.
  const std::string& committed_record() const { return committed_record_; }
  const std::string& committed_seal() const { return committed_seal_; }

  // Ranks > 0: names `own_name` at the first free rank pointer, waits for
  // rank 0's commit and removes the pointer. AlreadyExists when the commit
  // names another writer's manifest for this rank.
  Status PointAndWait(const std::string& own_name);

  // Tells the other ranks of this attempt that it will not commit (where
  // abort notes are used; best effort).
  void PublishAbort(const Status& why);

  // Ends the claim: kept once this writer committed, taken back otherwise
  // (CommitClaimant). Idempotent.
  void EndClaim() { claim_.reset(); }

 private:
  // Fails when a rank of this attempt gave up: the commit cannot happen.
  Status CheckNoAbort();
  Result<std::string> PublishRankPointer(const std::string& manifest_name);
  Status WaitForCommit(const std::string& own_name);
  // Polls until `done` or the rank timeout (then Unavailable(what_on_timeout)).
  template <typename F>
  Status Poll(F done, const std::string& what_on_timeout);

  Backend& backend_;
  CheckpointId id_;
  StepCommitOptions options_;
  std::unique_ptr<CommitClaimant> claim_;  // where this writer commits
  std::string committed_record_;
  std::string committed_seal_;
};

// Publishes the abort note of save attempt `attempt` of `id` (rank `rank`
// gave up, for `reason`): the other ranks of that attempt then fail at once
// instead of at their timeout. Best effort; a note already there (another
// rank's) is left as it is. Only for attempt ids used once.
void PublishAbortNote(Backend& backend, const CheckpointId& id, const std::string& attempt, uint32_t rank,
                      const std::string& reason);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_STEP_COMMIT_H_
