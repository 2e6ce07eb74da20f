// The last phases of every commit, for a multi-rank save's rank 0 and for a
// drain alike (doc/format.md, "Commit protocol"):
//   gather manifests (the caller: rank pointers for a save, the source's
//   commit record for a drain) -> check objects -> publish -> re-check.
// Checking that every object the commit names is there and whole, then
// publishing the commit record atomically (PublishIfAbsent), then checking
// again and withdrawing the record if anything went meanwhile (a concurrent
// rm or gc), means no reader can ever see a torn checkpoint.
// Where `COMMIT` holds a claim (format/commit_record.h, CommitClaim), the
// record is published at the seal the claim names instead: the caller's own
// claim, or one a writer that died before sealing left (exactly one publish
// of a seal name wins, so exactly one writer commits the step).
//
// Thread-safety: a free function.
#ifndef SLUICE_CHECKPOINT_COMMIT_COORDINATOR_H_
#define SLUICE_CHECKPOINT_COMMIT_COORDINATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/backend.h"
#include "sluice/status.h"

namespace sluice {

struct CommitPlan {
  std::string label;          // "checkpoint NAME@STEP", for messages
  std::string commit_object;  // where the record goes: the step's `COMMIT`
  std::string commit_bytes;   // the encoded commit record
  // The seal named by a claim this writer published at `commit_object`
  // (its PublishIfAbsent succeeded): the record goes there. Empty: the
  // record goes to `commit_object`, or to the seal of a claim found there.
  std::string own_seal;
  struct Named {
    std::string object;
    uint64_t min_bytes = 0;  // it must hold at least this many bytes
    std::string owner;       // whose it is, for messages ("rank 3")
  };
  std::vector<Named> objects;  // every manifest and data object the record reaches
};

// Checks, publishes and re-checks. OK: this call published the record
// (`*published`, where given, gets where: `COMMIT` or a seal).
// AlreadyExists: a commit record was there first (`*existing` then holds
// its bytes, where it could be read). IOError naming the object when one is
// missing or short, before or after the publish (then the record was
// withdrawn); sealing a claim this writer did not make, the claim is read
// again after, and one gone meanwhile (rm, or gc of a step whose claimant
// died) withdraws the seal too. Other errors: the backend's, in context;
// when the re-check itself keeps failing (four tries over about a second),
// the record stays published and the error says so.
Status PublishCommit(Backend& backend, const CommitPlan& plan, std::string* existing,
                     std::string* published = nullptr);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_COMMIT_COORDINATOR_H_
