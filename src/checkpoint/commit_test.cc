// The commit protocol through the public API, on a real filesystem: many
// ranks, concurrent savers of one step, leftovers of earlier launches.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/store_test_fixture.h"
#include "format/layout.h"
#include "sluice/store.h"

namespace sluice {
namespace {

TEST_F(StoreTest, ConcurrentSaversOfOneStepExactlyOneCommits) {
  for (uint64_t step = 0; step < 10; ++step) {
    // Both writers begin before either commits.
    auto w1 = store_->BeginCheckpoint({"race", step}, 0, 1);
    auto w2 = store_->BeginCheckpoint({"race", step}, 0, 1);
    ASSERT_TRUE(w1.ok() && w2.ok());
    ASSERT_NO_FATAL_FAILURE(ExactlyOneOfTwoCommits(**w1, **w2, "race", step, 300000));
  }
  auto gc = store_->CollectGarbage(0);
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(DataFiles().size(), 10u) << "the losers' data must be reclaimable";
}

TEST_F(StoreTest, MultiRankCommitsOnceWhenAllRanksArrive) {
  constexpr uint32_t kWorld = 4;
  std::vector<std::thread> ranks;
  std::vector<Status> results(kWorld);
  for (uint32_t r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      // Staggered arrival: rank 0 first, so it has to wait.
      std::this_thread::sleep_for(std::chrono::milliseconds(30 * r));
      auto w = store_->BeginCheckpoint({"multi", 1}, r, kWorld);
      if (!w.ok()) { results[r] = w.status(); return; }
      std::string d = Bytes(50000 + r, r);
      Status st = (*w)->AddItem("rank" + std::to_string(r) + "/w", "meta:rank" + std::to_string(r) + "/w", d.data(), d.size());
      if (!st.ok()) { results[r] = st; return; }
      results[r] = (*w)->Commit().status();
    });
  }
  for (auto& t : ranks) t.join();
  for (uint32_t r = 0; r < kWorld; ++r) EXPECT_TRUE(results[r].ok()) << r << ": " << results[r].ToString();
  auto loaded = Load("multi", 1);
  ASSERT_EQ(loaded.size(), kWorld);
  for (uint32_t r = 0; r < kWorld; ++r) EXPECT_EQ(loaded["rank" + std::to_string(r) + "/w"], Bytes(50000 + r, r));
  auto list = store_->List("multi", false);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].ranks, kWorld);
  // A single rank's items only.
  auto r = store_->OpenCheckpoint("multi", 1);
  int seen = 0;
  ASSERT_TRUE((*r)->ReadAll(2, [&](const ItemInfo& it, uint64_t, const void*, size_t) {
    EXPECT_EQ(it.rank, 2u);
    ++seen;
    return Status::OK();
  }).ok());
  EXPECT_GT(seen, 0);
}

TEST_F(StoreTest, MultiRankCommitListsNothingAndLeavesNoPointers) {
  constexpr uint32_t kWorld = 5;
  CountingBackend::Counts counts;
  std::atomic<int>& lists = counts.lists;
  auto b = OpenBackend(dir_, true);
  ASSERT_TRUE(b.ok());
  StoreOptions o;
  auto counted = Store::Open(std::unique_ptr<Backend>(new CountingBackend(std::move(b).value(), &counts)), o);
  std::vector<std::thread> ranks;
  std::vector<Status> results(kWorld);
  for (uint32_t r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      std::this_thread::sleep_for(std::chrono::milliseconds(40 * r));  // rank 0 polls while the others arrive
      auto w = counted->BeginCheckpoint({"nolist", 3}, r, kWorld);
      if (!w.ok()) { results[r] = w.status(); return; }
      std::string d = Bytes(3000 + r, r);
      Status st = (*w)->AddItem("r" + std::to_string(r), "meta:r" + std::to_string(r), d.data(), d.size());
      results[r] = st.ok() ? (*w)->Commit().status() : st;
    });
  }
  for (auto& t : ranks) t.join();
  for (uint32_t r = 0; r < kWorld; ++r) EXPECT_TRUE(results[r].ok()) << r << ": " << results[r].ToString();
  EXPECT_EQ(lists.load(), 0) << "a save listed the store";
  auto loaded = Load("nolist", 3);
  ASSERT_EQ(loaded.size(), kWorld);
  auto left = store_->backend().List(RankPointerPrefix("nolist", 3));
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty()) << left->size() << " rank pointer(s) left behind, e.g. " << (*left)[0].name;
}

