// The one commit module (doc/format.md, "Why a commit is final"): every
// writer of a step on a store begins, commits and ends here, whatever it
// writes: a save's ranks, a relay, a drain's copy, a repair.
//
//   Begin   a writer id (picked away from slow placement), the writer lock
//           (gc and rm leave the step alone while it lives), and, for a
//           writer that commits, the claim of `COMMIT`, published in the
//           background while the writer writes;
//   ProtectSteps   the refs record, for objects of other steps it names;
//   commit  rank 0 of a save gathers every rank's manifest and seals
//           (CommitAsCoordinator); other ranks name theirs and wait
//           (PointAndWait); a copy whose record is built already seals it
//           (Publish);
//   PublishPeerCommit   a host's copy of a step's peer commit (peer
//           replicas, format/peer_commit.h): the step is safe before any
//           shared tier commits it;
//   End     one rule for the claim, decided here alone: kept once this
//           writer's commit happened, or where its failure is retried (a
//           drain: the retry seals it); taken back otherwise (its seal
//           fenced first, so a seal another writer published on it stays);
//           then the lock goes.
//
// Abort notes tell the ranks of one save attempt at once that no commit
// will come. The writer keeps what is its own: items, data objects, its
// manifest.
//
// Thread-safety: one thread (the claim is published on one of its own).
#ifndef SLUICE_CHECKPOINT_STEP_COMMIT_H_
#define SLUICE_CHECKPOINT_STEP_COMMIT_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "checkpoint/commit_coordinator.h"
#include "format/manifest.h"
#include "format/peer_commit.h"
#include "sluice/backend.h"
#include "sluice/store.h"

namespace sluice {

struct StepCommitOptions {
  uint32_t rank = 0;
  uint32_t world = 1;
  std::string attempt;           // SaveOptions::attempt
  uint64_t rank_timeout_ms = 0;  // StoreOptions::rank_timeout_ms
  // This writer commits the step (rank 0 of a whole save or of a relay, a
  // copy of a committed step): its claim of `COMMIT` starts at Begin. A
  // repair, a part writer and ranks > 0 commit nothing.
  bool commits = false;
  // Abort notes are written and heeded: world > 1, not a part writer, and an
  // attempt id this save alone uses (SaveOptions::attempt_is_unique).
  bool abort_notes = false;
  // A failure of this writer is retried under a new writer (a drain's copy:
  // its pipeline retries it): its claim then stays for the retry to seal,
  // as after a crash. Taking it back (fence, then remove) would leave a
  // fenced claim, which no writer may seal, wherever the store took the
  // fence but failed the removal, and every retry would fail until gc.
  bool keep_claim_on_failure = false;
};

class StepCommit {
 public:
  // Begins a writer of `id` on `backend` under `writer_id` (empty: a new one,
  // whose records keep away from the placements `backend` finds slow, and,
  // for rank `options.rank`'s manifest, its manifest's too): publishes its
  // writer lock, then starts the claim if it commits. A writer whose names
  // are chosen for another store (a part writer's, for its relay there)
  // passes the id.
  static Result<std::unique_ptr<StepCommit>> Begin(Backend& backend, const CheckpointId& id, std::string writer_id,
                                                   StepCommitOptions options);
  // End().
  ~StepCommit();
  StepCommit(const StepCommit&) = delete;
  StepCommit& operator=(const StepCommit&) = delete;

  const std::string& writer_id() const { return writer_id_; }
  bool commits() const { return claim_ != nullptr; }
  // Whether this writer's claim was refused because the step is committed:
  // without waiting, or (Committed) once the claim's publish is done.
  // False for a writer that does not commit.
  bool RefusedAsCommitted();
  bool Committed();

  // Publishes this writer's refs record for `steps` (references.h): gc and
  // rm keep those steps' objects while the writer lives, and its commit
  // keeps them after.
  Status ProtectSteps(const std::set<uint64_t>& steps);

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

  // A committing writer whose record is built (a copy of a committed step:
  // `plan` names every object it reaches) checks and seals it at this
  // writer's claim, as PublishCommit does (commit_coordinator.h): OK once
  // sealed, AlreadyExists when a record was there first (`*existing` gets
  // its bytes where readable).
  Status Publish(CommitPlan plan, std::string* existing);

  // Publishes `record` (of this writer's step) at the step's peer commit
  // object, exclusively: OK also when the same save's record is there (a
  // retry); AlreadyExists naming the other attempt when another save's is.
  // Any writer may: a peer commit claims no `COMMIT` (the durable commit
  // comes later, by the usual protocol, and must list the same manifests).
  Status PublishPeerCommit(const PeerCommitRecord& record);

  // Tells the other ranks of this attempt that it will not commit (where
  // abort notes are used; best effort).
  void PublishAbort(const Status& why);

  // Ends this writer: the claim is kept if this writer committed (or its
  // failure is retried: keep_claim_on_failure) and taken back otherwise;
  // then the writer lock is released (best effort: what a failure leaves
  // is gc's). Idempotent.
  void End();

 private:
  StepCommit(Backend& backend, const CheckpointId& id, std::string writer_id, StepCommitOptions options);
  // Fails when a rank of this attempt gave up: the commit cannot happen.
  Status CheckNoAbort();
  Result<std::string> PublishRankPointer(const std::string& manifest_name);
  Status WaitForCommit(const std::string& own_name);
  // Polls until `done` or the rank timeout (then Unavailable(what_on_timeout)).
  template <typename F>
  Status Poll(F done, const std::string& what_on_timeout);

  Backend& backend_;
  CheckpointId id_;
  std::string writer_id_;
  StepCommitOptions options_;
  std::unique_ptr<CommitClaimant> claim_;  // where this writer commits
  bool committed_ = false;                 // this writer's commit happened
  bool ended_ = false;
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
