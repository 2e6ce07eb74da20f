// Peer replicas at the store level: a part read on its host, written into a
// peer's store (refused whole when a chunk is damaged on the way), and the
// peer commit that makes the step readable there.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "checkpoint/parts.h"
#include "checkpoint/replicas.h"
#include "checkpoint/step_commit.h"
#include "checkpoint/store_test_fixture.h"
#include "format/layout.h"
#include "sluice/metrics.h"
#include "sluice/peer.h"

namespace sluice {
namespace {

class ReplicasTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    auto peer = OpenBackend(dir_ + "/peer", true);
    ASSERT_TRUE(peer.ok()) << peer.status().ToString();
    peer_ = std::move(peer).value();
    auto own = OpenBackend(dir_, false);
    ASSERT_TRUE(own.ok());
    own_ = std::move(own).value();
  }
  void TearDown() override {
    peer_.reset();
    own_.reset();
    StoreTest::TearDown();
  }
  // The manifest object of job@step's rank 0 on the host's own store.
  std::string ManifestOf(uint64_t step) {
    auto listed = own_->List(ManifestPrefix("job", step));
    EXPECT_TRUE(listed.ok() && listed->size() == 1);
    return listed->front().name;
  }
  PeerCommitRecord Record(const CommittedRank& digest, const std::string& attempt) {
    PeerCommitRecord r;
    r.commit.name = "job";
    r.commit.step = 1;
    r.commit.world = 1;
    r.commit.ranks = {digest};
    r.attempt = attempt;
    r.replicas = 1;
    r.holders = {PartHolder{"a", "a", {0}}, PartHolder{"b", "b", {0}}};
    return r;
  }
  std::unique_ptr<Backend> peer_, own_;
};

TEST_F(ReplicasTest, AReplicaVerifiesWholeOrIsNotWrittenAndThePeerCommitMakesItReadable) {
  Save("job", 1, {{"w", Bytes(3 << 20, 1)}, {"b", Bytes(1000, 2)}});
  const std::string manifest = ManifestOf(1);
  auto part = ReadPartForPeers(*own_, manifest);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  std::vector<std::string> objects;
  for (size_t i = 0; i < part->manifest.objects.size(); ++i) {
    std::string bytes(part->manifest.objects[i].size, '\0');
    Status read = ReadPartObject(*own_, part->manifest, i, 1 << 20, bytes.data(), bytes.size());
    ASSERT_TRUE(read.ok()) << read.ToString();
    objects.push_back(std::move(bytes));
  }

  // One flipped bit on the way: refused, naming the object, nothing written.
  std::vector<std::string> damaged = objects;
  damaged[0][damaged[0].size() / 2] ^= 0x04;
  auto refused = WriteReplica(*peer_, manifest, part->manifest_bytes, {damaged.begin(), damaged.end()}, 1 << 20);
  ASSERT_TRUE(refused.status().IsCorruption()) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("fails its checksum"), std::string::npos);
  auto nothing = peer_->List(StepPrefix("job", 1));
  ASSERT_TRUE(nothing.ok());
  EXPECT_TRUE(nothing->empty());

  // Whole: written, the sender's writer lock held until the writer ends.
  auto written = WriteReplica(*peer_, manifest, part->manifest_bytes, {objects.begin(), objects.end()}, 1 << 20);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  ASSERT_NE(written->writer, nullptr);
  EXPECT_EQ(written->digest.manifest_crc32c, part->digest.manifest_crc32c);
  auto locks = peer_->List(WritersPrefix("job", 1));
  ASSERT_TRUE(locks.ok());
  EXPECT_EQ(locks->size(), 1u);

  // Not a part before its peer commit; whole and readable after it.
  EXPECT_TRUE(LoadPart(*peer_, "job", 1).status().IsNotFound());
  ASSERT_TRUE(written->writer->PublishPeerCommit(Record(written->digest, "attempt-1")).ok());
  written->writer->End();
  auto loaded = LoadPart(*peer_, "job", 1);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(loaded->peer_committed);
  EXPECT_TRUE(loaded->Whole());
  EXPECT_EQ(loaded->safe_hosts, (std::vector<std::string>{"a", "b"}));
  auto as_copy = LoadCommittedOrSafe(*peer_, "job", 1);
  ASSERT_TRUE(as_copy.ok()) << as_copy.status().ToString();
  EXPECT_TRUE(CheckDataObjects(*peer_, *as_copy).ok());
  auto newest = NewestWholeSafeStep(*peer_, "job", std::nullopt);
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(*newest, std::optional<uint64_t>(1));

  // The same record again is a retry; another attempt's is refused.
  auto again = StepCommit::Begin(*peer_, {"job", 1}, "", StepCommitOptions{});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)->PublishPeerCommit(Record(written->digest, "attempt-1")).ok());
  Status other = (*again)->PublishPeerCommit(Record(written->digest, "attempt-2"));
  EXPECT_TRUE(other.IsAlreadyExists()) << other.ToString();
  EXPECT_NE(other.message().find("another save (attempt attempt-1)"), std::string::npos) << other.message();
}

