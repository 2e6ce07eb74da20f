// PeerStore (sluice/peer.h) over checkpoint/replicas.h.
#include <map>
#include <mutex>
#include <utility>

#include "checkpoint/replicas.h"
#include "checkpoint/step_removal.h"
#include "checkpoint/store_walk.h"
#include "io/wall_clock.h"
#include "sluice/backend.h"
#include "sluice/metrics.h"
#include "sluice/peer.h"

namespace sluice {
namespace {

RankDigest ToPublic(const CommittedRank& r) {
  return RankDigest{r.rank, r.manifest, r.manifest_bytes, r.manifest_crc32c, r.items, r.bytes};
}

CommittedRank FromPublic(const RankDigest& r) {
  return CommittedRank{r.rank, r.manifest, r.manifest_bytes, r.manifest_crc32c, r.items, r.bytes};
}

PeerCommit ToPublic(const PeerCommitRecord& r) {
  PeerCommit c{r.commit.name, r.commit.step, r.commit.world, r.attempt, r.replicas, {}, {}};
  for (const auto& rank : r.commit.ranks) c.ranks.push_back(ToPublic(rank));
  for (const auto& h : r.holders) c.holders.push_back(PartHolding{h.host, h.domain, h.ranks});
  return c;
}

// The process's peer series (doc/metrics.md), over every PeerStore in it.
Counter& SentBytes() {
  return DefaultMetrics().GetCounter("sluice_peer_sent_bytes_total",
                                     "bytes of this host's tier 0 read to send to a peer host (replicas, restores)");
}
Counter& ReceivedBytes() {
  return DefaultMetrics().GetCounter("sluice_peer_received_bytes_total",
                                     "bytes of replicas from peer hosts written into this host's tier 0");
}
Counter& Replicas(const char* result) {
  return DefaultMetrics().GetCounter("sluice_peer_replicas_total",
                                     "replicas a peer sent here: verified (written) or refused (a chunk failed "
                                     "its checksum, nothing written)",
                                     {{"result", result}});
}
Counter& PeerCommits() {
  return DefaultMetrics().GetCounter("sluice_peer_commits_total", "peer commits published in this host's tier 0");
}
Gauge& NewestSafeStep(const std::string& name) {
  return DefaultMetrics().GetGauge("sluice_peer_newest_safe_step",
                                   "the newest step a peer commit published here makes safe", {{"name", name}});
}

class PeerStoreImpl final : public PeerStore {
 public:
  PeerStoreImpl(std::unique_ptr<Backend> backend, uint64_t io_bytes)
      : backend_(std::move(backend)), io_bytes_(io_bytes) {}

  Result<PeerPart> ReadPart(const std::string& manifest_object) override {
    ASSIGN_OR_RETURN(PartForPeers part, ReadPartForPeers(*backend_, manifest_object));
    PeerPart out;
    out.digest = ToPublic(part.digest);
    out.manifest_bytes = std::move(part.manifest_bytes);
    for (const auto& o : part.manifest.objects) {
      out.objects.push_back(o.name);
      out.sizes.push_back(o.size);
    }
    return out;
  }

  Status ReadObjectInto(const std::string& manifest_object, size_t index, void* out, size_t size) override {
    ASSIGN_OR_RETURN(PartForPeers part, ReadPartForPeers(*backend_, manifest_object));
    RETURN_IF_ERROR(ReadPartObject(*backend_, part.manifest, index, io_bytes_, static_cast<char*>(out), size));
    SentBytes().Add(static_cast<double>(size));
    return Status::OK();
  }

  Result<RankDigest> WriteReplica(const std::string& manifest_object, std::string_view manifest_bytes,
                                  const std::vector<std::string_view>& objects) override {
    auto written = sluice::WriteReplica(*backend_, manifest_object, manifest_bytes, objects, io_bytes_);
    if (written.status().IsCorruption()) Replicas("refused").Add();
    ASSIGN_OR_RETURN(ReplicaWritten r, std::move(written));
    Replicas("verified").Add();
    for (const auto& o : objects) ReceivedBytes().Add(static_cast<double>(o.size()));
    if (r.writer != nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      writers_[manifest_object] = std::move(r.writer);
    }
    return ToPublic(r.digest);
  }

