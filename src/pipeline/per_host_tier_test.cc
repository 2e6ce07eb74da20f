// Multi-rank saves whose tier 0 is each host's own (tier0_per_host,
// checkpoint/parts.h), on real file stores: one directory per "host" as
// tier 0 and one shared directory as tier 1, one pipeline per rank (as in
// separate processes on separate hosts).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/garbage_collector.h"
#include "checkpoint/parts.h"
#include "format/layout.h"
#include "sluice/pipeline.h"

namespace sluice {
namespace {

std::string Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

std::map<std::string, std::string> ReadBack(CheckpointReader& r, std::optional<uint32_t> rank = std::nullopt) {
  std::map<std::string, std::string> got;
  for (const auto& it : r.items()) {
    if (!rank || it.rank == *rank) got[it.key].resize(it.size);
  }
  Status st = r.ReadAll(rank, [&](const ItemInfo& item, uint64_t off, const void* d, size_t n) {
    if (n > 0) std::memcpy(&got[item.key][off], d, n);
    return Status::OK();
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
  return got;
}

// The data objects of `rank` in (name, step) on `backend`.
std::vector<std::string> DataOf(Backend& backend, const std::string& name, uint64_t step, uint32_t rank) {
  std::vector<std::string> out;
  auto listed = backend.List(StepPrefix(name, step) + "data/");
  EXPECT_TRUE(listed.ok()) << listed.status().ToString();
  if (!listed.ok()) return out;
  char mark[16];
  std::snprintf(mark, sizeof mark, "/r%06u-", rank);
  for (const auto& o : *listed) {
    if (o.name.find(mark) != std::string::npos) out.push_back(o.name);
  }
  return out;
}

// Flips one byte of a file in place.
void Flip(const std::string& path, long offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(offset);
  f.write(&c, 1);
}

class PerHostTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-perhost-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::string cmd = "rm -rf " + dir_;
    (void)std::system(cmd.c_str());
  }
  std::string Host(uint32_t h) const { return dir_ + "/host" + std::to_string(h); }
  std::string Shared() const { return dir_ + "/shared"; }

  PipelineOptions Options(uint32_t host, uint32_t keep_last0 = 0) {
    PipelineOptions o;
    o.tiers.push_back(TierOptions{Host(host)});
    o.tiers.push_back(TierOptions{Shared()});
    o.tiers[0].keep_last = keep_last0;
    o.tiers[1].backlog = BacklogPolicy::kDrainEvery;
    o.tier0_per_host = true;
    o.store.create_if_missing = true;
    o.store.chunk_bytes = 1 << 20;
    o.store.object_bytes = 16ull << 20;
    o.store.rank_timeout_ms = 20'000;
    o.staging_bytes = 32ull << 20;
    o.resume_drains = false;
    return o;
  }

  std::unique_ptr<Pipeline> Open(const PipelineOptions& o) {
    auto p = Pipeline::Open(o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(p).value() : nullptr;
  }

  std::string Item(uint32_t rank, uint64_t step) const {
    return Bytes((3 << 20) + rank * 4099 + step, rank * 1000 + static_cast<uint32_t>(step));
  }

  // Every rank of `world` saves `step` at once, rank r on host r % hosts,
  // each through its own pipeline; returns each rank's final status.
  std::vector<Status> SaveAll(uint64_t step, uint32_t world, uint32_t hosts, uint32_t keep_last0 = 0) {
    std::vector<Status> out(world);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        auto p = Open(Options(r % hosts, keep_last0));
        if (p == nullptr) {
          out[r] = Status::IOError("open");
          return;
        }
        SaveOptions save;
        save.attempt = "launch-" + std::to_string(step);
        auto pending = p->Begin({"job", step}, r, world, save);
        if (!pending.ok()) {
          out[r] = pending.status();
          return;
        }
        const std::string data = Item(r, step);
        out[r] = (*pending)->AddItem("rank" + std::to_string(r), "m", data.data(), data.size());
        if (!out[r].ok()) return;
        auto h = (*pending)->Snapshot();
        if (!h.ok()) {
          out[r] = h.status();
          return;
        }
        out[r] = (*h)->Wait();
        if (out[r].ok() && ((*h)->progress()[0].state != TierState::kCommitted ||
                            (*h)->progress()[1].state != TierState::kCommitted)) {
          out[r] = Status::IOError("rank " + std::to_string(r) + ": a tier is not committed");
        }
      });
    }
    for (auto& t : threads) t.join();
    return out;
  }

