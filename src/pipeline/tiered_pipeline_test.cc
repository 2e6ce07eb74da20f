// The staged, tiered pipeline through its public API, on real file stores:
// snapshot semantics, streaming through a small arena, drains, retention,
// tiered reads with fallback and repair, bandwidth caps, bad budgets.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "format/layout.h"
#include "io/token_bucket.h"
#include "sluice/backend_wrapper.h"
#include "pipeline/drain.h"
#include "sluice/pipeline.h"

namespace sluice {
namespace {

std::string Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  for (; i < n; ++i) s[i] = static_cast<char>(rng());
  return s;
}

std::map<std::string, std::string> ReadBack(CheckpointReader& r) {
  std::map<std::string, std::string> got;
  for (const auto& it : r.items()) got[it.key].resize(it.size);
  Status st = r.ReadAll(std::nullopt, [&](const ItemInfo& item, uint64_t off, const void* d, size_t n) {
    if (n > 0) std::memcpy(&got[item.key][off], d, n);
    return Status::OK();
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
  return got;
}

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-pipe-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::string cmd = "rm -rf " + dir_;
    (void)std::system(cmd.c_str());
  }
  std::string Tier(int k) const { return dir_ + "/tier" + std::to_string(k); }

  PipelineOptions Options(int tiers, uint64_t staging = 64ull << 20) {
    PipelineOptions o;
    for (int k = 0; k < tiers; ++k) o.tiers.push_back(TierOptions{Tier(k)});
    o.store.create_if_missing = true;
    o.store.chunk_bytes = 1 << 20;
    o.store.object_bytes = 16ull << 20;
    o.staging_bytes = staging;
    o.retry_initial_ms = 100;
    o.retry_max_ms = 400;
    return o;
  }

  std::unique_ptr<Pipeline> Open(const PipelineOptions& o) {
    auto p = Pipeline::Open(o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(p).value() : nullptr;
  }

  // Saves `items` as name@step and returns the handle (not waited on).
  std::shared_ptr<SaveHandle> Save(Pipeline& p, const std::string& name, uint64_t step,
                                   const std::map<std::string, std::string>& items) {
    auto pending = p.Begin({name, step}, 0, 1);
    EXPECT_TRUE(pending.ok()) << pending.status().ToString();
    if (!pending.ok()) return nullptr;
    for (const auto& [k, v] : items) {
      Status st = (*pending)->AddItem(k, "m", v.data(), v.size());
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    auto h = (*pending)->Snapshot();
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    return h.ok() ? *h : nullptr;
  }

  std::string dir_;
};

TEST_F(PipelineTest, SavedBytesAreThoseAtSnapshotTime) {
  auto p = Open(Options(1));
  std::string a = Bytes(24 << 20, 1), b = Bytes(5 << 20 | 123, 2);
  const std::string a0 = a, b0 = b;
  auto h = Save(*p, "m", 1, {{"a", a}, {"b", b}});
  ASSERT_NE(h, nullptr);
  // The caller reuses its buffers at once.
  std::memset(a.data(), 0x5a, a.size());
  std::memset(b.data(), 0xa5, b.size());
  ASSERT_TRUE(h->Wait().ok());
  EXPECT_GT(h->stall_seconds(), 0);
  auto progress = h->progress();
  ASSERT_EQ(progress.size(), 1u);
  EXPECT_EQ(progress[0].state, TierState::kCommitted);
  EXPECT_GE(progress[0].durable_seconds, h->stall_seconds());
  auto r = p->OpenCheckpoint("m", 1, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto got = ReadBack(**r);
  EXPECT_TRUE(got["a"] == a0);
  EXPECT_TRUE(got["b"] == b0);
  auto v = p->tier(0).Verify("m", 1);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->ok());
}

TEST_F(PipelineTest, CheckpointLargerThanStagingStreams) {
  // Two 4 MiB slabs of staging for ~70 MiB: the snapshot must wait for the
  // writer, and everything must still arrive intact.
  auto p = Open(Options(1, 8ull << 20));
  std::map<std::string, std::string> items{
      {"big", Bytes(50 << 20, 3)}, {"odd", Bytes((7 << 20) + 17, 4)}, {"empty", ""}, {"tiny", "x"},
      {"mid", Bytes(13 << 20, 5)}};
  for (int step = 1; step <= 2; ++step) {
    auto h = Save(*p, "s", step, items);
    ASSERT_NE(h, nullptr);
    ASSERT_TRUE(h->Wait().ok());
  }
  auto r = p->OpenCheckpoint("s", std::nullopt, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->info().step, 2u);
  EXPECT_TRUE(ReadBack(**r) == items);
}

TEST_F(PipelineTest, ItemSourcesAndMemoryItemsMix) {
  class Counting final : public ItemSource {
   public:
    explicit Counting(uint64_t n) : left_(n) {}
    Result<size_t> Read(void* buf, size_t len) override {
      size_t n = static_cast<size_t>(std::min<uint64_t>(len, left_));
      n = std::min<size_t>(n, 333333);  // short reads on purpose
      for (size_t i = 0; i < n; ++i) static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(pos_++ % 251);
      left_ -= n;
      return n;
    }
    uint64_t left_, pos_ = 0;
  };
  auto p = Open(Options(1, 8ull << 20));
  auto pending = p->Begin({"src", 1}, 0, 1);
  ASSERT_TRUE(pending.ok());
  Counting src(20 << 20);
  std::string mem = Bytes(9 << 20, 9);
  ASSERT_TRUE((*pending)->AddItem("from_source", "", 20 << 20, src).ok());
  ASSERT_TRUE((*pending)->AddItem("from_memory", "", mem.data(), mem.size()).ok());
  EXPECT_FALSE((*pending)->AddItem("from_memory", "", mem.data(), mem.size()).ok());
  EXPECT_FALSE((*pending)->AddItem("../up", "", mem.data(), 1).ok());
  auto h = (*pending)->Snapshot();
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE((*h)->Wait().ok());
  auto r = p->OpenCheckpoint("src", 1, nullptr);
  ASSERT_TRUE(r.ok());
  auto got = ReadBack(**r);
  ASSERT_EQ(got["from_source"].size(), 20u << 20);
  for (size_t i = 0; i < got["from_source"].size(); i += 4099) {
    ASSERT_EQ(static_cast<uint8_t>(got["from_source"][i]), i % 251);
  }
  EXPECT_TRUE(got["from_memory"] == mem);
}

TEST_F(PipelineTest, ShortSourceFailsTheSaveAndCommitsNothing) {
  class Short final : public ItemSource {
   public:
    Result<size_t> Read(void* buf, size_t len) override {
      if (given_ >= (3 << 20)) return size_t{0};
      size_t n = std::min<size_t>(len, (3 << 20) - given_);
      std::memset(buf, 1, n);
      given_ += n;
      return n;
    }
    size_t given_ = 0;
  };
  auto p = Open(Options(1, 8ull << 20));
  auto pending = p->Begin({"short", 1}, 0, 1);
  ASSERT_TRUE(pending.ok());
  Short src;
  ASSERT_TRUE((*pending)->AddItem("x", "", 10 << 20, src).ok());
  auto h = (*pending)->Snapshot();
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("declared"), std::string::npos) << h.status().ToString();
  // The arena is usable again and nothing was committed.
  auto h2 = Save(*p, "short", 2, {{"y", Bytes(12 << 20, 1)}});
  ASSERT_NE(h2, nullptr);
  ASSERT_TRUE(h2->Wait().ok());
  auto listed = p->tier(0).List("short", false);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].step, 2u);
}