TEST_F(StoreTest, RankZeroStepsPastLeftoverPointersAndFindsARankInAHole) {
  StoreOptions o;
  o.rank_timeout_ms = 20000;
  Reopen(o);
  Backend& be = store_->backend();
  const std::map<uint32_t, std::string> leftovers = {
      {0, "junk"},
      {1, ManifestObject("holes", 1, 2, "0123456789abcdef")},  // another rank's
      {3, ManifestObject("holes", 1, 1, "deadbeefdeadbeef")},  // never published
      {4, "ckpt/holes/00000000000000000001/manifest/r000001-x.man.tmp.1"},
      {5, ""},
  };
  for (const auto& [k, target] : leftovers) {
    ASSERT_TRUE(be.PublishIfAbsent(RankPointerObject("holes", 1, 1, k), target).ok());
  }
  Result<SaveStats> rank0 = Status::Unavailable("not run");
  std::thread t0([&] {
    auto w = store_->BeginCheckpoint({"holes", 1}, 0, 2);
    if (!w.ok()) { rank0 = w.status(); return; }
    Status st = (*w)->AddItem("zero", "meta:zero", "0", 1);
    rank0 = st.ok() ? (*w)->Commit() : Result<SaveStats>(st);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 judges the leftovers
  const std::string d1 = Bytes(12345, 1);
  auto w1 = store_->BeginCheckpoint({"holes", 1}, 1, 2);
  ASSERT_TRUE(w1.ok());
  ASSERT_TRUE((*w1)->AddItem("one", "meta:one", d1.data(), d1.size()).ok());
  Status rank1 = (*w1)->Commit().status();
  t0.join();
  ASSERT_TRUE(rank0.ok()) << rank0.status().ToString();
  ASSERT_TRUE(rank1.ok()) << rank1.ToString();
  EXPECT_EQ(Load("holes", 1), (std::map<std::string, std::string>{{"one", d1}, {"zero", "0"}}));
  auto gc = store_->CollectGarbage(0);
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->objects_removed, leftovers.size());
  auto left = be.List(RankPointerPrefix("holes", 1));
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
  EXPECT_TRUE(store_->Verify("holes", 1)->ok());
}

TEST_F(StoreTest, RankZeroCommitsTheNewestWriterOfARank) {
  StoreOptions o;
  o.rank_timeout_ms = 20000;
  Reopen(o);
  Backend& be = store_->backend();
  auto wait_for = [&](const std::string& object) {
    for (int i = 0; i < 2000 && !be.ReadSmall(object).ok(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return be.ReadSmall(object).ok();
  };
  auto save_rank = [&](uint32_t rank, const std::string& key, const std::string& bytes, Status* out) {
    return std::thread([=, this] {
      auto w = store_->BeginCheckpoint({"newest", 1}, rank, 3);
      if (!w.ok()) { *out = w.status(); return; }
      Status st = (*w)->AddItem(key, "meta:" + key, bytes.data(), bytes.size());
      *out = st.ok() ? (*w)->Commit().status() : st;
    });
  };
  const std::string old1 = Bytes(1000, 1), new1 = Bytes(2000, 2), two = Bytes(3000, 3);
  Status old_rank1, new_rank1, rank2, rank0;
  std::thread t_old = save_rank(1, "r1", old1, &old_rank1);
  ASSERT_TRUE(wait_for(RankPointerObject("newest", 1, 1, 0)));
  std::thread t0 = save_rank(0, "r0", "0", &rank0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 has found the old rank 1
  std::thread t_new = save_rank(1, "r1", new1, &new_rank1);
  ASSERT_TRUE(wait_for(RankPointerObject("newest", 1, 1, 1)));
  std::thread t2 = save_rank(2, "r2", two, &rank2);
  for (auto* t : {&t_old, &t0, &t_new, &t2}) t->join();
  EXPECT_TRUE(rank0.ok()) << rank0.ToString();
  EXPECT_TRUE(rank2.ok()) << rank2.ToString();
  EXPECT_TRUE(new_rank1.ok()) << new_rank1.ToString();
  EXPECT_EQ(old_rank1.code(), StatusCode::kAlreadyExists) << old_rank1.ToString();
  EXPECT_EQ(Load("newest", 1),
            (std::map<std::string, std::string>{{"r0", "0"}, {"r1", new1}, {"r2", two}}));
}

TEST_F(StoreTest, MissingRankTimesOutAndLeavesItUncommitted) {
  StoreOptions o;
  o.rank_timeout_ms = 300;
  Reopen(o);
  auto w = store_->BeginCheckpoint({"lonely", 1}, 0, 3);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->AddItem("a", "", "x", 1).ok());
  auto r = (*w)->Commit();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("rank(s) 1,2 of 3"), std::string::npos) << r.status().message();
  EXPECT_TRUE(store_->OpenCheckpoint("lonely", 1).status().IsNotFound());
  auto all = store_->List("lonely", true);
  ASSERT_EQ(all->size(), 1u);
  EXPECT_FALSE((*all)[0].complete);
  auto gc = store_->CollectGarbage(0);
  ASSERT_TRUE(gc.ok());
  EXPECT_GT(gc->objects_removed, 0u);
  EXPECT_TRUE(store_->List("lonely", true)->empty());
}

TEST_F(StoreTest, CrossRankKeyCollisionIsRefused) {
  StoreOptions o;
  o.rank_timeout_ms = 2000;
  Reopen(o);
  std::vector<std::thread> ranks;
  std::vector<Status> results(2);
  for (uint32_t r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto w = store_->BeginCheckpoint({"clash", 1}, r, 2);
      ASSERT_TRUE(w.ok());
      ASSERT_TRUE((*w)->AddItem("same", "", "x", 1).ok());
      results[r] = (*w)->Commit().status();
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(results[0].code(), StatusCode::kInvalidArgument) << results[0].ToString();
  // Rank 1 waited for a commit that never came.
  EXPECT_EQ(results[1].code(), StatusCode::kUnavailable) << results[1].ToString();
  EXPECT_TRUE(store_->OpenCheckpoint("clash", 1).status().IsNotFound());
}

TEST_F(StoreTest, RankZeroNeverMixesInAnotherAttemptsRank) {
  StoreOptions o;
  o.rank_timeout_ms = 3000;
  Reopen(o);
  const std::string old_data = Bytes(20000, 1), new_data = Bytes(30000, 2);
  // An earlier launch's rank 1, still alive and waiting for a commit.
  Status old_rank1;
  std::thread stale([&] {
    auto w = store_->BeginCheckpoint({"attempts", 1}, 1, 2, SaveOptions{"launch-1"});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->AddItem("r1", "meta:r1", old_data.data(), old_data.size()).ok());
    old_rank1 = (*w)->Commit().status();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Status new_rank0, new_rank1;
  std::thread r0([&] {
    auto w = store_->BeginCheckpoint({"attempts", 1}, 0, 2, SaveOptions{"launch-2"});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->AddItem("r0", "meta:r0", "zero", 4).ok());
    new_rank0 = (*w)->Commit().status();
  });
  // The new rank 1 arrives well after rank 0 started gathering.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::thread r1([&] {
    auto w = store_->BeginCheckpoint({"attempts", 1}, 1, 2, SaveOptions{"launch-2"});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->AddItem("r1", "meta:r1", new_data.data(), new_data.size()).ok());
    new_rank1 = (*w)->Commit().status();
  });
  r0.join();
  r1.join();
  stale.join();
  EXPECT_TRUE(new_rank0.ok()) << new_rank0.ToString();
  EXPECT_TRUE(new_rank1.ok()) << new_rank1.ToString();
  EXPECT_FALSE(old_rank1.ok()) << "the stale rank must learn it was not committed";
  auto loaded = Load("attempts", 1);
  EXPECT_EQ(loaded["r1"], new_data);
  EXPECT_EQ(loaded["r0"], "zero");
}

