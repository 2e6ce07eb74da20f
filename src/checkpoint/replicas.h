// Peer replicas (doc/peer.md): a rank's part of a step, written by its own
// host into its tier 0, copied whole into the tier 0 of a host in another
// failure domain, and the peer commit that makes the step safe there.
//
// The transport is the caller's (sluice.torch sends the bytes over the
// job's own torch.distributed group); this layer reads a part for sending,
// writes a received one, and publishes the peer commit record. A replica
// keeps the sender's object names: it is the same manifest and the same
// data objects, in another host's store, so that every reader of a part
// (checkpoint/parts.h) reads a replica as it reads the host's own ranks.
//
// A replica verifies whole or does not exist: every data object's size and
// every chunk's crc32c is checked against the manifest before anything is
// written, and the manifest, whose presence is the replica, is published
// last. Until the peer commit lands the receiver holds the sender's writer
// lock in its own store, as a writer of the one commit module
// (step_commit.h), which publishes the peer commit too: gc leaves the step
// alone; a receiver that dies leaves a lock gc finds dead, and gc then
// takes the objects.
//
// Thread-safety: free functions.
#ifndef SLUICE_CHECKPOINT_REPLICAS_H_
#define SLUICE_CHECKPOINT_REPLICAS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/step_commit.h"
#include "format/commit_record.h"
#include "format/manifest.h"
#include "format/peer_commit.h"
#include "sluice/backend.h"
#include "sluice/status.h"

namespace sluice {

// A rank's part as its own host's store holds it, ready to send.
struct PartForPeers {
  std::string manifest_bytes;
  Manifest manifest;
  CommittedRank digest;  // the manifest as a commit record lists it
};

// Reads the part whose manifest is `manifest_object` (a rank writer's, just
// written). InvalidArgument if it names data objects of another step (an
// incremental part: parts are written in full).
Result<PartForPeers> ReadPartForPeers(Backend& backend, const std::string& manifest_object);

// Reads data object `index` of `m` into `out` (`size` bytes: the object's
// size, else InvalidArgument), every chunk checked against its crc32c.
Status ReadPartObject(Backend& backend, const Manifest& m, size_t index, uint64_t io_bytes, char* out, size_t size);

// Writes a received part into `backend`: `manifest_object` with
// `manifest_bytes`, and `objects[i]` as the manifest's data object i. Checks
// every size and chunk crc32c first (Corruption naming the object and
// chunk, nothing written), begins a writer under the sender's writer id in
// `backend` (its lock), writes the data objects, then publishes the
// manifest. OK also when the same manifest is there already (then no
// writer). On success the writer is returned, its lock held until it ends
// (once the peer commit is published or given up); on failure it ended and
// what was written is gc's.
struct ReplicaWritten {
  CommittedRank digest;               // of the manifest
  std::unique_ptr<StepCommit> writer; // null when the replica was there already
};
Result<ReplicaWritten> WriteReplica(Backend& backend, const std::string& manifest_object,
                                    std::string_view manifest_bytes, const std::vector<std::string_view>& objects,
                                    uint64_t io_bytes);

// The peer commit `backend` holds for (name, step); NotFound if none.
Result<PeerCommitRecord> ReadPeerCommit(Backend& backend, std::string_view name, uint64_t step);

// The newest step of `name` whose peer commit `backend` holds, from the
// name's child listing (nullopt where the backend has none, or no step
// has one).
Result<std::optional<uint64_t>> NewestPeerCommittedStep(Backend& backend, std::string_view name);

// The ranks of `record` whose manifests `backend` holds, as the record
// lists them (name, size, crc32c): the parts this host's store can serve.
Result<std::vector<uint32_t>> RanksHeld(Backend& backend, const PeerCommitRecord& record);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_REPLICAS_H_