TEST_F(PipelineTest, BadStagingBudgetsAreClearErrors) {
  for (bool at_open : {true, false}) {
    for (uint64_t budget : {uint64_t{0}, uint64_t{4096}, uint64_t{1} << 50, ~uint64_t{0}}) {
      auto o = Options(1, budget);
      o.staging_at_open = at_open;
      auto p = Pipeline::Open(o);
      ASSERT_FALSE(p.ok()) << budget;
      EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << p.status().ToString();
      EXPECT_NE(p.status().message().find("staging"), std::string::npos) << p.status().ToString();
    }
  }
}

TEST_F(PipelineTest, ArenaMadeAtFirstSaveServesReadsBeforeAndSavesAfter) {
  {
    auto p = Open(Options(1));
    ASSERT_TRUE(Save(*p, "lazy", 1, {{"a", Bytes(3 << 20, 1)}})->Wait().ok());
  }
  auto o = Options(1);
  o.staging_at_open = false;
  auto p = Open(o);
  ASSERT_NE(p, nullptr);
  auto r = p->OpenCheckpoint("lazy", 1, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::string got(3 << 20, '\0');
  ASSERT_TRUE((*r)->ReadRange("a", 0, got.data(), got.size()).ok());
  EXPECT_EQ(got, Bytes(3 << 20, 1));
  auto h = Save(*p, "lazy", 2, {{"a", Bytes(100 << 20, 2)}});  // larger than the arena: streams
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->Wait().ok());
  auto r2 = p->OpenCheckpoint("lazy", 2, nullptr);
  ASSERT_TRUE(r2.ok());
  std::string got2(100 << 20, '\0');
  ASSERT_TRUE((*r2)->ReadRange("a", 0, got2.data(), got2.size()).ok());
  EXPECT_TRUE(got2 == Bytes(100 << 20, 2));
}