TEST_F(StoreTest, ARankGivingUpStopsTheOtherRanksOfItsAttemptAtOnce) {
  StoreOptions o;
  o.rank_timeout_ms = 60000;  // the wait must end long before this
  Reopen(o);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Status> results(3);
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      auto w = store_->BeginCheckpoint({"giveup", 1}, r, 3, SaveOptions{"launch-1", true});
      ASSERT_TRUE(w.ok());
      ASSERT_TRUE((*w)->AddItem("k" + std::to_string(r), "meta:k" + std::to_string(r), "x", 1).ok());
      if (r == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        w->reset();  // abandoned: its data goes, and the others are told
        return;
      }
      results[r] = (*w)->Commit().status();
    });
  }
  for (auto& t : ranks) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 10.0);
  for (uint32_t r : {0u, 2u}) {
    EXPECT_EQ(results[r].code(), StatusCode::kIOError) << r << ": " << results[r].ToString();
    EXPECT_NE(results[r].message().find("rank 1 gave up"), std::string::npos) << results[r].ToString();
  }
  EXPECT_TRUE(store_->OpenCheckpoint("giveup", 1).status().IsNotFound());

  // A relaunch (another attempt) of the same step is not stopped by that note.
  ranks.clear();
  for (uint32_t r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      auto w = store_->BeginCheckpoint({"giveup", 1}, r, 3, SaveOptions{"launch-2", true});
      ASSERT_TRUE(w.ok());
      ASSERT_TRUE((*w)->AddItem("k" + std::to_string(r), "meta:k" + std::to_string(r), "x", 1).ok());
      results[r] = (*w)->Commit().status();
    });
  }
  for (auto& t : ranks) t.join();
  for (uint32_t r = 0; r < 3; ++r) EXPECT_TRUE(results[r].ok()) << r << ": " << results[r].ToString();
  EXPECT_EQ(Load("giveup", 1).size(), 3u);
  // gc takes the old attempt's note; the committed step stays whole.
  auto gc = store_->CollectGarbage(0);
  ASSERT_TRUE(gc.ok());
  bool note_left = false;
  auto listed = store_->backend().List("ckpt/giveup/");
  for (const auto& obj : *listed) note_left |= obj.name.find("/aborts/") != std::string::npos;
  EXPECT_FALSE(note_left);
  EXPECT_EQ(Load("giveup", 1).size(), 3u);
}

