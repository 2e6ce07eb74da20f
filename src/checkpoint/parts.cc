#include "checkpoint/parts.h"

#include <optional>
#include <utility>

#include "checkpoint/copies.h"
#include "checkpoint/replicas.h"
#include "checkpoint/store_walk.h"
#include "format/commit_record.h"
#include "format/layout.h"
#include "sluice/names.h"

namespace sluice {

Status PublishPart(Backend& backend, std::string_view commit_bytes, uint32_t rank) {
  ASSIGN_OR_RETURN(CommitRecord commit, DecodeCommitRecord(commit_bytes, "commit record"));
  const std::string object = PartObject(commit.name, commit.step, rank);
  Status st = backend.PublishIfAbsent(object, commit_bytes);
  if (!st.IsAlreadyExists()) return st;
  ASSIGN_OR_RETURN(std::string there, backend.ReadSmall(object));
  if (there != commit_bytes) {
    return Status::Corruption("part record " + object + " names another commit of " +
                              CheckpointLabel(commit.name, commit.step));
  }
  return Status::OK();
}

namespace {

// Adds to `out` the ranks a peer commit of the same save lists whose
// manifests `backend` holds (replicas, and the host's own ranks).
Status AddPeerCommitted(Backend& backend, const PeerCommitRecord& peer, LoadedPart* out) {
  if (out->commit_bytes.empty()) {
    out->commit = peer.commit;
  } else if (!SameManifests(out->commit, peer.commit)) {
    return Status::OK();  // a peer commit of an earlier save of the step: the part records' save stands
  }
  out->peer_committed = true;
  for (const auto& h : peer.holders) out->safe_hosts.push_back(h.host);
  ASSIGN_OR_RETURN(std::vector<uint32_t> held, RanksHeld(backend, peer));
  for (uint32_t rank : held) {
    if (out->manifests.count(rank)) continue;
    ASSIGN_OR_RETURN(Manifest m, LoadCommittedManifest(backend, out->commit, out->commit.ranks[rank]));
    out->manifests.emplace(rank, std::move(m));
  }
  return Status::OK();
}

}  // namespace

Result<LoadedPart> LoadPart(Backend& backend, std::string_view name, uint64_t step) {
  const std::string label = CheckpointLabel(name, step);
  const std::string peer_object = PeerCommitObject(name, step);
  ASSIGN_OR_RETURN(auto listed, backend.List(PartPrefix(name, step)));
  LoadedPart out;
  std::optional<PeerCommitRecord> peer;
  for (const auto& o : listed) {
    if (o.name == peer_object) {
      ASSIGN_OR_RETURN(peer, ReadPeerCommit(backend, name, step));
      continue;
    }
    ASSIGN_OR_RETURN(std::string bytes, backend.ReadSmall(o.name));
    if (out.commit_bytes.empty()) {
      ASSIGN_OR_RETURN(out.commit, DecodeCommitRecord(bytes, "part record " + o.name));
      if (out.commit.name != name || out.commit.step != step) {
        return Status::Corruption("part record " + o.name + " describes " +
                                  CheckpointLabel(out.commit.name, out.commit.step));
      }
      out.commit_bytes = std::move(bytes);
      out.durable_record = true;
    } else if (bytes != out.commit_bytes) {
      return Status::Corruption(label + ": part record " + o.name + " names another commit than " +
                                listed.front().name);
    }
    bool found = false;
    for (const auto& r : out.commit.ranks) {
      if (PartObject(name, step, r.rank) != o.name) continue;
      ASSIGN_OR_RETURN(Manifest m, LoadCommittedManifest(backend, out.commit, r));
      out.manifests.emplace(r.rank, std::move(m));
      found = true;
    }
    if (!found) return Status::Corruption("part record " + o.name + " is for a rank its commit does not list");
  }
  if (peer) RETURN_IF_ERROR(AddPeerCommitted(backend, *peer, &out));
  if (out.commit_bytes.empty() && !out.peer_committed) return Status::NotFound(label + " has no part here");
  return out;
}

Result<LoadedCheckpoint> CombinePart(const LoadedPart& part, const LoadedCheckpoint& whole) {
  if (!SameManifests(part.commit, whole.commit)) {
    return Status::Corruption(CheckpointLabel(part.commit.name, part.commit.step) +
                              ": the part held here belongs to another commit than the shared tier's");
  }
  LoadedCheckpoint out;
  out.commit = whole.commit;
  out.manifests = whole.manifests;
  for (const auto& [rank, m] : part.manifests) {
    if (rank < out.manifests.size()) out.manifests[rank] = m;
  }
  return out;
}

Result<LoadedCheckpoint> WholePart(const LoadedPart& part) {
  if (!part.Whole()) {
    return Status::Unavailable(CheckpointLabel(part.commit.name, part.commit.step) + ": " +
                               std::to_string(part.manifests.size()) + " of " + std::to_string(part.commit.world) +
                               " ranks held here");
  }
  LoadedCheckpoint out;
  out.commit = part.commit;
  for (const auto& [rank, m] : part.manifests) out.manifests.push_back(m);
  return out;
}

Result<LoadedCheckpoint> PartWithManifestsElsewhere(const LoadedPart& part,
                                                    const std::map<uint32_t, std::string>& elsewhere,
                                                    std::set<std::string>* held_elsewhere) {
  const std::string label = CheckpointLabel(part.commit.name, part.commit.step);
  if (!part.peer_committed) return Status::Unavailable(label + ": no peer commit of it is held here");
  LoadedCheckpoint out;
  out.commit = part.commit;
  for (uint32_t rank = 0; rank < part.commit.world; ++rank) {
    auto here = part.manifests.find(rank);
    if (here != part.manifests.end()) {
      out.manifests.push_back(here->second);
      continue;
    }
    auto sent = elsewhere.find(rank);
    if (sent == elsewhere.end() || rank >= part.commit.ranks.size()) {
      return Status::Unavailable(label + ": rank " + std::to_string(rank) +
                                 "'s part is neither held here nor known from another host");
    }
    ASSIGN_OR_RETURN(Manifest m, DecodeCommittedManifest(part.commit, part.commit.ranks[rank], sent->second));
    for (const auto& o : m.objects) held_elsewhere->insert(o.name);
    out.manifests.push_back(std::move(m));
  }
  return out;
}

Result<LoadedCheckpoint> LoadCommittedOrSafe(Backend& backend, std::string_view name, uint64_t step) {
  auto loaded = LoadCheckpoint(backend, name, step);
  if (!loaded.status().IsNotFound()) return loaded;
  auto part = LoadPart(backend, name, step);
  if (!part.ok() || !part->peer_committed || !part->Whole()) return loaded;
  return WholePart(*part);
}

Result<std::optional<uint64_t>> NewestWholeSafeStep(Backend& backend, std::string_view name,
                                                    std::optional<uint64_t> above) {
  ASSIGN_OR_RETURN(auto steps, StepsOfName(backend, name));
  if (!steps) return std::optional<uint64_t>();
  for (uint64_t step : *steps) {  // newest first
    if (above && step <= *above) break;
    ASSIGN_OR_RETURN(auto found, backend.Stat({PeerCommitObject(name, step)}));
    if (found.empty()) continue;
    auto part = LoadPart(backend, name, step);
    if (part.ok() && part->peer_committed && part->Whole()) return std::optional<uint64_t>(step);
  }
  return std::optional<uint64_t>();
}

}  // namespace sluice