TEST_F(PipelineTest, DrainsToTheNextTierAndListsStates) {
  auto p = Open(Options(2));
  std::map<std::string, std::string> items{{"w", Bytes(20 << 20, 7)}, {"v", Bytes(100, 8)}};
  auto h = Save(*p, "d", 5, items);
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->Wait().ok());
  auto pr = h->progress();
  ASSERT_EQ(pr.size(), 2u);
  EXPECT_EQ(pr[1].state, TierState::kCommitted);
  EXPECT_GE(pr[1].durable_seconds, pr[0].durable_seconds);
  for (int k = 0; k < 2; ++k) {
    auto v = p->tier(k).Verify("d", 5);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(v->ok());
  }
  auto listed = p->List("");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].tiers[0].state, "committed");
  EXPECT_EQ((*listed)[0].tiers[1].state, "committed");
  // Tier 1 alone restores it.
  auto t1 = Store::Open(Tier(1));
  ASSERT_TRUE(t1.ok());
  auto r = (*t1)->OpenCheckpoint("d", 5);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(ReadBack(**r) == items);
}

// The first data object of name@step on `tier`.
std::string FirstDataObject(const std::string& tier, const std::string& name, uint64_t step) {
  auto s = Store::Open(tier);
  if (!s.ok()) return "";
  auto listed = (*s)->backend().List(StepPrefix(name, step) + "data/");
  if (!listed.ok() || listed->empty()) return "";
  return tier + "/" + (*listed)[0].name;
}

// Flips one byte of a file behind sluice's back.
void FlipByte(const std::string& path, off_t at) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  char c;
  ASSERT_EQ(pread(fd, &c, 1, at), 1);
  c ^= 0x40;
  ASSERT_EQ(pwrite(fd, &c, 1, at), 1);
  ::close(fd);
}

TEST_F(PipelineTest, RestoreFallsBackToTheNextTierAndRepairs) {
  auto p = Open(Options(2));
  std::map<std::string, std::string> items{{"w", Bytes(6 << 20, 11)}, {"z", Bytes(3 << 20, 12)}};
  auto h = Save(*p, "f", 1, items);
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->Wait().ok());
  p.reset();
  // Flip one byte of tier 0's copy behind sluice's back.
  std::string obj = FirstDataObject(Tier(0), "f", 1);
  ASSERT_FALSE(obj.empty());
  ASSERT_NO_FATAL_FAILURE(FlipByte(obj, (1 << 20) + 5));
  {
    auto t0 = Store::Open(Tier(0));
    auto v = (*t0)->Verify("f", 1);
    ASSERT_TRUE(v.ok());
    ASSERT_EQ(v->bad.size(), 1u);
  }
  p = Open(Options(2));
  ReadRecovery rec;
  auto r = p->OpenCheckpoint("f", 1, &rec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(ReadBack(**r) == items);
  ASSERT_EQ(rec.fallbacks.size(), 1u);
  EXPECT_NE(rec.fallbacks[0].find("chunk 1"), std::string::npos) << rec.fallbacks[0];
  ASSERT_EQ(rec.repairs.size(), 1u);
  EXPECT_NE(rec.repairs[0].find("rewrote"), std::string::npos) << rec.repairs[0];
  auto v = p->tier(0).Verify("f", 1);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->ok()) << "tier 0 not repaired";

  // A missing object on tier 0 is served from tier 1 too.
  ASSERT_EQ(::unlink(FirstDataObject(Tier(0), "f", 1).c_str()), 0);
  ReadRecovery rec2;
  auto r2 = p->OpenCheckpoint("f", 1, &rec2);
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(ReadBack(**r2) == items);
  EXPECT_FALSE(rec2.fallbacks.empty());
  EXPECT_TRUE(p->tier(0).Verify("f", 1)->ok());
}

// A repair never destroys the copy it meant to fix: when the later tier's
// copy of the object is bad too (in another chunk), the repair is refused
// before the faster tier's object is touched, and a restore still gets every
// byte (each chunk from whichever tier has it good).
TEST_F(PipelineTest, ARepairFromACopyBadElsewhereLeavesTheObjectAlone) {
  auto p = Open(Options(2));
  std::map<std::string, std::string> items{{"w", Bytes(6 << 20, 21)}};
  auto h = Save(*p, "both", 1, items);
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->Wait().ok());
  p.reset();
  ASSERT_NO_FATAL_FAILURE(FlipByte(FirstDataObject(Tier(0), "both", 1), (1 << 20) + 5));  // chunk 1 on tier 0
  ASSERT_NO_FATAL_FAILURE(FlipByte(FirstDataObject(Tier(1), "both", 1), (5 << 20) + 7));  // chunk 5 on tier 1
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    p = Open(Options(2));
    ReadRecovery rec;
    auto r = p->OpenCheckpoint("both", 1, &rec);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(ReadBack(**r) == items);
    ASSERT_EQ(rec.repairs.size(), 1u);
    EXPECT_NE(rec.repairs[0].find("could not rewrite"), std::string::npos) << rec.repairs[0];
    auto v = p->tier(0).Verify("both", 1);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->bad.size(), 1u) << "tier 0's object was touched by a repair that could not succeed";
    p.reset();
  }
}

