// Parts: what a store local to one host holds of a multi-rank checkpoint
// whose tier 0 is each host's own (PipelineOptions::tier0_per_host).
//
// Such a checkpoint is committed on the first shared tier, not on tier 0:
// no host's tier 0 holds every rank. Each rank writes its items to its
// host's tier 0 (writer lock, data objects, manifest), copies them verbatim
// to the shared tier, where rank 0 commits the checkpoint by the usual
// protocol, and then records on its tier 0 that it holds its part: the
// part record `parts/r<rank>.part` is the shared tier's commit record,
// byte for byte. Published only after that commit exists, it is the local
// copy's commit: a part is never restorable before the checkpoint is, and
// every rank's local manifest is checked against the record as a
// committed one is. Several ranks on one host share one tier 0; each
// records its own part.
//
// With peer replicas (checkpoint/replicas.h, doc/peer.md) a host's store
// also holds other hosts' ranks, and a peer commit record under parts/
// (format/peer_commit.h) that makes the step safe before any shared tier
// commits it: the part is then the ranks whose manifests the record lists
// and the store holds, and it is read as committed by that record. When
// the shared tier's part records are there too, they must list the same
// manifests, and the replicas held count with the host's own ranks.
//
// A part is not a checkpoint: the catalog lists it with the ranks it holds
// (CheckpointInfo::part_ranks), a tiered restore reads those ranks from it
// and the others from the shared tier, retention counts it as tier 0's
// copy, and gc keeps it whole (only rm and retention remove it).
//
// Thread-safety: free functions.
#ifndef SLUICE_CHECKPOINT_PARTS_H_
#define SLUICE_CHECKPOINT_PARTS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "checkpoint/checkpoint_reader.h"
#include "format/commit_record.h"
#include "format/manifest.h"
#include "sluice/backend.h"
#include "sluice/status.h"

namespace sluice {

// Records that `backend` holds rank `rank`'s part of the checkpoint whose
// commit record is `commit_bytes`. OK also when the same record is there
// already (a retry); Corruption if another is.
Status PublishPart(Backend& backend, std::string_view commit_bytes, uint32_t rank);

// The part a store holds of (name, step): the commit record (the same in
// every part record, else Corruption) and the manifests of the ranks it
// holds, each checked against the record. NotFound if no part record is
// there.
struct LoadedPart {
  CommitRecord commit;
  std::string commit_bytes;                // empty when only a peer commit is here
  std::map<uint32_t, Manifest> manifests;  // by rank: the ranks held here
  bool peer_committed = false;             // a peer commit of this save is here (the step is safe)
  bool durable_record = false;             // a part record (the shared tier's commit) is here
  std::vector<std::string> safe_hosts;     // the peer commit's holders, when peer_committed

  // Every rank is held here: the part is the whole checkpoint.
  bool Whole() const { return manifests.size() == commit.world; }
};
Result<LoadedPart> LoadPart(Backend& backend, std::string_view name, uint64_t step);

// A checkpoint as a tiered read sees it from a part: `part`'s manifests
// and, for every other rank, the manifest `whole` (a later tier's copy of
// the same save: the same manifests) holds. Corruption if it is another
// save.
Result<LoadedCheckpoint> WholePart(const LoadedPart& part);  // Unavailable unless part.Whole()

// A safe step as one host reads it while other hosts hold some of its ranks
// (a collective restore from peers, doc/peer.md): `part`'s manifests and,
// for every rank it lacks, the manifest bytes in `elsewhere` (by rank, as
// a host holding that rank sent them), each checked against the peer
// commit as a committed manifest is. The lacking ranks' data objects go to
// `held_elsewhere`: read through this copy they fail, never repaired.
// Unavailable if `part` has no peer commit or a lacking rank has no
// manifest in `elsewhere`; Corruption if one does not match.
Result<LoadedCheckpoint> PartWithManifestsElsewhere(const LoadedPart& part,
                                                    const std::map<uint32_t, std::string>& elsewhere,
                                                    std::set<std::string>* held_elsewhere);

// The step as a copy reads it from `backend`: its commit there, or, where
// it has none, a safe step (a peer commit) whose every rank `backend` holds
// (WholePart). So a drain takes a safe step no shared tier committed, from a
// host that holds all of it: the durable tier gets every safe step, a lost
// host's part from its replica. Otherwise what LoadCheckpoint says.
Result<LoadedCheckpoint> LoadCommittedOrSafe(Backend& backend, std::string_view name, uint64_t step);

// The newest step of `name` newer than `above` (any, if unset) that
// `backend` holds whole as a peer-committed part: a safe step every rank
// of which this store can serve. Looks at the name's steps from the newest
// down to `above`, by child listing; nullopt on a backend without one
// (peer replicas live in host-local file stores).
Result<std::optional<uint64_t>> NewestWholeSafeStep(Backend& backend, std::string_view name,
                                                    std::optional<uint64_t> above);
Result<LoadedCheckpoint> CombinePart(const LoadedPart& part, const LoadedCheckpoint& whole);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_PARTS_H_
