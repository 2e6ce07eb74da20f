// Scrub and rebuild as the pipeline runs them in the background, and the
// scrub engine's guarantees that the CLI tests cannot reach: a repair never
// starts from a copy that is bad too, a stopped scrub records no verdict,
// and a pipeline with a slow background scrub closes at once.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/catalog.h"
#include "format/layout.h"
#include "pipeline/scrub.h"
#include "sluice/metrics.h"
#include "sluice/pipeline.h"

namespace sluice {
namespace {

std::string Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  return s;
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(~c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

class MaintenanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-maint-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)std::system(("rm -rf " + dir_).c_str()); }
  std::string Tier(int k) const { return dir_ + "/tier" + std::to_string(k); }
  PipelineOptions Options() {
    PipelineOptions o;
    for (int k = 0; k < 2; ++k) o.tiers.push_back(TierOptions{Tier(k)});
    o.store.create_if_missing = true;
    o.store.chunk_bytes = 1 << 20;
    o.store.object_bytes = 8ull << 20;
    o.staging_bytes = 32ull << 20;
    return o;
  }
  // Saves steps 1..n of "m" (8 MiB each) and waits until both tiers hold them.
  void SaveSteps(int n, size_t bytes = 8 << 20) {
    auto p = Pipeline::Open(Options());
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    for (int s = 1; s <= n; ++s) {
      auto pending = (*p)->Begin({"m", static_cast<uint64_t>(s)}, 0, 1);
      ASSERT_TRUE(pending.ok());
      const std::string data = Bytes(bytes, s);
      ASSERT_TRUE((*pending)->AddItem("w", "", data.data(), data.size()).ok());
      auto h = (*pending)->Snapshot();
      ASSERT_TRUE(h.ok());
      ASSERT_TRUE((*h)->Wait().ok());
    }
  }
  // The file of data object `index` of rank 0 of the step's copy on `tier`
  // (each copy names its objects its own way).
  std::string DataObject(int tier, uint64_t step, size_t index = 0) {
    auto b = OpenBackend(Tier(tier), false);
    auto loaded = LoadCheckpoint(**b, "m", step);
    if (!loaded.ok() || loaded->manifests.empty() || loaded->manifests[0].objects.size() <= index) return "";
    auto listed = (*b)->List(StepPrefix("m", step) + "data/");
    if (listed.ok() && listed->size() != loaded->manifests[0].objects.size()) {
      ADD_FAILURE() << "tier " << tier << " holds " << listed->size() << " data objects of step " << step
                    << ", its commit names " << loaded->manifests[0].objects.size();
    }
    return Tier(tier) + "/" + loaded->manifests[0].objects[index].name;
  }
  // Polls until `pred` holds, at most `seconds`.
  template <typename Pred>
  bool Eventually(Pred pred, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return pred();
  }
  std::string dir_;
};

TEST_F(MaintenanceTest, BackgroundScrubRepairsABadCopyAndRecordsIt) {
  SaveSteps(2);
  FlipByte(DataObject(0, 1), 12345);
  PipelineOptions o = Options();
  o.scrub_rate_bytes_per_sec = 256ull << 20;
  auto p = Pipeline::Open(o);
  ASSERT_TRUE(p.ok());
  auto status_of = [&](int tier, uint64_t step) {
    auto b = OpenBackend(Tier(tier), false);
    for (const auto& e : ReadScrubStatus(**b).entries) {
      if (e.name == "m" && e.step == step) return e.state;
    }
    return std::string();
  };
  ASSERT_TRUE(Eventually([&] { return !status_of(0, 1).empty(); }, 20));
  EXPECT_EQ(status_of(0, 1), "repaired");
  EXPECT_EQ(status_of(0, 2), "ok");
  EXPECT_EQ(status_of(1, 1), "ok");
  // The repaired copy verifies on its own, and ls shows the scrub.
  auto alone = Store::Open(Tier(0));
  ASSERT_TRUE(alone.ok());
  auto report = (*alone)->Verify("m", 1);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok());
  auto listed = (*p)->List("m");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].tiers[0].scrub_result, "repaired");
  EXPECT_GT((*listed)[0].tiers[0].scrubbed_unix_ms, 0);
}