TEST_F(PipelineTest, RetentionKeepsLastKButNeverTheOnlyCopy) {
  auto o = Options(2);
  o.tiers[0].keep_last = 2;
  o.tiers[1].keep_last = 3;
  o.tiers[1].backlog = BacklogPolicy::kDrainEvery;  // every step reaches tier 1 (coalescing: below)
  {
    auto p = Open(o);
    for (int s = 1; s <= 5; ++s) {
      auto h = Save(*p, "r", s, {{"x", Bytes(1 << 20, s)}});
      ASSERT_NE(h, nullptr);
      ASSERT_TRUE(h->Wait().ok());
    }
  }
  auto steps = [&](int k) {
    std::vector<uint64_t> out;
    auto s = Store::Open(Tier(k));
    auto listed = (*s)->List("r", false);
    for (const auto& i : *listed) out.push_back(i.step);
    return out;
  };
  EXPECT_EQ(steps(0), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(steps(1), (std::vector<uint64_t>{3, 4, 5}));

  // The durable tier goes away: tier 0 keeps every new step, whatever K says.
  {
    auto p = Open(o);
    // The new pipeline's background thread may be reading or tidying the
    // tier while it goes, or start a drain into it once part of it is gone
    // (a writer lock appears in a step rm is emptying): a removal that
    // races it is tried again, until the tier is gone.
    const std::string rm = "for i in 1 2 3 4 5 6 7 8 9 10; do rm -rf " + Tier(1) + " 2>/dev/null && exit 0; "
                           "sleep 0.05; done; exit 1";
    ASSERT_EQ(std::system(rm.c_str()), 0);
    for (int s = 6; s <= 8; ++s) {
      auto pending = p->Begin({"r", static_cast<uint64_t>(s)}, 0, 1);
      ASSERT_TRUE(pending.ok());
      std::string x = Bytes(1 << 20, s);
      ASSERT_TRUE((*pending)->AddItem("x", "", x.data(), x.size()).ok());
      auto h = (*pending)->Snapshot();
      ASSERT_TRUE(h.ok());
      ASSERT_TRUE((*h)->WaitTier(0).ok());
    }
    // Let the drains fail at least once.
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    auto listed = p->List("r");
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    bool saw_failed = false;
    for (const auto& c : *listed) {
      if (c.info.step >= 6) {
        EXPECT_EQ(c.tiers[0].state, "committed");
        if (c.tiers[1].state == "failed") {
          saw_failed = true;
          EXPECT_FALSE(c.tiers[1].reason.empty());
        }
      }
    }
    EXPECT_TRUE(saw_failed);
  }
  EXPECT_EQ(steps(0), (std::vector<uint64_t>{4, 5, 6, 7, 8}));
  // It comes back: a drain finishes the job, and retention then trims.
  ASSERT_EQ(::mkdir(Tier(1).c_str(), 0755), 0);
  o.resume_drains = false;
  auto p = Open(o);
  auto report = p->Drain("");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->failures.empty()) << report->failures[0];
  EXPECT_EQ(steps(1), (std::vector<uint64_t>{6, 7, 8}));
  EXPECT_EQ(steps(0), (std::vector<uint64_t>{7, 8}));
  auto listed = p->List("r");
  ASSERT_TRUE(listed.ok());
  for (const auto& c : *listed) {
    if (c.info.step == 7) {
      EXPECT_EQ(c.tiers[1].state, "committed");
    }
  }
}