  std::string dir_;
};

TEST_F(PerHostTierTest, RanksCommitOnTheSharedTierAndEachHostHoldsItsPart) {
  for (const Status& st : SaveAll(1, 3, 3)) ASSERT_TRUE(st.ok()) << st.ToString();
  auto shared = Store::Open(Shared());
  ASSERT_TRUE(shared.ok());
  auto whole = (*shared)->List("job", false);
  ASSERT_TRUE(whole.ok());
  ASSERT_EQ(whole->size(), 1u);
  EXPECT_TRUE((*whole)[0].complete);
  EXPECT_EQ((*whole)[0].ranks, 3u);
  for (uint32_t h = 0; h < 3; ++h) {
    auto host = Store::Open(Host(h));
    ASSERT_TRUE(host.ok());
    auto listed = (*host)->List("job", false);
    ASSERT_TRUE(listed.ok());
    ASSERT_EQ(listed->size(), 1u) << "host " << h;
    const CheckpointInfo& c = (*listed)[0];
    EXPECT_FALSE(c.complete) << "a part is not a checkpoint";
    EXPECT_FALSE(c.damaged) << c.problem;
    EXPECT_EQ(c.part_ranks, std::vector<uint32_t>{h});
    EXPECT_EQ(c.bytes, Item(h, 1).size());
    // No commit record on a host, and none of another rank's data.
    EXPECT_TRUE((*host)->backend().ReadSmall(CommitObject("job", 1)).status().IsNotFound());
    auto data = (*host)->backend().List(StepPrefix("job", 1) + "data/");
    ASSERT_TRUE(data.ok());
    EXPECT_EQ(DataOf((*host)->backend(), "job", 1, h).size(), data->size());
    // gc keeps the part whole.
    auto gc = CollectGarbage((*host)->backend(), 0);
    ASSERT_TRUE(gc.ok());
    EXPECT_EQ(gc->objects_removed, 0u);
    EXPECT_TRUE(LoadPart((*host)->backend(), "job", 1).ok());
  }
  // The tiered listing says so on each host.
  auto p1 = Open(Options(1));
  auto tiered = p1->List("job");
  ASSERT_TRUE(tiered.ok());
  ASSERT_EQ(tiered->size(), 1u);
  EXPECT_EQ((*tiered)[0].tiers[0].state, "part");
  EXPECT_EQ((*tiered)[0].tiers[0].reason, "rank 1 of 3 held here");
  EXPECT_EQ((*tiered)[0].tiers[1].state, "committed");
  EXPECT_TRUE((*tiered)[0].info.complete);
}