TEST_F(MaintenanceTest, AClosingPipelineStopsASlowScrubAtOnceAndRecordsNoVerdict) {
  SaveSteps(2);
  PipelineOptions o = Options();
  o.scrub_rate_bytes_per_sec = 1 << 20;  // 16 s for the whole pass
  auto p = Pipeline::Open(o);
  ASSERT_TRUE(p.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const auto t0 = std::chrono::steady_clock::now();
  p->reset();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  // Whatever it recorded, none of it is a verdict the stop made up.
  for (int k = 0; k < 2; ++k) {
    auto b = OpenBackend(Tier(k), false);
    for (const auto& e : ReadScrubStatus(**b).entries) EXPECT_EQ(e.state, "ok") << e.detail;
  }
}

TEST_F(MaintenanceTest, ScrubWaitsWhileASaveIsInFlight) {
  SaveSteps(1);
  PipelineOptions o = Options();
  o.scrub_rate_bytes_per_sec = 256ull << 20;
  // A save begun and not yet snapshotted is in flight: no scrub result may
  // appear until it ends.
  auto p = Pipeline::Open(o);
  ASSERT_TRUE(p.ok());
  auto pending = (*p)->Begin({"m", 2}, 0, 1);
  ASSERT_TRUE(pending.ok());
  auto b = OpenBackend(Tier(0), false);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_TRUE(ReadScrubStatus(**b).entries.empty()) << "scrubbed while a save was in flight";
  pending->reset();  // the save is dropped: the scrub may go
  EXPECT_TRUE(Eventually([&] { return !ReadScrubStatus(**b).entries.empty(); }, 20));
}

TEST_F(MaintenanceTest, APipelineFindingTier0EmptyRebuildsTheNewestSteps) {
  SaveSteps(3);
  ASSERT_EQ(std::system(("rm -rf " + Tier(0) + " && mkdir " + Tier(0)).c_str()), 0);
  PipelineOptions o = Options();
  o.rebuild_rate_bytes_per_sec = 64ull << 20;
  o.rebuild_keep_last = 2;
  auto p = Pipeline::Open(o);
  ASSERT_TRUE(p.ok());
  // Restores work meanwhile, from tier 1 or the rebuilt tier 0.
  auto r = (*p)->OpenCheckpoint("m", 1, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::string got(8 << 20, '\0');
  ASSERT_TRUE((*r)->ReadRange("w", 0, got.data(), got.size()).ok());
  EXPECT_EQ(got, Bytes(8 << 20, 1));
  auto tier0 = Store::Open(Tier(0));
  ASSERT_TRUE(tier0.ok());
  ASSERT_TRUE(Eventually([&] {
    auto l = (*tier0)->List("m", false);
    return l.ok() && l->size() == 2;
  }, 20));
  auto l = (*tier0)->List("m", false);
  EXPECT_EQ((*l)[0].step, 2u);
  EXPECT_EQ((*l)[1].step, 3u);
  for (uint64_t s : {2, 3}) {
    auto v = (*tier0)->Verify("m", s);
    ASSERT_TRUE(v.ok());
    EXPECT_TRUE(v->ok());
  }
}

TEST_F(MaintenanceTest, ARepairNeverStartsFromACopyThatIsBadToo) {
  SaveSteps(1);
  // Different chunks bad on each tier: neither copy is good in full, so
  // neither is used to "repair" the other, and neither is changed.
  FlipByte(DataObject(0, 1), 100);
  FlipByte(DataObject(1, 1), (3 << 20) + 7);
  auto b0 = OpenBackend(Tier(0), false), b1 = OpenBackend(Tier(1), false);
  ScrubOptions s;
  auto report = Scrub({b0->get(), b1->get()}, s);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->copies.size(), 2u);
  for (const auto& c : report->copies) {
    EXPECT_EQ(c.state, "unrepairable") << c.tier;
    EXPECT_TRUE(c.rewritten.empty());
  }
  EXPECT_FALSE(report->ok());
}

TEST_F(MaintenanceTest, TwoCopiesBadInDifferentObjectsHealEachOther) {
  SaveSteps(1, 20 << 20);  // three data objects of at most 8 MiB
  FlipByte(DataObject(0, 1, 0), 100);
  FlipByte(DataObject(1, 1, 2), 100);
  auto b0 = OpenBackend(Tier(0), false), b1 = OpenBackend(Tier(1), false);
  auto report = Scrub({b0->get(), b1->get()}, ScrubOptions{});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->copies.size(), 2u);
  for (const auto& c : report->copies) {
    EXPECT_EQ(c.state, "repaired") << c.tier << ": " << c.reason;
    EXPECT_EQ(c.rewritten.size(), 1u);
  }
  EXPECT_TRUE(report->ok());
  for (int k = 0; k < 2; ++k) {
    auto store = Store::Open(Tier(k));
    auto v = (*store)->Verify("m", 1);
    ASSERT_TRUE(v.ok());
    EXPECT_TRUE(v->ok()) << "tier " << k;
  }
}

// A scrape before any pipeline opens (the CLI serves metrics while a RADOS
// tier connects) sees every family the pipeline records, at zero.
TEST(PipelineMetricsTest, DeclaredFamiliesAreScrapedAtZeroBeforeAnyPipeline) {
  DeclarePipelineMetrics(3);
  const std::string text = DefaultMetrics().RenderPrometheus();
  for (const char* family :
       {"sluice_tier_written_bytes_total", "sluice_durable_seconds", "sluice_stall_seconds", "sluice_snapshots_total",
        "sluice_checkpoints_in_flight", "sluice_tier_backlog_steps", "sluice_drain_queue_depth",
        "sluice_staging_bytes", "sluice_throttled_seconds_total", "sluice_scrub_read_bytes_total"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
  }
  EXPECT_NE(text.find("sluice_tier_written_bytes_total{tier=\"2\",flow=\"drain\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sluice_checkpoints_in_flight{tier=\"2\",state=\"queued\"} 0\n"), std::string::npos);
  EXPECT_EQ(text.find("sluice_tier_info"), std::string::npos) << "no tier is open";
  // Declaring fewer tiers later keeps what was declared, adds nothing twice.
  DeclarePipelineMetrics(1);
  const std::string again = DefaultMetrics().RenderPrometheus();
  EXPECT_NE(again.find("sluice_checkpoints_in_flight{tier=\"2\",state=\"queued\"} 0\n"), std::string::npos);
  EXPECT_EQ(again.find("sluice_drain_queue_depth 0\n"), again.rfind("sluice_drain_queue_depth 0\n"));
}

}  // namespace
}  // namespace sluice