TEST(PlanTiersTest, CoalesceDrainsOnlyTheNewestWaitingStep) {
  std::vector<TierOptions> tiers(2);
  tiers[0].keep_last = 2;
  std::vector<std::set<uint64_t>> committed = {{1, 2, 3, 4, 5}, {1}};
  auto plans = PlanTiers(committed, tiers);
  EXPECT_EQ(plans[1].to_drain, (std::set<uint64_t>{5}));
  EXPECT_EQ(plans[1].superseded, (std::set<uint64_t>{2, 3, 4}));
  // Superseded steps leave tier 0 as its keep-last allows; 4 is still kept.
  EXPECT_EQ(plans[0].to_remove, (std::set<uint64_t>{1, 2, 3}));

  // The step being drained now is neither superseded nor removed.
  plans = PlanTiers(committed, tiers, {{}, {3}});
  EXPECT_EQ(plans[1].to_drain, (std::set<uint64_t>{3, 5}));
  EXPECT_EQ(plans[1].superseded, (std::set<uint64_t>{2, 4}));
  EXPECT_EQ(plans[0].to_remove, (std::set<uint64_t>{1, 2}));

  // A newer step already there supersedes every waiting one.
  plans = PlanTiers({{4, 5, 6}, {6}}, tiers);
  EXPECT_TRUE(plans[1].to_drain.empty());
  EXPECT_EQ(plans[1].superseded, (std::set<uint64_t>{4, 5}));
  EXPECT_EQ(plans[0].to_remove, (std::set<uint64_t>{4}));

  // A step only tier 1 holds (an earlier run's, before a rollback)
  // supersedes nothing of the new run.
  plans = PlanTiers({{110, 120}, {150}}, tiers);
  EXPECT_EQ(plans[1].to_drain, (std::set<uint64_t>{120}));
  EXPECT_EQ(plans[1].superseded, (std::set<uint64_t>{110}));

  // Drain every step: all wait, and tier 0 keeps each until it is there.
  tiers[1].backlog = BacklogPolicy::kDrainEvery;
  plans = PlanTiers(committed, tiers);
  EXPECT_EQ(plans[1].to_drain, (std::set<uint64_t>{2, 3, 4, 5}));
  EXPECT_TRUE(plans[1].superseded.empty());
  EXPECT_EQ(plans[0].to_remove, (std::set<uint64_t>{1}));

  // Tier 1's keep-last bounds what it wants under either policy.
  tiers[1].keep_last = 1;
  plans = PlanTiers(committed, tiers);
  EXPECT_EQ(plans[1].to_drain, (std::set<uint64_t>{5}));
  EXPECT_EQ(plans[0].to_remove, (std::set<uint64_t>{1, 2, 3}));
}

// Saves 1 MiB steps first..first+count-1 back to back into a pipeline whose
// tier 1 drains at 2 MiB/s (each drain about 0.5 s), waiting only for tier 0.
std::vector<std::shared_ptr<SaveHandle>> SaveFasterThanTierOneDrains(
    Pipeline& p, int count, std::vector<TierBacklog>* backlog_after_last, int first = 1) {
  std::vector<std::shared_ptr<SaveHandle>> handles;
  for (int s = first; s < first + count; ++s) {
    auto pending = p.Begin({"slow", static_cast<uint64_t>(s)}, 0, 1);
    EXPECT_TRUE(pending.ok()) << pending.status().ToString();
    if (!pending.ok()) return handles;
    std::string x = Bytes(1 << 20, s);
    EXPECT_TRUE((*pending)->AddItem("x", "", x.data(), x.size()).ok());
    auto h = (*pending)->Snapshot();
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (!h.ok()) return handles;
    EXPECT_TRUE((*h)->WaitTier(0).ok());
    handles.push_back(*h);
  }
  if (backlog_after_last != nullptr && !handles.empty()) *backlog_after_last = handles.back()->backlog();
  return handles;
}