TEST_F(PerHostTierTest, RestoresReadTheLocalPartAndTheRestFromTheSharedTier) {
  // Ranks 0 and 2 share host 0; rank 1 is alone on host 1.
  for (const Status& st : SaveAll(5, 3, 2)) ASSERT_TRUE(st.ok()) << st.ToString();
  auto part = LoadPart(**OpenBackend(Host(0), false), "job", 5);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(part->manifests.size(), 2u);

  // Damage rank 1's copy on the shared tier: a restore of rank 1 on host 1
  // reads host 1's part and never notices.
  auto shared = OpenBackend(Shared(), false);
  ASSERT_TRUE(shared.ok());
  auto data1 = DataOf(**shared, "job", 5, 1);
  ASSERT_EQ(data1.size(), 1u);
  const std::string shared_rank1 = Shared() + "/" + data1[0];
  Flip(shared_rank1, 100);
  {
    auto p = Open(Options(1));
    ReadRecovery recovery;
    auto r = p->OpenCheckpoint("job", 5, &recovery);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto got = ReadBack(**r, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_TRUE(got["rank1"] == Item(1, 5));
    EXPECT_TRUE(recovery.fallbacks.empty());
  }
  Flip(shared_rank1, 100);  // mended
  // The whole checkpoint on host 0: ranks 0 and 2 from its part, rank 1
  // from the shared tier.
  {
    auto p = Open(Options(0));
    ReadRecovery recovery;
    auto r = p->OpenCheckpoint("job", std::nullopt, &recovery);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto got = ReadBack(**r);
    ASSERT_EQ(got.size(), 3u);
    for (uint32_t k = 0; k < 3; ++k) EXPECT_TRUE(got["rank" + std::to_string(k)] == Item(k, 5)) << k;
    // Another host's rank is read where it lives: not a fallback, no repair.
    EXPECT_TRUE(recovery.fallbacks.empty()) << recovery.fallbacks[0];
    EXPECT_TRUE(recovery.repairs.empty());
    auto host0 = OpenBackend(Host(0), false);
    EXPECT_TRUE(DataOf(**host0, "job", 5, 1).empty()) << "host 0 must not be given rank 1's data";
  }
  // A bad chunk in host 1's part: read from the shared tier, and the part
  // is rewritten from it.
  auto host1 = OpenBackend(Host(1), false);
  auto local1 = DataOf(**host1, "job", 5, 1);
  ASSERT_EQ(local1.size(), 1u);
  Flip(Host(1) + "/" + local1[0], 2000);
  for (int round = 0; round < 2; ++round) {
    auto p = Open(Options(1));
    ReadRecovery recovery;
    auto r = p->OpenCheckpoint("job", 5, &recovery);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto got = ReadBack(**r, 1);
    EXPECT_TRUE(got["rank1"] == Item(1, 5));
    EXPECT_EQ(recovery.fallbacks.size(), round == 0 ? 1u : 0u);
    EXPECT_EQ(recovery.repairs.size(), round == 0 ? 1u : 0u);
  }
}

TEST_F(PerHostTierTest, AReplacedHostRestoresItsRanksFromTheSharedTier) {
  for (const Status& st : SaveAll(7, 2, 2)) ASSERT_TRUE(st.ok()) << st.ToString();
  // Host 1 is lost with its disk; its replacement starts empty.
  std::string cmd = "rm -rf " + Host(1);
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto p = Open(Options(1));
  auto tiered = p->List("job");
  ASSERT_TRUE(tiered.ok());
  ASSERT_EQ(tiered->size(), 1u);
  EXPECT_EQ((*tiered)[0].tiers[0].state, "absent");
  EXPECT_EQ((*tiered)[0].tiers[1].state, "committed");
  auto r = p->OpenCheckpoint("job", 7, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto got = ReadBack(**r, 1);
  EXPECT_TRUE(got["rank1"] == Item(1, 7));
  // The surviving host still reads its own part.
  auto p0 = Open(Options(0));
  ReadRecovery recovery;
  auto r0 = p0->OpenCheckpoint("job", 7, &recovery);
  ASSERT_TRUE(r0.ok());
  EXPECT_TRUE(ReadBack(**r0, 0)["rank0"] == Item(0, 7));
  EXPECT_TRUE(recovery.fallbacks.empty());
}

TEST_F(PerHostTierTest, ADamagedPartIsListedSoAndRestoresComeFromTheSharedTier) {
  for (const Status& st : SaveAll(3, 2, 2)) ASSERT_TRUE(st.ok()) << st.ToString();
  {
    std::ofstream bad(Host(1) + "/" + PartObject("job", 3, 1), std::ios::trunc);
    bad << "not a commit record";
  }
  auto p = Open(Options(1));
  auto tiered = p->List("job");
  ASSERT_TRUE(tiered.ok());
  ASSERT_EQ(tiered->size(), 1u);
  EXPECT_EQ((*tiered)[0].tiers[0].state, "damaged");
  ReadRecovery recovery;
  auto r = p->OpenCheckpoint("job", 3, &recovery);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(ReadBack(**r, 1)["rank1"] == Item(1, 3));
  EXPECT_FALSE(recovery.fallbacks.empty()) << "the damaged part must be said";
}

TEST_F(PerHostTierTest, RetentionPrunesPartsOnceTheSharedTierHoldsThem) {
  for (uint64_t step = 1; step <= 2; ++step) {
    for (const Status& st : SaveAll(step, 2, 2, 1)) ASSERT_TRUE(st.ok()) << st.ToString();
  }
  // A damaged part goes too, once it is old enough.
  for (uint32_t h = 0; h < 2; ++h) {
    std::ofstream bad(Host(h) + "/" + PartObject("job", 2, h), std::ios::trunc);
    bad << "garbage";
  }
  for (const Status& st : SaveAll(3, 2, 2, 1)) ASSERT_TRUE(st.ok()) << st.ToString();
  for (uint32_t h = 0; h < 2; ++h) {
    auto host = Store::Open(Host(h));
    ASSERT_TRUE(host.ok());
    auto listed = (*host)->List("job", true);
    ASSERT_TRUE(listed.ok());
    ASSERT_EQ(listed->size(), 1u) << "host " << h << " keeps its newest part only";
    EXPECT_EQ((*listed)[0].step, 3u);
    EXPECT_EQ((*listed)[0].part_ranks, std::vector<uint32_t>{h});
  }
  auto shared = Store::Open(Shared());
  auto all = (*shared)->List("job", false);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 3u) << "tier 1 keeps every step (no keep-last)";
}

TEST_F(PerHostTierTest, AStepRemovedAndSavedAgainReplacesTheStaleParts) {
  for (const Status& st : SaveAll(4, 2, 2)) ASSERT_TRUE(st.ok()) << st.ToString();
  // Removed on tier 1 and host 0 only: host 1 keeps a part of a commit that
  // is gone.
  auto p0 = Open(Options(0));
  ASSERT_TRUE(p0->tier(1).Remove({"job", 4}).ok());
  ASSERT_TRUE(p0->tier(0).Remove({"job", 4}).ok());
  p0.reset();
  // A save of a step tier 1 still holds is refused at once.
  {
    auto p = Open(Options(1));
    for (const Status& st : SaveAll(6, 2, 2)) ASSERT_TRUE(st.ok()) << st.ToString();
    auto again = p->Begin({"job", 6}, 1, 2, SaveOptions{"other", false, true});
    EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists) << again.status().ToString();
  }
  // Saved again: every rank commits, and host 1's part is the new one.
  for (const Status& st : SaveAll(4, 2, 2)) ASSERT_TRUE(st.ok()) << st.ToString();
  auto p1 = Open(Options(1));
  ReadRecovery recovery;
  auto r = p1->OpenCheckpoint("job", 4, &recovery);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(ReadBack(**r)["rank1"] == Item(1, 4));
  EXPECT_TRUE(recovery.fallbacks.empty());
}

