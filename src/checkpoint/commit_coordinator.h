// The last phases of every commit, for a multi-rank save's rank 0 and for a
// drain alike (doc/format.md, "Commit protocol"):
//   claim (when the work begins) -> gather manifests (the caller: rank
//   pointers for a save, the source's commit record for a drain) -> check
//   objects -> seal.
// Every commit has one shape: `COMMIT` holds a claim (format/commit_record.h,
// CommitClaim) and the record is published at the seal the claim names.
// The claim is published in the background from the moment the work begins
// (CommitClaimant), so that where `COMMIT`'s placement is slow (on RADOS,
// doc/ceph.md) its wait overlaps the data writes; the
// seal is named away from slow placements. Exactly one publish of a seal
// name wins, so exactly one writer commits the step. Checking that every
// object the commit names is there and whole, then sealing atomically
// (PublishIfAbsent), means no reader can ever see a torn checkpoint: gc and
// rm never remove what a live writer's lock or refs record protects, nor a
// claim that is sealed, so the seal of a writer's own claim is final
// (doc/format.md, "Why a commit is final"). A writer that seals a claim
// another writer left reads it once more, and takes its seal back if gc or
// rm removed it meanwhile.
//
// Thread-safety: PublishCommit is a free function; a CommitClaimant is used
// by one thread (its claim runs on a thread of its own).
#ifndef SLUICE_CHECKPOINT_COMMIT_COORDINATOR_H_
#define SLUICE_CHECKPOINT_COMMIT_COORDINATOR_H_

#include <cstdint>
#include <future>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/backend.h"
#include "sluice/status.h"

namespace sluice {

// The claim of one step's `COMMIT` by one writer (a save's rank 0, a relay,
// a drain), published in the background from construction. Made after the
// writer's lock, so that gc, which keeps a step with a live writer, never
// takes a claim from under its writer.
class CommitClaimant {
 public:
  // What became of the claim: made (ours), refused because the step is
  // committed, or anything else (another writer's claim, a failed
  // publish): the commit then finds out what `COMMIT` holds.
  enum class Outcome { kOurs, kCommitted, kOther };

  // Starts claiming (name, step)'s `COMMIT` for `writer`, naming a seal
  // placed away from slow placements.
  CommitClaimant(Backend& backend, std::string name, uint64_t step, std::string_view writer);
  // Waits for the claim's publish. Unless KeepClaim was called, then takes
  // the claim back, for a commit that did not happen: its seal is fenced
  // first (kFencedSeal), so that a seal another writer of the step
  // published meanwhile (it found the claim and committed) stays, with the
  // claim. Best effort: what a failure leaves is gc's.
  ~CommitClaimant();
  CommitClaimant(const CommitClaimant&) = delete;
  CommitClaimant& operator=(const CommitClaimant&) = delete;

  // The seal this writer's record goes to.
  const std::string& seal() const { return seal_; }
  // Whether the claim is already known to be refused because the step is
  // committed (does not wait).
  bool RefusedAsCommitted();
  // Waits for the claim's publish.
  Outcome Wait();
  // Leaves the claim whatever happens: the commit happened (the record is at
  // a seal), or a failed commit leaves it to the next writer to seal.
  void KeepClaim() { keep_ = true; }

 private:
  Backend& backend_;
  std::string name_;
  uint64_t step_;
  std::string seal_;
  std::shared_future<Outcome> outcome_;
  bool keep_ = false;
};

struct CommitPlan {
  std::string label;          // "checkpoint NAME@STEP", for messages
  std::string commit_object;  // where the record goes: the step's `COMMIT`
  std::string commit_bytes;   // the encoded commit record
  // The seal this writer's claim names (CommitClaimant::seal), and whether
  // that claim is the one at `commit_object` (its publish succeeded). When
  // it is not, the claim is made again at the commit; when `COMMIT` holds
  // another writer's claim, the record goes to that claim's seal instead.
  std::string seal;
  bool claimed = false;
  struct Named {
    std::string object;
    uint64_t min_bytes = 0;  // it must hold at least this many bytes
    std::string owner;       // whose it is, for messages ("rank 3")
  };
  std::vector<Named> objects;  // every manifest and data object the record reaches
};

// Checks and seals. OK: this call published the record (`*published`,
// where given, gets the seal it went to), and it is final. AlreadyExists: a
// commit record was there first (`*existing` then holds its bytes, where it
// could be read). IOError naming the object when one is missing or short
// (nothing is published), or when the claim of another writer it sealed
// went meanwhile (the seal is taken back). Unavailable when the claim at
// `COMMIT` is being removed (a fence at its seal: gc or rm of a dead
// claimant's claim). Other errors: the backend's, in context.
Status PublishCommit(Backend& backend, const CommitPlan& plan, std::string* existing,
                     std::string* published = nullptr);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_COMMIT_COORDINATOR_H_