TEST_F(PipelineTest, ASlowTierCoalescesToTheNewestStepAndSaysSo) {
  auto o = Options(2);
  o.tiers[1].rate_bytes_per_sec = 2ull << 20;
  std::vector<TierBacklog> backlog;
  std::vector<std::shared_ptr<SaveHandle>> handles;
  {
    auto p = Open(o);
    handles = SaveFasterThanTierOneDrains(*p, 6, &backlog);
    ASSERT_EQ(handles.size(), 6u);
    // At most the drain running and the newest step waiting.
    ASSERT_EQ(backlog.size(), 2u);
    EXPECT_EQ(backlog[1].uri, Tier(1));
    EXPECT_GE(backlog[1].steps, 1u);
    EXPECT_LE(backlog[1].steps, 2u);
    EXPECT_LE(backlog[1].bytes, 2ull << 20);
    // The newest step always drains.
    ASSERT_TRUE(handles.back()->Wait().ok());
    EXPECT_EQ(p->Backlog()[1].steps, 0u);
  }
  // Step 1 drained at once; 2..5 waited behind it, so only the newest of
  // them (6) followed: the others were superseded, and said so.
  uint64_t superseded = 0;
  for (size_t i = 0; i < handles.size(); ++i) {
    const TierProgress t1 = handles[i]->progress()[1];
    if (t1.state == TierState::kSuperseded) {
      ++superseded;
      Status st = handles[i]->WaitTier(1);
      EXPECT_EQ(st.code(), StatusCode::kUnavailable);
      EXPECT_NE(st.message().find("superseded"), std::string::npos) << st.ToString();
      EXPECT_TRUE(handles[i]->done());
    } else {
      EXPECT_EQ(t1.state, TierState::kCommitted) << i;
    }
  }
  EXPECT_GE(superseded, 2u);
  EXPECT_EQ(handles.back()->backlog()[1].superseded, superseded);
  EXPECT_EQ(handles[0]->progress()[1].state, TierState::kCommitted);

  // ls: tier 0 kept them all (keep-last all); tier 1 shows them superseded.
  o.resume_drains = false;
  auto p = Open(o);
  auto listed = p->List("slow");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 6u);
  uint64_t listed_superseded = 0;
  for (const auto& c : *listed) {
    EXPECT_EQ(c.tiers[0].state, "committed");
    if (c.tiers[1].state == "superseded") {
      ++listed_superseded;
      EXPECT_FALSE(c.tiers[1].reason.empty());
    } else {
      EXPECT_EQ(c.tiers[1].state, "committed") << c.info.step;
    }
  }
  EXPECT_EQ(listed_superseded, superseded);
  auto from_listing = BacklogOf(*listed, {Tier(0), Tier(1)});
  EXPECT_EQ(from_listing[1].steps, 0u);
  EXPECT_EQ(from_listing[1].superseded, superseded);
  // A drain does not copy superseded steps; with a keep-last on tier 0 they
  // then leave it, as steps already on tier 1 would.
  p.reset();
  o.tiers[0].keep_last = 1;
  p = Open(o);
  auto report = p->Drain("");
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->checkpoints_drained, 0u);
  EXPECT_EQ(report->checkpoints_superseded, superseded);
  listed = p->List("slow");
  ASSERT_TRUE(listed.ok());
  for (const auto& c : *listed) {
    if (c.info.step == 6) {
      EXPECT_EQ(c.tiers[0].state, "committed");
    } else {
      EXPECT_NE(c.tiers[0].state, "committed") << c.info.step;
      EXPECT_EQ(c.tiers[1].state, "committed") << c.info.step;  // only those tier 1 holds are left
    }
  }
}

TEST_F(PipelineTest, SupersededStepsLeaveTierZeroWhileALongDrainRuns) {
  auto o = Options(2);
  o.store.io_bytes = 1 << 20;  // the cap's burst: one I/O
  o.tiers[0].keep_last = 1;
  o.tiers[1].rate_bytes_per_sec = 256 << 10;  // step 1's 1 MiB drain: ~3 s
  auto p = Open(o);
  auto handles = SaveFasterThanTierOneDrains(*p, 5, nullptr);
  ASSERT_EQ(handles.size(), 5u);
  auto steps_on_tier0 = [&] {
    std::vector<uint64_t> out;
    auto listed = p->tier(0).List("slow", false);
    if (listed.ok()) {
      for (const auto& i : *listed) out.push_back(i.step);
    }
    return out;
  };
  // Step 1 is draining, 5 waits; 2-4 were superseded and go from tier 0 at
  // once, not when the drain ends.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (steps_on_tier0() != std::vector<uint64_t>{1, 5} && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(steps_on_tier0(), (std::vector<uint64_t>{1, 5}));
  EXPECT_EQ(handles[0]->progress()[1].state, TierState::kWriting);
  ASSERT_TRUE(handles.back()->Wait().ok());
}

TEST_F(PipelineTest, DrainEveryStepLetsTheBacklogGrowAndDrainsAll) {
  auto o = Options(2);
  o.tiers[1].rate_bytes_per_sec = 2ull << 20;
  o.tiers[1].backlog = BacklogPolicy::kDrainEvery;
  auto p = Open(o);
  std::vector<TierBacklog> backlog;
  auto handles = SaveFasterThanTierOneDrains(*p, 6, &backlog);
  ASSERT_EQ(handles.size(), 6u);
  EXPECT_GE(backlog[1].steps, 4u);
  EXPECT_GE(backlog[1].bytes, 4ull << 20);
  EXPECT_EQ(backlog[1].superseded, 0u);
  for (auto& h : handles) ASSERT_TRUE(h->Wait().ok());
  EXPECT_EQ(p->Backlog()[1].steps, 0u);
}

