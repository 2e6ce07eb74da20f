// Peer replicas: what a job's transport (sluice.torch, over its own
// torch.distributed gloo group) needs from one host's tier 0 to keep a
// second copy of every host's part on a host in another failure domain,
// and to make a step safe before any shared tier commits it (doc/peer.md,
// doc/format.md "Peer commits").
//
// sluice moves no bytes between hosts itself: the caller reads a part here
// (ReadPart, ReadObjectInto), sends it, and the receiving host writes it into
// its own tier 0 (WriteReplica), which checks every chunk's crc32c first:
// a replica verifies whole or does not exist. Once every rank's part is
// held on its own host and on its peers, every host publishes the same
// peer commit (PublishPeerCommit); a step is safe once hosts of at least
// `replicas` + 1 failure domains hold it. Reads of a tier 0 then serve
// the step from the parts it holds (a whole one: every rank), and `latest`
// takes it when it is newer than every commit.
//
// Thread-safety: a PeerStore may be shared by threads.
#ifndef SLUICE_PEER_H_
#define SLUICE_PEER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/status.h"

namespace sluice {

// A rank's manifest as a commit lists it: its object name, size, crc32c,
// and the rank's item count and bytes.
struct RankDigest {
  uint32_t rank = 0;
  std::string manifest;
  uint64_t manifest_bytes = 0;
  uint32_t manifest_crc32c = 0;
  uint64_t items = 0;
  uint64_t bytes = 0;
};

// A rank's part as its host's tier 0 holds it, ready to send.
struct PeerPart {
  RankDigest digest;
  std::string manifest_bytes;
  std::vector<std::string> objects;  // data object names, in the manifest's order
  std::vector<uint64_t> sizes;       // their sizes
};

// A host holding parts of a step: its name, failure domain, and the ranks
// whose parts it holds (its own and its replicas).
struct PartHolding {
  std::string host;
  std::string domain;
  std::vector<uint32_t> ranks;
};

struct PeerCommit {
  std::string name;
  uint64_t step = 0;
  uint32_t world = 1;
  std::string attempt;             // the save attempt's id
  uint32_t replicas = 0;           // peer replicas per part
  std::vector<RankDigest> ranks;   // one per rank, by rank
  std::vector<PartHolding> holders;
};

class PeerStore {
 public:
  // Over the tier 0 at `uri` (a host's own store). `create_if_missing`:
  // a host that replaced a lost one makes its tier 0 to take the parts it
  // fetches from its peers.
  static Result<std::unique_ptr<PeerStore>> Open(const std::string& uri, bool create_if_missing = false,
                                                 uint64_t io_bytes = 4ull << 20);
  virtual ~PeerStore() = default;

  // The part whose manifest is `manifest_object` (SaveHandle::WaitWritten).
  virtual Result<PeerPart> ReadPart(const std::string& manifest_object) = 0;
  // Reads data object `index` of the part whose manifest is
  // `manifest_object` into `out` (`size` bytes: the object's size), every
  // chunk verified.
  virtual Status ReadObjectInto(const std::string& manifest_object, size_t index, void* out, size_t size) = 0;
  // Writes a part received from another host (`objects[i]`: the bytes of
  // its data object i) after checking every size and chunk crc32c
  // (Corruption, nothing written). Holds the sending writer's lock in this
  // store (gc leaves the step alone) until ReleaseReplica.
  virtual Result<RankDigest> WriteReplica(const std::string& manifest_object, std::string_view manifest_bytes,
                                          const std::vector<std::string_view>& objects) = 0;
  virtual void ReleaseReplica(const std::string& manifest_object) = 0;
  // Publishes the peer commit here. OK if the same one is there;
  // AlreadyExists if another save's is; InvalidArgument if some rank is
  // held in fewer than replicas + 1 domains.
  virtual Status PublishPeerCommit(const PeerCommit& commit) = 0;
  // NotFound if this store holds no peer commit of (name, step).
  virtual Result<PeerCommit> ReadPeerCommit(std::string_view name, uint64_t step) = 0;
  // The newest step of `name` this store holds a peer commit of (nullopt
  // if none), looking from the newest step down.
  virtual Result<std::optional<uint64_t>> NewestPeerCommit(std::string_view name) = 0;
  // The newest `limit` steps of `name` this store holds a peer commit of,
  // newest first, each with its save attempt's id: what a restore compares
  // across hosts to tell a host back with an old tier 0 (doc/peer.md).
  virtual Result<std::vector<std::pair<uint64_t, std::string>>> RecentPeerCommits(std::string_view name,
                                                                                  size_t limit) = 0;
  // Removes this store's copy of (name, step) (a stale one: another save of
  // the step is the job's). NotFound if there is none.
  virtual Status RemoveStep(std::string_view name, uint64_t step) = 0;
  // The ranks of the peer commit of (name, step) whose parts this store holds.
  virtual Result<std::vector<uint32_t>> RanksHeld(std::string_view name, uint64_t step) = 0;
};

}  // namespace sluice

#endif  // SLUICE_PEER_H_
