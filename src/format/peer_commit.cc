#include "format/peer_commit.h"

#include <set>

#include "format/encoding.h"
#include "format/limits.h"
#include "format/record_frame.h"

namespace sluice {

std::vector<size_t> PeerCommitRecord::DomainsHoldingEach() const {
  std::vector<std::set<std::string_view>> domains(commit.world);
  for (const auto& h : holders) {
    for (uint32_t r : h.ranks) {
      if (r < domains.size()) domains[r].insert(h.domain);
    }
  }
  std::vector<size_t> out;
  for (const auto& d : domains) out.push_back(d.size());
  return out;
}

size_t PeerCommitRecord::DomainsHolding(uint32_t rank) const {
  const std::vector<size_t> each = DomainsHoldingEach();
  return rank < each.size() ? each[rank] : 0;
}

std::string EncodePeerCommitRecord(const PeerCommitRecord& r) {
  Encoder e;
  e.PutBytes(EncodeCommitRecord(r.commit));
  e.PutBytes(r.attempt);
  e.PutVarint(r.replicas);
  e.PutVarint(r.holders.size());
  for (const auto& h : r.holders) {
    e.PutBytes(h.host);
    e.PutBytes(h.domain);
    e.PutVarint(h.ranks.size());
    for (uint32_t rank : h.ranks) e.PutVarint(rank);
  }
  return FrameRecord(kPeerCommitMagic, e.buffer());
}

Result<PeerCommitRecord> DecodePeerCommitRecord(std::string_view bytes, const std::string& what) {
  ASSIGN_OR_RETURN(std::string_view body, UnframeRecord(bytes, kPeerCommitMagic, what));
  Decoder d(body, what);
  PeerCommitRecord r;
  std::string commit;
  RETURN_IF_ERROR(d.Bytes(&commit, body.size(), "commit"));
  ASSIGN_OR_RETURN(r.commit, DecodeCommitRecord(commit, what));
  RETURN_IF_ERROR(d.Bytes(&r.attempt, limits::kMaxAttemptBytes, "attempt"));
  RETURN_IF_ERROR(d.Varint32(&r.replicas, "replicas"));
  uint64_t hosts = 0;
  RETURN_IF_ERROR(d.Count(&hosts, 3, "holder"));
  r.holders.resize(static_cast<size_t>(hosts));
  for (auto& h : r.holders) {
    RETURN_IF_ERROR(d.Bytes(&h.host, limits::kMaxNameBytes, "host"));
    RETURN_IF_ERROR(d.Bytes(&h.domain, limits::kMaxNameBytes, "domain"));
    uint64_t n = 0;
    RETURN_IF_ERROR(d.Count(&n, 1, "held rank"));
    h.ranks.resize(static_cast<size_t>(n));
    for (auto& rank : h.ranks) {
      RETURN_IF_ERROR(d.Varint32(&rank, "held rank"));
      if (rank >= r.commit.world) return d.Bad("holder " + h.host + " lists rank " + std::to_string(rank));
    }
    if (h.host.empty()) return d.Bad("a holder without a host name");
  }
  if (d.remaining() != 0) return d.Bad(std::to_string(d.remaining()) + " trailing bytes");
  const std::vector<size_t> held = r.DomainsHoldingEach();
  for (uint32_t rank = 0; rank < r.commit.world; ++rank) {
    if (held[rank] < r.replicas + 1) {
      return d.Bad("rank " + std::to_string(rank) + " is held in " + std::to_string(held[rank]) +
                   " domain(s), fewer than the " + std::to_string(r.replicas + 1) + " a safe step has");
    }
  }
  return r;
}

bool SameManifests(const CommitRecord& a, const CommitRecord& b) {
  if (a.name != b.name || a.step != b.step || a.world != b.world || a.ranks.size() != b.ranks.size()) return false;
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    const CommittedRank& x = a.ranks[i];
    const CommittedRank& y = b.ranks[i];
    if (x.rank != y.rank || x.manifest != y.manifest || x.manifest_bytes != y.manifest_bytes ||
        x.manifest_crc32c != y.manifest_crc32c) {
      return false;
    }
  }
  return true;
}

}  // namespace sluice