TEST_F(PipelineTest, ABacklogPastItsLimitRefusesOrHoldsTheNextSave) {
  auto o = Options(2);
  o.tiers[1].rate_bytes_per_sec = 2ull << 20;
  o.tiers[1].backlog = BacklogPolicy::kDrainEvery;
  o.max_backlog_steps = 2;
  o.when_backlogged = BusyPolicy::kRefuse;
  {
    auto p = Open(o);
    auto handles = SaveFasterThanTierOneDrains(*p, 2, nullptr);
    ASSERT_EQ(handles.size(), 2u);
    auto third = p->Begin({"slow", 3}, 0, 1);
    ASSERT_FALSE(third.ok());
    EXPECT_EQ(third.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(third.status().message().find("backlog of 2 step(s)"), std::string::npos) << third.status().ToString();
    ASSERT_TRUE(handles[0]->Wait().ok());
    auto fourth = p->Begin({"slow", 4}, 0, 1);
    EXPECT_TRUE(fourth.ok()) << fourth.status().ToString();
  }
  o.when_backlogged = BusyPolicy::kWait;
  o.max_backlog_steps = 0;
  o.max_backlog_bytes = 1 << 20;  // one step's bytes
  auto p = Open(o);
  auto handles = SaveFasterThanTierOneDrains(*p, 1, nullptr, 11);
  ASSERT_EQ(handles.size(), 1u);
  const auto start = std::chrono::steady_clock::now();
  auto next = p->Begin({"slow", 12}, 0, 1);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  // It waited for step 1's drain (about 0.5 s at 2 MiB/s).
  EXPECT_EQ(handles[0]->progress()[1].state, TierState::kCommitted);
  EXPECT_GT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.2);
}

