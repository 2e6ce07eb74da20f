// Drains (pipeline/drain.h) write their copy under names of their own: the
// drain writer's manifests and data objects, placed and hedged past a slow
// placement like a save's, committed with the source's save intact
// (checkpoint/copies.h: the same save by meaning). A drain that failed
// leaves only garbage, the next one commits under its own names, and an
// incremental step's copy names its base's objects where the destination
// holds them, under the destination's names.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/copies.h"
#include "checkpoint/step_copy.h"
#include "engine/loser_reaper.h"
#include "engine/slow_placement_fixture.h"
#include "format/layout.h"
#include "pipeline/drain.h"
#include "sluice/maintenance.h"
#include "sluice/pipeline.h"
#include "sluice/store.h"

namespace sluice {
namespace {

std::string Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& c : s) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x);
  }
  return s;
}

// Fails the `fail_at`-th Create of a data object (counting from 1) and every
// one after it.
class FailingCreates final : public BackendWrapper {
 public:
  FailingCreates(Backend& target, int fail_at) : BackendWrapper(target), fail_at_(fail_at) {}
  Result<std::unique_ptr<WritableObject>> Create(const std::string& name, const CreateOptions& o) override {
    if (++creates_ >= fail_at_) return Status::IOError("injected: create " + name + " failed");
    return BackendWrapper::Create(name, o);
  }

 private:
  int fail_at_;
  int creates_ = 0;
};

class DrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-drain-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    StoreOptions& o = options_;
    o.create_if_missing = true;
    o.chunk_bytes = 256 << 10;
    o.object_bytes = 1 << 20;
    auto src = Store::Open(dir_ + "/src", o);
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    src_ = std::move(src).value();
    auto dst = Store::Open(dir_ + "/dst", o);
    ASSERT_TRUE(dst.ok()) << dst.status().ToString();
    dst_ = std::move(dst).value();
  }
  void TearDown() override {
    LoserReaper::Get().WaitIdle();
    src_.reset();
    dst_.reset();
    (void)std::system(("rm -rf " + dir_).c_str());
  }
  // An incremental save through a pipeline on the source alone: chunks
  // equal to the previous step's are referenced.
  void Save(uint64_t step, const std::map<std::string, std::string>& items) {
    PipelineOptions o;
    o.tiers.push_back(TierOptions{dir_ + "/src"});
    o.store = options_;
    o.staging_bytes = 16ull << 20;
    auto p = Pipeline::Open(o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto pending = (*p)->Begin({"d", step}, 0, 1);
    ASSERT_TRUE(pending.ok()) << pending.status().ToString();
    for (const auto& [k, v] : items) ASSERT_TRUE((*pending)->AddItem(k, "", v.data(), v.size()).ok());
    auto h = (*pending)->Snapshot();
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    Status st = (*h)->Wait();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  LoadedCheckpoint Load(Store& s, uint64_t step) {
    auto l = LoadCheckpoint(s.backend(), "d", step);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? std::move(l).value() : LoadedCheckpoint{};
  }
  // The destination copy verifies, holds the source's save, and is the
  // drain's own (its writer's manifests).
  void ExpectSameSave(uint64_t step) {
    LoadedCheckpoint a = Load(*src_, step), b = Load(*dst_, step);
    EXPECT_TRUE(SameSave(a, b));
    ASSERT_EQ(b.manifests.size(), 1u);
    EXPECT_NE(b.manifests[0].writer_id, a.manifests[0].writer_id);
    EXPECT_NE(b.commit.ranks[0].manifest, a.commit.ranks[0].manifest);
    auto v = dst_->Verify("d", step);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(v->ok());
  }
  CopyControl Control() {
    CopyControl c;
    c.io_bytes = 256 << 10;
    return c;
  }
  std::string dir_;
  StoreOptions options_;
  std::unique_ptr<Store> src_, dst_;
};

TEST_F(DrainTest, ACopyPastASlowPlacementIsHedgedAndHoldsTheSameSave) {
  Save(1, {{"a", Bytes(3 << 20, 1)}});
  auto raw = OpenBackend(dir_ + "/dst", false);
  ASSERT_TRUE(raw.ok());
  SlowFirstPlacement slow(std::move(raw).value());
  slow.slow = std::chrono::milliseconds(4000);
  const auto t0 = std::chrono::steady_clock::now();
  Status st = CopyCommittedStep(src_->backend(), slow, "d", 1, Control());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(st.ok()) << st.ToString();
  // Every data object's first placement was 4 s late: each was written
  // again beside it, that copy won, and the drain did not wait for the
  // late ones.
  EXPECT_LT(seconds, 3.0);
  EXPECT_GE(slow.Stats().objects_hedged, 3u);
  LoadedCheckpoint there = Load(*dst_, 1);
  ASSERT_EQ(there.manifests.size(), 1u);
  ASSERT_EQ(there.manifests[0].objects.size(), 3u);
  for (const auto& o : there.manifests[0].objects) {
    EXPECT_TRUE(IsSibling(o.name)) << o.name;
    EXPECT_EQ(WriterOfObject(ParseObjectName(o.name)->rest), there.manifests[0].writer_id) << o.name;
  }
  ExpectSameSave(1);
  // Drained again: the same save is there, nothing is written.
  const int creates = slow.creates;
  EXPECT_TRUE(CopyCommittedStep(src_->backend(), slow, "d", 1, Control()).ok());
  EXPECT_EQ(slow.creates, creates);
}

// A scrub repair of the copy writes the bad object again staged under a
// new name, which the placement places (and the write queue hedges past its
// slow first placement), and swaps it in: the copy verifies.
TEST_F(DrainTest, ARepairOfTheCopyIsPlacedAndHedgedToo) {
  Save(1, {{"a", Bytes(2 << 20, 4)}});
  ASSERT_TRUE(CopyCommittedStep(src_->backend(), dst_->backend(), "d", 1, Control()).ok());
  auto raw = OpenBackend(dir_ + "/dst", false);
  ASSERT_TRUE(raw.ok());
  SlowFirstPlacement slow(std::move(raw).value());
  slow.slow = std::chrono::milliseconds(3000);
  const uint64_t hedged = slow.Stats().objects_hedged;
  const std::string bad = Load(*dst_, 1).manifests[0].objects[1].name;
  {
    std::fstream f(dir_ + "/dst/" + bad, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekp(1000);
    f.put('\x5a');
  }
  auto report = Scrub({&src_->backend(), &slow}, ScrubOptions{});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  bool repaired = false;
  for (const auto& c : report->copies) repaired = repaired || (c.tier == 1 && c.state == "repaired");
  EXPECT_TRUE(repaired);
  EXPECT_GT(slow.Stats().objects_hedged, hedged) << "the repair's write was not placed";
  EXPECT_EQ(Load(*dst_, 1).manifests[0].objects[1].name, bad) << "the copy's records changed";
  ExpectSameSave(1);
}

TEST_F(DrainTest, AfterAFailedDrainTheNextCommitsUnderItsOwnNamesAndGcTakesTheRest) {
  Save(1, {{"a", Bytes(3 << 20, 2)}});
  FailingCreates failing(dst_->backend(), 2);
  Status st = CopyCommittedStep(src_->backend(), failing, "d", 1, Control());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kIOError) << st.ToString();
  EXPECT_TRUE(LoadCheckpoint(dst_->backend(), "d", 1).status().IsNotFound());
  // A failed copy keeps its claim, unsealed and unfenced, for the retry to
  // seal (StepCommitOptions::keep_claim_on_failure), and releases its lock.
  EXPECT_TRUE(ReadCommitRecord(dst_->backend(), "d", 1).status().IsNotFound());
  EXPECT_TRUE(dst_->backend().ReadSmall(CommitObject("d", 1)).ok()) << "the failed drain took its claim back";
  for (const char* prefix : {"seal/", "writers/"}) {
    auto left = dst_->backend().List(StepPrefix("d", 1) + prefix);
    ASSERT_TRUE(left.ok());
    EXPECT_TRUE(left->empty()) << "the failed drain left " << (*left)[0].name;
  }
  ASSERT_TRUE(CopyCommittedStep(src_->backend(), dst_->backend(), "d", 1, Control()).ok());
  ExpectSameSave(1);
  // What the failed drain wrote is garbage: gc leaves exactly what the
  // commit names.
  ASSERT_TRUE(dst_->CollectGarbage(0).ok());
  LoadedCheckpoint there = Load(*dst_, 1);
  auto data = dst_->backend().List(StepPrefix("d", 1) + "data/");
  ASSERT_TRUE(data.ok());
  ASSERT_EQ(data->size(), there.manifests[0].objects.size());
  for (size_t i = 0; i < data->size(); ++i) {
    bool named = false;
    for (const auto& o : there.manifests[0].objects) named = named || o.name == (*data)[i].name;
    EXPECT_TRUE(named) << (*data)[i].name;
  }
  auto manifests = dst_->backend().List(ManifestPrefix("d", 1));
  ASSERT_TRUE(manifests.ok());
  EXPECT_EQ(manifests->size(), 1u);
  ExpectSameSave(1);
}

TEST_F(DrainTest, AnIncrementalCopyNamesItsBaseWhereTheDestinationHoldsIt) {
  const std::string a = Bytes(3 << 20, 3);
  std::string b = a;
  b[100] ^= 1;  // one chunk of four... of twelve changes
  Save(1, {{"a", a}});
  Save(2, {{"a", b}});
  ASSERT_GT(Load(*src_, 2).manifests[0].ReferencedBytes(), 0u);
  ASSERT_TRUE(CopyCommittedStep(src_->backend(), dst_->backend(), "d", 1, Control()).ok());
  std::atomic<uint64_t> written{0};
  CopyControl c = Control();
  c.written = &written;
  ASSERT_TRUE(CopyCommittedStep(src_->backend(), dst_->backend(), "d", 2, c).ok());
  ExpectSameSave(1);
  ExpectSameSave(2);
  // Step 2's copy names step 1's objects by their names there, and only
  // what step 2 wrote itself was copied.
  LoadedCheckpoint base = Load(*dst_, 1), top = Load(*dst_, 2);
  std::set<std::string> base_objects;
  for (const auto& o : base.manifests[0].objects) base_objects.insert(o.name);
  size_t shared = 0;
  for (uint32_t i = 0; i < top.manifests[0].objects.size(); ++i) {
    if (!top.manifests[0].IsReference(i)) continue;
    ++shared;
    EXPECT_TRUE(base_objects.count(top.manifests[0].objects[i].name)) << top.manifests[0].objects[i].name;
  }
  EXPECT_GT(shared, 0u);
  EXPECT_LE(written.load(), Load(*src_, 2).manifests[0].OwnBytes() + (1u << 20));
}

}  // namespace
}  // namespace sluice