TEST_F(StoreTest, AReusableAttemptIdLeavesNoNoteThatCouldFailARerun) {
  StoreOptions o;
  o.rank_timeout_ms = 1500;
  Reopen(o);
  // A failed launch with a reusable id (a job id): rank 1 gives up.
  Status first;
  std::thread r0([&] {
    auto w = store_->BeginCheckpoint({"rerun", 1}, 0, 2, SaveOptions{"job-7"});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->AddItem("k0", "meta:k0", "x", 1).ok());
    first = (*w)->Commit().status();
  });
  {
    auto w = store_->BeginCheckpoint({"rerun", 1}, 1, 2, SaveOptions{"job-7"});
    ASSERT_TRUE(w.ok());
  }  // abandoned
  r0.join();
  EXPECT_EQ(first.code(), StatusCode::kUnavailable) << first.ToString();  // the rank timeout, as before
  // The same command run again, same id: it must commit.
  std::vector<Status> results(2);
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto w = store_->BeginCheckpoint({"rerun", 1}, r, 2, SaveOptions{"job-7"});
      ASSERT_TRUE(w.ok());
      ASSERT_TRUE((*w)->AddItem("k" + std::to_string(r), "meta:k" + std::to_string(r), "x", 1).ok());
      results[r] = (*w)->Commit().status();
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_TRUE(results[0].ok()) << results[0].ToString();
  EXPECT_TRUE(results[1].ok()) << results[1].ToString();
}

TEST_F(StoreTest, RankZeroRefusingToCommitStopsTheWaitingRanksAtOnce) {
  StoreOptions o;
  o.rank_timeout_ms = 60000;
  Reopen(o);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Status> results(2);
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto w = store_->BeginCheckpoint({"clash2", 1}, r, 2, SaveOptions{"launch-1", true});
      ASSERT_TRUE(w.ok());
      ASSERT_TRUE((*w)->AddItem("same", "", "x", 1).ok());
      results[r] = (*w)->Commit().status();
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(results[0].code(), StatusCode::kInvalidArgument) << results[0].ToString();
  EXPECT_EQ(results[1].code(), StatusCode::kIOError) << results[1].ToString();
  EXPECT_NE(results[1].message().find("rank 0 gave up"), std::string::npos) << results[1].ToString();
}

}  // namespace
}  // namespace sluice