TEST_F(PipelineTest, NextPipelineResumesAnUnfinishedDrain) {
  auto o = Options(2);
  ASSERT_EQ(::mkdir(dir_.c_str(), 0755) == 0 || errno == EEXIST, true);
  {
    // Only tier 0 at first: the checkpoint is committed there alone.
    auto p = Open(Options(1));
    auto h = Save(*p, "u", 1, {{"x", Bytes(3 << 20, 1)}});
    ASSERT_TRUE(h->Wait().ok());
  }
  auto p = Open(o);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    auto listed = p->List("u");
    ASSERT_TRUE(listed.ok());
    if ((*listed)[0].tiers[1].state == "committed") break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << (*listed)[0].tiers[1].state;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST_F(PipelineTest, BusySavesWaitOrAreRefused) {
  auto o = Options(2);
  o.max_in_flight = 1;
  o.when_busy = BusyPolicy::kRefuse;
  o.tiers[0].rate_bytes_per_sec = 8ull << 20;  // ~1 s for the tier-0 write
  auto p = Open(o);
  auto h = Save(*p, "b", 1, {{"x", Bytes(8 << 20, 1)}});
  ASSERT_NE(h, nullptr);
  auto second = p->Begin({"b", 2}, 0, 1);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(h->WaitTier(0).ok());
  auto third = p->Begin({"b", 3}, 0, 1);
  EXPECT_TRUE(third.ok()) << third.status().ToString();
}

TEST_F(PipelineTest, TwoRanksSaveOneCheckpoint) {
  // One pipeline per rank, as in separate processes.
  auto p = Open(Options(2));
  auto p1 = Open(Options(2));
  std::string d0 = Bytes(5 << 20, 1), d1 = Bytes(7 << 20, 2);
  std::shared_ptr<SaveHandle> h0, h1;
  std::thread t([&] {
    auto pending = p1->Begin({"mr", 1}, 1, 2);
    ASSERT_TRUE(pending.ok());
    ASSERT_TRUE((*pending)->AddItem("rank1", "", d1.data(), d1.size()).ok());
    auto h = (*pending)->Snapshot();
    ASSERT_TRUE(h.ok());
    h1 = *h;
  });
  auto pending = p->Begin({"mr", 1}, 0, 2);
  ASSERT_TRUE(pending.ok());
  ASSERT_TRUE((*pending)->AddItem("rank0", "", d0.data(), d0.size()).ok());
  auto h = (*pending)->Snapshot();
  ASSERT_TRUE(h.ok());
  h0 = *h;
  t.join();
  ASSERT_NE(h1, nullptr);
  ASSERT_TRUE(h0->Wait().ok());
  ASSERT_TRUE(h1->Wait().ok());
  EXPECT_EQ(h1->progress()[1].state, TierState::kSkipped);
  auto t1 = Store::Open(Tier(1));
  auto r = (*t1)->OpenCheckpoint("mr", 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto got = ReadBack(**r);
  EXPECT_TRUE(got["rank0"] == d0);
  EXPECT_TRUE(got["rank1"] == d1);
}

// A store that refuses to create or remove objects while "down" (as a
// cluster with every OSD stopped), the rest passing through.
class FlakyBackend final : public BackendWrapper {
 public:
  FlakyBackend(std::unique_ptr<Backend> inner, std::atomic<bool>* down)
      : BackendWrapper(std::move(inner)), down_(down) {}
  Result<std::unique_ptr<WritableObject>> Create(const std::string& n, const CreateOptions& o) override {
    if (*down_) return Status::Unavailable("create " + n + ": store down");
    return BackendWrapper::Create(n, o);
  }
  Status Remove(const std::string& n) override {
    if (*down_) return Status::Unavailable("remove " + n + ": store down");
    return BackendWrapper::Remove(n);
  }

 private:
  std::atomic<bool>* down_;
};

// A drain that failed while the destination was down, leaving its writer
// lock behind (the remove failed too), must not block this same process's
// retry once the destination is back.
TEST_F(PipelineTest, RetryAfterAnOutageIsNotBlockedByItsOwnStaleLock) {
  auto o = Options(2);
  std::atomic<bool> down{true};
  std::vector<std::unique_ptr<Store>> stores;
  auto s0 = Store::Open(Tier(0), o.store);
  ASSERT_TRUE(s0.ok());
  stores.push_back(std::move(s0).value());
  auto b1 = OpenBackend(Tier(1), true);
  ASSERT_TRUE(b1.ok());
  stores.push_back(Store::Open(std::make_unique<FlakyBackend>(std::move(b1).value(), &down), o.store));
  auto opened = Pipeline::Open(o, std::move(stores));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto p = std::move(opened).value();
  auto h = Save(*p, "out", 1, {{"x", Bytes(3 << 20, 5)}});
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->WaitTier(0).ok());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (h->progress()[1].attempts < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(h->progress()[1].attempts, 2u) << "the drain should have failed and retried";
  down = false;
  // Bounded: retries are 100..400 ms apart here.
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (!h->done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(h->progress()[1].state, TierState::kCommitted) << h->progress()[1].error.ToString();
}

TEST(TokenBucketTest, HoldsTheRateAcrossThreads) {
  const uint64_t rate = 40ull << 20;
  TokenBucket bucket(rate, 1 << 20, 0);
  std::atomic<uint64_t> total{0};
  auto start = std::chrono::steady_clock::now();
  auto work = [&] {
    while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(2500)) {
      bucket.Acquire(256 << 10);
      total += 256 << 10;
      bucket.Release();
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double realized = static_cast<double>(total.load()) / secs;
  EXPECT_NEAR(realized / static_cast<double>(rate), 1.0, 0.05) << realized / (1 << 20) << " MiB/s";
}

TEST(TokenBucketTest, CapsConcurrency) {
  TokenBucket bucket(0, 1, 2);
  std::atomic<int> inside{0}, most{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 6; ++i) {
    ts.emplace_back([&] {
      for (int j = 0; j < 50; ++j) {
        bucket.Acquire(1);
        int now = ++inside;
        int m = most.load();
        while (now > m && !most.compare_exchange_weak(m, now)) {}
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        --inside;
        bucket.Release();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_LE(most.load(), 2);
  EXPECT_EQ(most.load(), 2);
}

// The drain's realized rate over every 10 s window stays within 5% of its cap.
TEST_F(PipelineTest, DrainHoldsItsRateCapOverTenSecondWindows) {
  const uint64_t cap = 20ull << 20;
  auto o = Options(2, 256ull << 20);
  o.tiers[1].rate_bytes_per_sec = cap;
  auto p = Open(o);
  auto h = Save(*p, "rate", 1, {{"x", Bytes(250 << 20, 3)}});
  ASSERT_NE(h, nullptr);
  ASSERT_TRUE(h->WaitTier(0).ok());
  std::vector<std::pair<double, uint64_t>> samples;
  auto start = std::chrono::steady_clock::now();
  while (!h->done()) {
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    samples.push_back({t, h->progress()[1].bytes_written});
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(h->Wait().ok());
  ASSERT_GT(samples.size(), 100u);
  int windows = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    for (size_t j = i + 1; j < samples.size(); ++j) {
      if (samples[j].first - samples[i].first < 10.0) continue;
      // Only windows with the drain running throughout.
      if (samples[i].second == 0 || samples[j].second >= (250ull << 20)) break;
      double rate = static_cast<double>(samples[j].second - samples[i].second) /
                    (samples[j].first - samples[i].first);
      EXPECT_NEAR(rate / static_cast<double>(cap), 1.0, 0.05)
          << "window at " << samples[i].first << " s: " << rate / (1 << 20) << " MiB/s";
      ++windows;
      break;
    }
  }
  EXPECT_GT(windows, 0);
}

}  // namespace
}  // namespace sluice