// A host that lacks a rank of a safe step lists it from the manifest a
// holder sent, checked against the peer commit; its objects are marked as
// held elsewhere, so a read of them fails instead of reading this store.
TEST_F(ReplicasTest, APartIsCompletedByManifestsOtherHostsSentAndOnlyByMatchingOnes) {
  Save("job", 1, {{"w", Bytes(3 << 20, 1)}});
  auto part = ReadPartForPeers(*own_, ManifestOf(1));
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  LoadedPart lacking;  // what the peer commit says of a host that holds no rank of the step
  lacking.commit = Record(part->digest, "attempt-1").commit;
  lacking.peer_committed = true;

  std::set<std::string> elsewhere;
  auto listed = PartWithManifestsElsewhere(lacking, {{0, part->manifest_bytes}}, &elsewhere);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->manifests.size(), 1u);
  EXPECT_EQ(listed->manifests[0].items.size(), 1u);
  EXPECT_EQ(elsewhere.size(), part->manifest.objects.size());
  EXPECT_TRUE(elsewhere.count(part->manifest.objects[0].name));

  std::string bent = part->manifest_bytes;
  bent[bent.size() / 2] ^= 0x01;
  EXPECT_TRUE(PartWithManifestsElsewhere(lacking, {{0, bent}}, &elsewhere).status().IsCorruption());
  EXPECT_EQ(PartWithManifestsElsewhere(lacking, {}, &elsewhere).status().code(), StatusCode::kUnavailable);
  lacking.peer_committed = false;
  EXPECT_EQ(PartWithManifestsElsewhere(lacking, {{0, part->manifest_bytes}}, &elsewhere).status().code(),
            StatusCode::kUnavailable);
}

// The public PeerStore, host to host, and the series it records: bytes
// read to send, a refused replica, a verified one, the peer commit.
TEST_F(ReplicasTest, APeerStoreCountsWhatItSendsReceivesAndPublishes) {
  Save("job", 1, {{"w", Bytes(2 << 20, 3)}});
  auto own = PeerStore::Open(dir_);
  auto peer = PeerStore::Open(dir_ + "/peer2", true);
  ASSERT_TRUE(own.ok() && peer.ok());
  MetricsRegistry& m = DefaultMetrics();
  auto value = [&](const char* name, MetricLabels labels = {}) { return m.GetCounter(name, "", labels).value(); };
  const double sent0 = value("sluice_peer_sent_bytes_total"), received0 = value("sluice_peer_received_bytes_total");
  const double refused0 = value("sluice_peer_replicas_total", {{"result", "refused"}});
  const double verified0 = value("sluice_peer_replicas_total", {{"result", "verified"}});
  const double commits0 = value("sluice_peer_commits_total");

  const std::string manifest = ManifestOf(1);
  auto part = (*own)->ReadPart(manifest);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  std::vector<std::string> objects;
  uint64_t total = 0;
  for (size_t i = 0; i < part->objects.size(); ++i) {
    std::string bytes(part->sizes[i], '\0');
    ASSERT_TRUE((*own)->ReadObjectInto(manifest, i, bytes.data(), bytes.size()).ok());
    total += bytes.size();
    objects.push_back(std::move(bytes));
  }
  EXPECT_EQ(value("sluice_peer_sent_bytes_total") - sent0, static_cast<double>(total));
  std::vector<std::string> damaged = objects;
  damaged[0][7] ^= 0x10;
  EXPECT_TRUE((*peer)->WriteReplica(manifest, part->manifest_bytes, {damaged.begin(), damaged.end()})
                  .status().IsCorruption());
  auto digest = (*peer)->WriteReplica(manifest, part->manifest_bytes, {objects.begin(), objects.end()});
  ASSERT_TRUE(digest.ok()) << digest.status().ToString();
  EXPECT_EQ(value("sluice_peer_replicas_total", {{"result", "refused"}}) - refused0, 1);
  EXPECT_EQ(value("sluice_peer_replicas_total", {{"result", "verified"}}) - verified0, 1);
  EXPECT_EQ(value("sluice_peer_received_bytes_total") - received0, static_cast<double>(total));

  PeerCommit commit{"job", 1, 1, "attempt-1", 1, {*digest}, {{"a", "a", {0}}, {"b", "b", {0}}}};
  ASSERT_TRUE((*peer)->PublishPeerCommit(commit).ok());
  (*peer)->ReleaseReplica(manifest);
  EXPECT_EQ(value("sluice_peer_commits_total") - commits0, 1);
  EXPECT_EQ(m.GetGauge("sluice_peer_newest_safe_step", "", {{"name", "job"}}).value(), 1);
  EXPECT_NE(m.RenderPrometheus().find("sluice_peer_newest_safe_step{name=\"job\"} 1"), std::string::npos);
}

}  // namespace
}  // namespace sluice
