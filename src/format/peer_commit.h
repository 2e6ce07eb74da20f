// PeerCommitRecord: what makes a step of a job with peer replicas safe
// (doc/peer.md). Published, by each host, in its own tier 0 at
// "ckpt/<name>/<step>/parts/peer.commit" (layout.h, PeerCommitObject) once
// every rank's part of the step is held, verified, on its own host and on
// its peers: the step is safe when hosts of at least peer_replicas + 1
// failure domains hold the record. It is not `COMMIT`: the step commits on
// a durable tier as before, later, and a peer commit never stands in for
// that commit on a tier that has one.
//
// The record lists every rank's manifest digest (name, size, crc32c, items,
// bytes: a CommitRecord's ranks, the same figures the durable commit lists
// later), the save attempt it belongs to, and which hosts hold each rank's
// part: its own host first, then its peers.
//
// Thread-safety: values and pure functions.
#ifndef SLUICE_FORMAT_PEER_COMMIT_H_
#define SLUICE_FORMAT_PEER_COMMIT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/commit_record.h"
#include "sluice/status.h"

namespace sluice {

constexpr std::string_view kPeerCommitMagic = "SLUICEPC";

// A host holding parts of the step: its name (the rank's host identity,
// hostname or $SLUICE_HOST), its failure domain, and the ranks whose parts
// its tier 0 holds (its own ranks and the replicas it took).
struct PartHolder {
  std::string host;
  std::string domain;
  std::vector<uint32_t> ranks;  // ascending
};

struct PeerCommitRecord {
  CommitRecord commit;  // name, step, world, created_unix_ms, each rank's manifest digest
  std::string attempt;  // the save attempt's id: a re-save of the step under another attempt is another save
  uint32_t replicas = 0;  // peer_replicas the job asked for
  std::vector<PartHolder> holders;  // by host name, ascending

  // The distinct domains holding rank `rank`'s part.
  size_t DomainsHolding(uint32_t rank) const;
  // The same for every rank 0..commit.world-1, in one pass over the holders.
  std::vector<size_t> DomainsHoldingEach() const;
};

std::string EncodePeerCommitRecord(const PeerCommitRecord& r);
// Checks the frame, every field's bounds, that the commit's ranks are
// 0..world-1, that every holder's ranks exist, and that every rank has at
// least replicas + 1 domains holding it (a record that says less was never
// published by a peer commit).
Result<PeerCommitRecord> DecodePeerCommitRecord(std::string_view bytes, const std::string& what);

// Whether two records list the same manifests (name, size, crc32c) for
// every rank: the same save, whenever each record was made. A durable
// commit record and a peer commit of one save agree so.
bool SameManifests(const CommitRecord& a, const CommitRecord& b);

}  // namespace sluice

#endif  // SLUICE_FORMAT_PEER_COMMIT_H_