TEST_F(PerHostTierTest, ScrubPassesOverParts) {
  for (const Status& st : SaveAll(2, 2, 2)) ASSERT_TRUE(st.ok()) << st.ToString();
  auto o = Options(1);
  o.scrub_rate_bytes_per_sec = 1ull << 30;
  o.scrub_interval_ms = 100;
  auto p = Open(o);
  ASSERT_NE(p, nullptr);
  // The background scrub runs over both tiers; tier 0's part is not taken
  // for a damaged checkpoint there (no repair copies rank 0 onto host 1).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  p.reset();
  auto host1 = OpenBackend(Host(1), false);
  EXPECT_TRUE(DataOf(**host1, "job", 2, 0).empty());
  EXPECT_TRUE((*host1)->ReadSmall(CommitObject("job", 2)).status().IsNotFound());
  EXPECT_TRUE(LoadPart(**host1, "job", 2).ok());
}

TEST_F(PerHostTierTest, AMissingRankLeavesNothingCommittedAndNoPart) {
  auto o = Options(0);
  o.store.rank_timeout_ms = 400;
  auto p = Open(o);
  auto pending = p->Begin({"job", 9}, 0, 2, SaveOptions{"lonely", false, true});
  ASSERT_TRUE(pending.ok());
  const std::string data = Item(0, 9);
  ASSERT_TRUE((*pending)->AddItem("rank0", "m", data.data(), data.size()).ok());
  auto h = (*pending)->Snapshot();
  ASSERT_TRUE(h.ok());
  Status st = (*h)->Wait();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("rank(s) 1 of 2 published no manifest"), std::string::npos) << st.ToString();
  EXPECT_EQ((*h)->progress()[0].state, TierState::kFailed);
  auto shared = OpenBackend(Shared(), false);
  EXPECT_TRUE((*shared)->ReadSmall(CommitObject("job", 9)).status().IsNotFound());
  auto host = OpenBackend(Host(0), false);
  auto part = LoadPart(**host, "job", 9);
  EXPECT_TRUE(part.status().IsNotFound()) << part.status().ToString();
  // The part writer's lock is gone: gc takes what the save left.
  auto gc = CollectGarbage(**host, 0);
  ASSERT_TRUE(gc.ok());
  EXPECT_GE(gc->objects_removed, 2u);  // its manifest and data
  auto left = (*host)->List(StepPrefix("job", 9));
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
}