  void ReleaseReplica(const std::string& manifest_object) override {
    std::unique_ptr<StepCommit> writer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = writers_.find(manifest_object);
      if (it == writers_.end()) return;
      writer = std::move(it->second);
      writers_.erase(it);
    }
    writer->End();
  }

  Status PublishPeerCommit(const PeerCommit& c) override {
    PeerCommitRecord r;
    r.commit.name = c.name;
    r.commit.step = c.step;
    r.commit.world = c.world;
    r.commit.created_unix_ms = NowUnixMs();
    for (const auto& rank : c.ranks) r.commit.ranks.push_back(FromPublic(rank));
    r.attempt = c.attempt;
    r.replicas = c.replicas;
    for (const auto& h : c.holders) r.holders.push_back(PartHolder{h.host, h.domain, h.ranks});
    // What a reader will check, checked before anything is published.
    const std::string what = "peer commit of " + c.name;
    auto decoded = DecodePeerCommitRecord(EncodePeerCommitRecord(r), what);
    if (!decoded.ok()) return Status::InvalidArgument(decoded.status().message());
    // A writer of the one commit module for the publish: its lock keeps gc
    // off the step meanwhile.
    StepCommitOptions options;
    options.world = c.world;
    ASSIGN_OR_RETURN(auto writer, StepCommit::Begin(*backend_, {c.name, c.step}, "", options));
    RETURN_IF_ERROR(writer->PublishPeerCommit(r));
    PeerCommits().Add();
    Gauge& newest = NewestSafeStep(c.name);
    if (static_cast<double>(c.step) > newest.value()) newest.Set(static_cast<double>(c.step));
    return Status::OK();
  }

  Result<PeerCommit> ReadPeerCommit(std::string_view name, uint64_t step) override {
    ASSIGN_OR_RETURN(PeerCommitRecord r, sluice::ReadPeerCommit(*backend_, name, step));
    return ToPublic(r);
  }

  Result<std::optional<uint64_t>> NewestPeerCommit(std::string_view name) override {
    return NewestPeerCommittedStep(*backend_, name);
  }

  Result<std::vector<std::pair<uint64_t, std::string>>> RecentPeerCommits(std::string_view name,
                                                                          size_t limit) override {
    std::vector<std::pair<uint64_t, std::string>> out;
    auto steps = StepsOfName(*backend_, name);
    if (!steps.ok() || !*steps) return out;  // no such name here (a replacement host), or no child listing
    for (uint64_t step : **steps) {  // newest first
      if (out.size() >= limit) break;
      auto record = sluice::ReadPeerCommit(*backend_, name, step);
      if (record.ok()) out.emplace_back(step, record->attempt);
    }
    return out;
  }

  Status RemoveStep(std::string_view name, uint64_t step) override {
    return RemoveCheckpoint(*backend_, {std::string(name), step});
  }

  Result<std::vector<uint32_t>> RanksHeld(std::string_view name, uint64_t step) override {
    ASSIGN_OR_RETURN(PeerCommitRecord r, sluice::ReadPeerCommit(*backend_, name, step));
    return sluice::RanksHeld(*backend_, r);
  }

 private:
  std::unique_ptr<Backend> backend_;
  const uint64_t io_bytes_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<StepCommit>> writers_;  // replicas whose locks are held, by manifest
};

}  // namespace

Result<std::unique_ptr<PeerStore>> PeerStore::Open(const std::string& uri, bool create_if_missing,
                                                   uint64_t io_bytes) {
  ASSIGN_OR_RETURN(auto backend, OpenBackend(uri, create_if_missing));
  return std::unique_ptr<PeerStore>(new PeerStoreImpl(std::move(backend), io_bytes));
}

}  // namespace sluice