TEST_F(PerHostTierTest, ARankWhosePartCannotBeWrittenFailsTheOthersAtOnce) {
  // Rank 1's source runs short of what it declared: its part is never
  // written. With an attempt id of this save alone, rank 0 learns it from an
  // abort note on the shared tier instead of waiting out its rank timeout.
  class Short final : public ItemSource {
   public:
    Result<size_t> Read(void* buf, size_t len) override {
      if (given_ >= (1 << 20)) return size_t{0};
      size_t n = std::min<size_t>(len, (1 << 20) - given_);
      std::memset(buf, 1, n);
      given_ += n;
      return n;
    }
    size_t given_ = 0;
  };
  const SaveOptions save{"once-7", true, true};
  auto p0 = Open(Options(0));
  auto p1 = Open(Options(1));
  std::thread bad([&] {
    auto pending = p1->Begin({"job", 7}, 1, 2, save);
    ASSERT_TRUE(pending.ok());
    Short src;
    ASSERT_TRUE((*pending)->AddItem("rank1", "m", 4 << 20, src).ok());
    EXPECT_FALSE((*pending)->Snapshot().ok());
  });
  const auto start = std::chrono::steady_clock::now();
  auto pending = p0->Begin({"job", 7}, 0, 2, save);
  ASSERT_TRUE(pending.ok());
  const std::string data = Item(0, 7);
  ASSERT_TRUE((*pending)->AddItem("rank0", "m", data.data(), data.size()).ok());
  auto h = (*pending)->Snapshot();
  ASSERT_TRUE(h.ok());
  Status st = (*h)->Wait();
  bad.join();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("rank 1 gave up"), std::string::npos) << st.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "not the 20 s rank timeout";
}

TEST_F(PerHostTierTest, OptionsThatCannotWorkAreRefused) {
  auto o = Options(0);
  o.rebuild_rate_bytes_per_sec = 1 << 20;
  EXPECT_EQ(Pipeline::Open(o).status().code(), StatusCode::kInvalidArgument);
  o = Options(0);
  o.tiers[1].backlog = BacklogPolicy::kCoalesce;
  auto refused = Pipeline::Open(o);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().ToString().find("drain-every"), std::string::npos);
}

// With no shared tier, a part save ends once tier 0 holds the part, with
// no commit record anywhere (a peer commit, published by the job's
// transport, makes a step of the parts: replicas_test.cc). The part's
// writer lock keeps gc off it until the handle's ReleasePart().
TEST_F(PerHostTierTest, WithTierZeroAloneAPartSaveEndsOnceTierZeroHoldsThePart) {
  auto o = Options(1);
  o.tiers.resize(1);
  auto p = Open(o);
  ASSERT_NE(p, nullptr);
  auto pending = p->Begin({"alone", 2}, 1, 2);
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  const std::string data = Item(1, 2);
  ASSERT_TRUE((*pending)->AddItem("rank1", "m", data.data(), data.size()).ok());
  auto h = (*pending)->Snapshot();
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->Wait().ok());
  EXPECT_EQ((*h)->progress()[0].state, TierState::kCommitted);
  auto manifest = (*h)->WaitWritten();
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  auto host = OpenBackend(Host(1), false);
  ASSERT_TRUE(host.ok());
  EXPECT_TRUE((*host)->ReadSmall(CommitObject("alone", 2)).status().IsNotFound());
  auto listed = p->List("alone");  // a part alone is no step
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
  auto store = Store::Open(Host(1));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->CollectGarbage(0).ok());
  EXPECT_TRUE((*host)->ReadSmall(*manifest).ok());  // its lock kept it
  auto writers = (*host)->List(WritersPrefix("alone", 2));
  ASSERT_TRUE(writers.ok());
  EXPECT_FALSE(writers->empty());
  (*h)->ReleasePart();
  writers = (*host)->List(WritersPrefix("alone", 2));
  ASSERT_TRUE(writers.ok());
  EXPECT_TRUE(writers->empty());
}

TEST_F(PerHostTierTest, AWorldOfOneCommitsOnTierZeroAsBefore) {
  auto p = Open(Options(0));
  auto pending = p->Begin({"solo", 1}, 0, 1);
  ASSERT_TRUE(pending.ok());
  const std::string data = Item(0, 1);
  ASSERT_TRUE((*pending)->AddItem("x", "m", data.data(), data.size()).ok());
  auto h = (*pending)->Snapshot();
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->Wait().ok());
  auto host = OpenBackend(Host(0), false);
  EXPECT_TRUE((*host)->ReadSmall(CommitObject("solo", 1)).ok());
}

}  // namespace
}  // namespace sluice
