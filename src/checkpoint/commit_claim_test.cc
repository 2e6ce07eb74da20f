// Commit claims (format/commit_record.h, CommitClaim): every save claims its
// step's COMMIT when it begins and seals its record at a name placed away
// from slow placements when it commits. Every reader, rm, gc and drain
// must take a claim with its seal as the commit, and a claim without one as
// no commit at all; a claim left by a writer that died is sealed by the
// next writer of the step, exactly once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include "checkpoint/copies.h"
#include "checkpoint/catalog.h"
#include "checkpoint/garbage_collector.h"
#include "checkpoint/step_removal.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/latest_hint.h"
#include "checkpoint/references.h"
#include "checkpoint/slow_names_fixture.h"
#include "checkpoint/step_copy.h"
#include "checkpoint/store_test_fixture.h"
#include "checkpoint/writer_registry.h"
#include "format/commit_record.h"
#include "format/layout.h"

namespace sluice {
namespace {

class CommitClaimTest : public StoreTest {
 protected:
  Backend& raw() { return store_->backend(); }

  // A store where every step's COMMIT is slow, as on RADOS where its
  // placement group holds a slow OSD; names under a seal/ prefix ending in
  // "-00" are slow too, so that the writer has to choose among seal names.
  static bool CommitSlow(const std::string& n) {
    return n.size() >= 6 && (n.compare(n.size() - 6, 6, "COMMIT") == 0 ||
                             (n.find("/seal/") != std::string::npos && n.compare(n.size() - 3, 3, "-00") == 0));
  }

  Result<std::unique_ptr<RankWriter>> Begin(Backend& b, uint64_t step, bool incremental = false) {
    SaveOptions save;
    save.incremental = incremental;
    return NewRankWriter(b, StoreOptions{}, CheckpointId{"c", step}, 0, 1, save);
  }

  Result<SaveStats> SaveOne(Backend& b, uint64_t step, const std::string& bytes) {
    ASSIGN_OR_RETURN(auto w, Begin(b, step));
    RETURN_IF_ERROR(w->AddItem("x", "meta:x", bytes.data(), bytes.size()));
    return w->Commit();
  }

  // What COMMIT holds: the claim, decoded; nullopt when it is a record.
  std::optional<CommitClaim> ClaimAt(uint64_t step) {
    auto bytes = raw().ReadSmall(CommitObject("c", step));
    EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
    if (!bytes.ok() || !IsCommitClaim(*bytes)) return std::nullopt;
    auto claim = DecodeCommitClaim(*bytes, "claim");
    EXPECT_TRUE(claim.ok()) << claim.status().ToString();
    if (!claim.ok()) return std::nullopt;
    return *claim;
  }

  // What a save that claimed COMMIT and died before sealing leaves: its
  // claim (a save that fails takes its claim back, but a crash cannot; the
  // rest of a crash's leftovers go to gc, or to the next writer, once the
  // writer is seen gone). Returns the claim's seal.
  std::string DeadClaim(uint64_t step) {
    const std::string seal = SealObject("c", step, "dead0000writer00", 1);
    EXPECT_TRUE(raw().PublishIfAbsent(CommitObject("c", step),
                                      EncodeCommitClaim(CommitClaim{"c", step, seal, 1})).ok());
    return seal;
  }
};

TEST_F(CommitClaimTest, EverySaveSealsItsRecordAwayFromSlowPlacements) {
  SlowNames slow(raw(), CommitSlow);
  const std::string a = Bytes(300000, 1);
  auto stats = SaveOne(slow, 1, a);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_TRUE(stats->committed);
  auto claim = ClaimAt(1);
  ASSERT_TRUE(claim.has_value()) << "COMMIT holds the record itself";
  EXPECT_TRUE(IsSealOf(claim->seal, "c", 1)) << claim->seal;
  EXPECT_FALSE(CommitSlow(claim->seal)) << "the seal was placed where writes are slow: " << claim->seal;
  // The seal holds the record; every reader takes it as the commit.
  auto record = ReadCommitRecord(raw(), "c", 1);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->seal, claim->seal);
  EXPECT_EQ(*raw().ReadSmall(claim->seal), record->bytes);
  EXPECT_TRUE(DecodeCommitOf("c", 1, record->bytes).ok());
  EXPECT_TRUE(Load("c", 1)["x"] == a);
  auto listed = store_->List("c", true);
  ASSERT_TRUE(listed.ok() && listed->size() == 1u);
  EXPECT_TRUE((*listed)[0].complete) << (*listed)[0].problem;
  EXPECT_EQ(*LatestStep(raw(), "c"), 1u);
  // gc keeps all of it (the seal is marked as a record).
  ASSERT_TRUE(CollectGarbage(raw(), 0).ok());
  EXPECT_TRUE(raw().ReadSmall(claim->seal).ok());
  EXPECT_TRUE(Load("c", 1)["x"] == a);
  // Where COMMIT is not slow, the commit has the same shape.
  SlowNames fine(raw(), [](const std::string&) { return false; });
  ASSERT_TRUE(SaveOne(fine, 3, a).ok());
  ASSERT_TRUE(ClaimAt(3).has_value()) << "COMMIT holds the record itself";
  EXPECT_EQ(ReadCommitRecord(raw(), "c", 3)->seal, ClaimAt(3)->seal);
  // A second save of a sealed step: refused at its creation on a store
  // without placements; where placements may be slow, its claim tells (no
  // read of COMMIT before the data writes), and it fails at its commit at
  // the latest, leaving nothing behind.
  auto refused = Begin(raw(), 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().IsAlreadyExists()) << refused.status().ToString();
  const size_t data_files = DataFiles().size();
  auto again = Begin(slow, 1);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  Status added = (*again)->AddItem("x", "meta:x", a.data(), a.size());
  EXPECT_TRUE(added.ok() || added.IsAlreadyExists()) << added.ToString();
  auto lost = (*again)->Commit();
  ASSERT_FALSE(lost.ok());
  EXPECT_TRUE(lost.status().IsAlreadyExists()) << lost.status().ToString();
  again->reset();
  EXPECT_EQ(DataFiles().size(), data_files);
  EXPECT_TRUE(Load("c", 1)["x"] == a);
}

// A save that fails takes its claim back (fence, then claim, then fence):
// the step looks as if it was never claimed.
TEST_F(CommitClaimTest, AFailedSaveTakesItsClaimBack) {
  SlowNames slow(raw(), CommitSlow);
  auto w = Begin(slow, 4);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const std::string d = Bytes(5000, 3);
  ASSERT_TRUE((*w)->AddItem("x", "meta:x", d.data(), d.size()).ok());
  (*w)->Abandon(Status::IOError("killed"));
  w->reset();
  EXPECT_TRUE(raw().ReadSmall(CommitObject("c", 4)).status().IsNotFound()) << "the failed save left its claim";
  auto seals = raw().List(SealPrefix("c", 4));
  ASSERT_TRUE(seals.ok());
  EXPECT_TRUE(seals->empty()) << "the failed save left its fence";
  // The step saves again at once.
  ASSERT_TRUE(SaveOne(slow, 4, d).ok());
  EXPECT_TRUE(Load("c", 4)["x"] == d);
}

// A failed save never takes back a claim another writer has sealed: its
// fence is refused, and the other writer's commit stays.
TEST_F(CommitClaimTest, TakingAClaimBackLeavesAnotherWritersSeal) {
  auto first = Begin(raw(), 5);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string a = Bytes(4000, 4), b = Bytes(4000, 5);
  ASSERT_TRUE((*first)->AddItem("x", "meta:x", a.data(), a.size()).ok());
  for (int i = 0; i < 500 && !raw().ReadSmall(CommitObject("c", 5)).ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  auto claim = ClaimAt(5);
  ASSERT_TRUE(claim.has_value()) << "the first writer's claim did not land";
  // A second writer finds the claim (its own was refused) and seals it.
  ASSERT_TRUE(SaveOne(raw(), 5, b).ok());
  EXPECT_EQ(ReadCommitRecord(raw(), "c", 5)->seal, claim->seal);
  (*first)->Abandon(Status::IOError("killed"));
  first->reset();
  EXPECT_EQ(ClaimAt(5)->seal, claim->seal) << "the claim another writer sealed was taken back";
  EXPECT_TRUE(Load("c", 5)["x"] == b);
}

TEST_F(CommitClaimTest, AClaimWithoutItsSealIsNoCommit) {
  ASSERT_TRUE(SaveOne(raw(), 1, Bytes(1000, 1)).ok());
  const std::string seal = DeadClaim(2);
  ASSERT_FALSE(seal.empty());
  EXPECT_TRUE(ReadCommitRecord(raw(), "c", 2).status().IsNotFound());
  EXPECT_TRUE(store_->OpenCheckpoint("c", 2).status().IsNotFound());
  EXPECT_EQ(*LatestStep(raw(), "c"), 1u) << "an unsealed claim is not the newest commit";
  EXPECT_EQ(*LatestGoodStep(raw(), "c"), 1u);
  auto listed = store_->List("c", false);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u) << "ls shows the unsealed claim as committed";
  listed = store_->List("c", true);
  ASSERT_TRUE(listed.ok() && listed->size() == 2u);
  EXPECT_FALSE((*listed)[1].complete);
  EXPECT_FALSE((*listed)[1].damaged) << (*listed)[1].problem;
  EXPECT_NE((*listed)[1].problem.find("no commit record"), std::string::npos) << (*listed)[1].problem;
  // Its claimant is gone: gc takes the claim like any uncommitted object.
  ASSERT_TRUE(CollectGarbage(raw(), 0).ok());
  EXPECT_TRUE(raw().ReadSmall(CommitObject("c", 2)).status().IsNotFound());
  EXPECT_EQ(store_->List("c", true)->size(), 1u);
}

TEST_F(CommitClaimTest, TheNextWriterSealsADeadClaimAndOnlyOnce) {
  const std::string seal = DeadClaim(1);
  ASSERT_FALSE(seal.empty());
  // A writer of the step on a store that sees nothing slow (another host,
  // a fresh process) publishes its record at the dead claim's seal.
  const std::string b = Bytes(200000, 2);
  auto stats = SaveOne(raw(), 1, b);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  auto record = ReadCommitRecord(raw(), "c", 1);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->seal, seal);
  EXPECT_TRUE(Load("c", 1)["x"] == b);
  // The seal is taken: a writer that got past the check before it refuses
  // at the commit, and its data is left to gc.
  SlowNames slow(raw(), CommitSlow);
  const std::string c = Bytes(200000, 3);
  for (Backend* b2 : {static_cast<Backend*>(&raw()), static_cast<Backend*>(&slow)}) {
    ASSERT_TRUE(raw().Remove(seal).ok());
    auto late = Begin(*b2, 1);
    ASSERT_TRUE(late.ok()) << late.status().ToString();
    ASSERT_TRUE(raw().PublishIfAbsent(seal, record->bytes).ok());
    // (A claiming writer may learn it from its claim already.)
    Status added = (*late)->AddItem("x", "meta:x", c.data(), c.size());
    ASSERT_TRUE(added.ok() || added.IsAlreadyExists()) << added.ToString();
    auto lost = (*late)->Commit();
    ASSERT_FALSE(lost.ok());
    EXPECT_TRUE(lost.status().IsAlreadyExists()) << lost.status().ToString();
  }
  EXPECT_TRUE(Load("c", 1)["x"] == b);
}

TEST_F(CommitClaimTest, ConcurrentClaimantsOfOneStepExactlyOneCommits) {
  SlowNames slow(raw(), CommitSlow);
  for (uint64_t step = 0; step < 8; ++step) {
    // Both claim before either commits; one claim wins, and the other
    // writer seals that claim's name: one publish of it wins.
    auto w1 = Begin(slow, step);
    auto w2 = Begin(slow, step);
    ASSERT_TRUE(w1.ok() && w2.ok());
    ASSERT_NO_FATAL_FAILURE(ExactlyOneOfTwoCommits(**w1, **w2, "c", step, 100000));
    auto listed = raw().List(SealPrefix("c", step));
    ASSERT_TRUE(listed.ok());
    EXPECT_EQ(listed->size(), 1u) << "two seals: the loser published one";
  }
}

// Counts reads of one object.
class ReadsOf final : public BackendWrapper {
 public:
  ReadsOf(Backend& target, std::string object) : BackendWrapper(target), object_(std::move(object)) {}
  Result<std::string> ReadSmall(const std::string& name) override {
    if (name == object_) ++reads;
    return BackendWrapper::ReadSmall(name);
  }
  int reads = 0;

 private:
  std::string object_;
};

// A claim another writer left is not covered by the sealing writer's lock:
// if it went after it was read, the seal is withdrawn and the save fails
// rather than report a commit nobody can read.
class RemovesClaimOnSeal final : public BackendWrapper {
 public:
  explicit RemovesClaimOnSeal(Backend& target) : BackendWrapper(target) {}
  Status PublishIfAbsent(const std::string& name, std::string_view bytes) override {
    Status st = BackendWrapper::PublishIfAbsent(name, bytes);
    if (st.ok() && name.find("/seal/") != std::string::npos) {
      (void)BackendWrapper::Remove(CommitObject("c", 1));
    }
    return st;
  }
};

TEST_F(CommitClaimTest, ASealWhoseClaimWentIsWithdrawn) {
  const std::string seal = DeadClaim(1);
  ASSERT_FALSE(seal.empty());
  RemovesClaimOnSeal removing(raw());
  auto stats = SaveOne(removing, 1, Bytes(1000, 4));
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), StatusCode::kIOError) << stats.status().ToString();
  EXPECT_NE(stats.status().message().find("withdrawn"), std::string::npos) << stats.status().ToString();
  EXPECT_TRUE(raw().ReadSmall(seal).status().IsNotFound()) << "the seal stayed";
  EXPECT_TRUE(ReadCommitRecord(raw(), "c", 1).status().IsNotFound());
  // The step is free again: a later save commits it.
  ASSERT_TRUE(SaveOne(raw(), 1, Bytes(1000, 5)).ok());
  EXPECT_TRUE(Load("c", 1)["x"] == Bytes(1000, 5));
}

TEST_F(CommitClaimTest, RemoveTakesTheSealAndTheClaim) {
  SlowNames slow(raw(), CommitSlow);
  ASSERT_TRUE(SaveOne(slow, 1, Bytes(1000, 1)).ok());
  ASSERT_TRUE(SaveOne(slow, 2, Bytes(1000, 2)).ok());
  auto claim = ClaimAt(1);
  ASSERT_TRUE(claim.has_value());
  ASSERT_TRUE(RemoveCheckpoint(raw(), {"c", 1}).ok());
  EXPECT_TRUE(raw().ReadSmall(claim->seal).status().IsNotFound());
  EXPECT_TRUE(raw().ReadSmall(CommitObject("c", 1)).status().IsNotFound());
  auto left = raw().List(StepPrefix("c", 1));
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty()) << left->size() << " objects left, the first " << (*left)[0].name;
  EXPECT_TRUE(Load("c", 2)["x"] == Bytes(1000, 2));
}

TEST_F(CommitClaimTest, ASealedStepIsABaseAndDrainsAsOneRecord) {
  SlowNames slow(raw(), CommitSlow);
  ASSERT_TRUE(SaveOne(slow, 1, Bytes(300000, 1)).ok());
  // An incremental save builds on it. The hint carries the record and its
  // seal: the claim at COMMIT, in a slow placement, is not read at all.
  auto hints = ReadLatestHints(raw(), "c");
  ASSERT_EQ(hints.size(), 1u);
  EXPECT_EQ(hints[0].seal, ClaimAt(1)->seal);
  ReadsOf counted(raw(), CommitObject("c", 1));
  auto base = ReferenceBase(counted, "c", 2, 0, "0123456789abcdef");
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  ASSERT_TRUE(base->has_value());
  EXPECT_EQ((*base)->step(), 1u);
  EXPECT_EQ(counted.reads, 0);
  // Without the hint, the record is read through the claim.
  for (uint32_t slot = 0; slot < kLatestHintSlots; ++slot) (void)raw().Remove(LatestHintObject("c", slot));
  base = ReferenceBase(counted, "c", 2, 0, "1123456789abcdef");
  ASSERT_TRUE(base.ok() && base->has_value()) << base.status().ToString();
  EXPECT_EQ(counted.reads, 1);
  // A seal gone (a removal begun) is no base.
  PublishLatestHint(raw(), "c", 1, ReadCommitRecord(raw(), "c", 1)->bytes, ClaimAt(1)->seal);
  const std::string seal_bytes = *raw().ReadSmall(ClaimAt(1)->seal);
  ASSERT_TRUE(raw().Remove(ClaimAt(1)->seal).ok());
  base = ReferenceBase(raw(), "c", 2, 0, "2123456789abcdef");
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_FALSE(base->has_value());
  ASSERT_TRUE(raw().PublishIfAbsent(ClaimAt(1)->seal, seal_bytes).ok());
  // A drain claims and seals the step there too, with the same record.
  char tmpl[] = "/tmp/sluice-claim-dst-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dst_dir = tmpl;
  {
    StoreOptions o;
    o.create_if_missing = true;
    auto dst = Store::Open(dst_dir, o);
    ASSERT_TRUE(dst.ok()) << dst.status().ToString();
    Status drained = CopyCommittedStep(raw(), (*dst)->backend(), "c", 1, CopyControl{});
    ASSERT_TRUE(drained.ok()) << drained.ToString();
    // The same save (under the drain writer's names), at a seal of the
    // drain's own claim.
    auto there = LoadCheckpoint((*dst)->backend(), "c", 1);
    ASSERT_TRUE(there.ok()) << there.status().ToString();
    EXPECT_TRUE(SameSave(*there, *LoadCheckpoint(raw(), "c", 1)));
    EXPECT_NE(there->commit.ranks[0].manifest, LoadCheckpoint(raw(), "c", 1)->commit.ranks[0].manifest);
    EXPECT_TRUE(IsCommitClaim(*(*dst)->backend().ReadSmall(CommitObject("c", 1))));
    EXPECT_EQ((*dst)->backend().List(SealPrefix("c", 1))->size(), 1u);
    // Drained again: the same record is there, nothing to do.
    EXPECT_TRUE(CopyCommittedStep(raw(), (*dst)->backend(), "c", 1, CopyControl{}).ok());
  }
  std::string cmd = "rm -rf " + dst_dir;
  (void)std::system(cmd.c_str());
}

// Runs `before` once, just before the first exclusive publish of a seal
// holding gc's or rm's fence (kFencedSeal): a writer sealing the dead
// claim at that very moment.
class BeforeFence final : public BackendWrapper {
 public:
  BeforeFence(Backend& target, std::function<void()> before) : BackendWrapper(target), before_(std::move(before)) {}
  Status PublishIfAbsent(const std::string& name, std::string_view bytes) override {
    if (bytes == kFencedSeal && before_) {
      auto f = std::move(before_);
      before_ = nullptr;
      f();
    }
    return BackendWrapper::PublishIfAbsent(name, bytes);
  }

 private:
  std::function<void()> before_;
};

// gc lists a dead save's claim as garbage; the next writer of the step
// seals it before gc removes it. gc must not take the claim then: the step
// is committed, and its writer was told so.
TEST_F(CommitClaimTest, GcNeverTakesAClaimSealedSinceItLooked) {
  const std::string seal = DeadClaim(1);
  ASSERT_FALSE(seal.empty());
  const std::string b = Bytes(5000, 7);
  Status saved = Status::IOError("the racing save never ran");
  BeforeFence racing(raw(), [&] { saved = SaveOne(raw(), 1, b).status(); });
  ASSERT_TRUE(CollectGarbage(racing, 0).ok());
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  EXPECT_TRUE(Load("c", 1)["x"] == b) << "gc took a committed step's claim";
  auto record = ReadCommitRecord(raw(), "c", 1);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->seal, seal);
  // Left alone, gc fences the dead claim, removes it, then the fence.
  const std::string seal2 = DeadClaim(2);
  ASSERT_TRUE(CollectGarbage(raw(), 0).ok());
  EXPECT_TRUE(raw().ReadSmall(CommitObject("c", 2)).status().IsNotFound());
  EXPECT_TRUE(raw().ReadSmall(seal2).status().IsNotFound());
  ASSERT_TRUE(SaveOne(raw(), 2, b).ok());
  EXPECT_TRUE(Load("c", 2)["x"] == b);
}

// A fence left by a gc or rm that stopped halfway: no writer can seal the
// claim (it says why), readers see no commit, and the next gc finishes.
TEST_F(CommitClaimTest, AFencedClaimIsNoCommitAndTheNextGcFinishesIt) {
  const std::string seal = DeadClaim(1);
  ASSERT_TRUE(raw().PublishIfAbsent(seal, kFencedSeal).ok());
  EXPECT_TRUE(ReadCommitRecord(raw(), "c", 1).status().IsNotFound());
  auto refused = SaveOne(raw(), 1, Bytes(1000, 1));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().ToString();
  ASSERT_TRUE(CollectGarbage(raw(), 0).ok());
  EXPECT_TRUE(raw().ReadSmall(CommitObject("c", 1)).status().IsNotFound());
  EXPECT_TRUE(raw().ReadSmall(seal).status().IsNotFound());
  ASSERT_TRUE(SaveOne(raw(), 1, Bytes(1000, 2)).ok());
  EXPECT_TRUE(Load("c", 1)["x"] == Bytes(1000, 2));
}

// rm of a step whose dead claim a writer seals after rm listed the step:
// that seal goes too, and no seal outlives the claim.
TEST_F(CommitClaimTest, RemoveTakesASealMadeAfterItListed) {
  const std::string seal = DeadClaim(1);
  Status saved = Status::IOError("the racing save never ran");
  BeforeFence racing(raw(), [&] { saved = SaveOne(raw(), 1, Bytes(1000, 3)).status(); });
  ASSERT_TRUE(RemoveCheckpoint(racing, {"c", 1}).ok());
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  EXPECT_TRUE(ReadCommitRecord(raw(), "c", 1).status().IsNotFound());
  EXPECT_TRUE(raw().ReadSmall(seal).status().IsNotFound()) << "a seal outlived its claim";
  EXPECT_TRUE(raw().List(SealPrefix("c", 1))->empty());
}

// Holds a writer just after it sealed (its commit point), with its lock
// still alive, until released: a save between its seal and its end.
class HoldsAfterSeal final : public BackendWrapper {
 public:
  explicit HoldsAfterSeal(Backend& target) : BackendWrapper(target) {}
  Status PublishIfAbsent(const std::string& name, std::string_view bytes) override {
    Status st = BackendWrapper::PublishIfAbsent(name, bytes);
    if (st.ok() && name.find("/seal/") != std::string::npos && bytes != kFencedSeal) {
      sealed.set_value();
      go.get_future().wait();
    }
    return st;
  }
  std::promise<void> sealed, go;
};

// Why a commit is final (doc/format.md), rm's part: rm of a step checks for
// a live writer, then fences the dead claim it listed. A writer that
// registered in between and sealed that claim is still running: rm refuses,
// and the writer's commit stands. (Once that writer has finished, rm
// removes the step as any committed one: RemoveTakesASealMadeAfterItListed.)
TEST_F(CommitClaimTest, RemoveRefusesAClaimSealedByASaveStillRunning) {
  const std::string seal = DeadClaim(1);
  const std::string b = Bytes(5000, 8);
  HoldsAfterSeal holding(raw());
  Status saved = Status::IOError("the racing save never ran");
  std::thread writer;
  BeforeFence racing(raw(), [&] {
    writer = std::thread([&] { saved = SaveOne(holding, 1, b).status(); });
    holding.sealed.get_future().wait();
  });
  Status removed = RemoveCheckpoint(racing, {"c", 1});
  holding.go.set_value();
  writer.join();
  EXPECT_EQ(removed.code(), StatusCode::kUnavailable) << removed.ToString();
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  auto record = ReadCommitRecord(raw(), "c", 1);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->seal, seal);
  EXPECT_TRUE(Load("c", 1)["x"] == b);
  // The writer done, rm takes the step.
  ASSERT_TRUE(RemoveCheckpoint(raw(), {"c", 1}).ok());
  EXPECT_TRUE(ReadCommitRecord(raw(), "c", 1).status().IsNotFound());
}

// Runs `after` once, just after the first listing of the whole store.
class AfterFirstList final : public BackendWrapper {
 public:
  AfterFirstList(Backend& target, std::function<void()> after) : BackendWrapper(target), after_(std::move(after)) {}
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
    auto listed = BackendWrapper::List(prefix);
    if (prefix == CheckpointsPrefix() && after_) {
      auto f = std::move(after_);
      after_ = nullptr;
      f();
    }
    return listed;
  }

 private:
  std::function<void()> after_;
};

// Why a commit is final, gc's part: gc lists first and asks about writers
// after, so whatever it lists of a step belongs to a writer that registered
// before it asked. A writer that registers after the listing (here in a
// step where a dead save left its claim and data) is live when gc asks:
// the step is left alone, and the commit it then makes holds everything it
// names.
TEST_F(CommitClaimTest, GcLeavesAStepAWriterEnteredAfterItsListing) {
  const std::string seal = DeadClaim(1);
  ASSERT_TRUE(raw().PublishIfAbsent(DataObject("c", 1, 0, "dead0000writer00", 0), "left by the dead save").ok());
  const std::string b = Bytes(200000, 9);
  HoldsAfterSeal holding(raw());
  Status saved = Status::IOError("the racing save never ran");
  std::thread writer;
  AfterFirstList racing(raw(), [&] {
    writer = std::thread([&] { saved = SaveOne(holding, 1, b).status(); });
    holding.sealed.get_future().wait();
  });
  auto gc = CollectGarbage(racing, 0);
  holding.go.set_value();
  writer.join();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->objects_removed, 0u);
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  EXPECT_TRUE(Load("c", 1)["x"] == b);
  auto v = store_->Verify("c", 1);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->ok());
  // The next gc takes the dead save's data, and nothing of the commit.
  gc = CollectGarbage(raw(), 0);
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->objects_removed, 1u);
  EXPECT_TRUE(Load("c", 1)["x"] == b);
}

// Holds a writer just before it publishes its seal, until released.
class HoldsBeforeSeal final : public BackendWrapper {
 public:
  explicit HoldsBeforeSeal(Backend& target) : BackendWrapper(target) {}
  Status PublishIfAbsent(const std::string& name, std::string_view bytes) override {
    if (name.find("/seal/") != std::string::npos && bytes != kFencedSeal) {
      about_to_seal.set_value();
      go.get_future().wait();
    }
    return BackendWrapper::PublishIfAbsent(name, bytes);
  }
  std::promise<void> about_to_seal, go;
};

// Why a commit is final, where it is not: gc asked about writers, then a
// writer registered, read the dead claim at COMMIT and was about to seal
// it; gc fenced the claim's seal, removed the claim and then the fence. The
// writer's seal then lands where no claim names it: it reads the claim
// again, takes the seal back and fails, instead of reporting a commit
// nobody can read.
TEST_F(CommitClaimTest, AWriterThatSealsADeadClaimGcRemovedCommitsNothing) {
  const std::string seal = DeadClaim(1);
  HoldsBeforeSeal holding(raw());
  Status saved = Status::OK();
  std::thread writer;
  BeforeFence racing(raw(), [&] {
    writer = std::thread([&] { saved = SaveOne(holding, 1, Bytes(1000, 6)).status(); });
    holding.about_to_seal.get_future().wait();
  });
  auto gc = CollectGarbage(racing, 0);
  holding.go.set_value();
  writer.join();
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  ASSERT_FALSE(saved.ok()) << "the save reported a commit whose claim gc had removed";
  EXPECT_NE(saved.message().find("withdrawn"), std::string::npos) << saved.ToString();
  EXPECT_TRUE(raw().ReadSmall(seal).status().IsNotFound()) << "an orphan seal stayed";
  EXPECT_TRUE(ReadCommitRecord(raw(), "c", 1).status().IsNotFound());
  ASSERT_TRUE(SaveOne(raw(), 1, Bytes(1000, 7)).ok());
  EXPECT_TRUE(Load("c", 1)["x"] == Bytes(1000, 7));
}

// A reader says why a step is not committed, and which object's bytes
// failed: a damaged seal is named, not `COMMIT`.
TEST_F(CommitClaimTest, ReadersNameTheSealAndWhyAClaimIsNoCommit) {
  ASSERT_TRUE(SaveOne(raw(), 1, Bytes(1000, 1)).ok());
  const std::string seal = ClaimAt(1)->seal;
  std::string bad = *raw().ReadSmall(seal);
  bad[bad.size() / 2] ^= 0x5a;
  ASSERT_TRUE(raw().PublishIfAbsent(seal + ".bad", bad).ok());
  ASSERT_TRUE(raw().Replace(seal + ".bad", seal).ok());
  auto damaged = LoadCheckpoint(raw(), "c", 1);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), StatusCode::kCorruption) << damaged.status().ToString();
  EXPECT_NE(damaged.status().message().find(seal), std::string::npos) << damaged.status().ToString();
  EXPECT_EQ(damaged.status().message().find("COMMIT:"), std::string::npos) << damaged.status().ToString();

  // A claim whose seal is missing and whose writer is gone: being removed,
  // or its save died.
  DeadClaim(2);
  auto dead = LoadCheckpoint(raw(), "c", 2);
  ASSERT_TRUE(dead.status().IsNotFound()) << dead.status().ToString();
  EXPECT_NE(dead.status().message().find("being removed"), std::string::npos) << dead.status().ToString();

  // One whose writer holds its lock: a save that is running.
  const std::string writer = "live0000writer00";
  ASSERT_TRUE(raw().PublishIfAbsent(CommitObject("c", 3),
                                    EncodeCommitClaim(CommitClaim{"c", 3, SealObject("c", 3, writer, 1), 1})).ok());
  ASSERT_TRUE(AcquireWriterLock(raw(), "c", 3, writer).ok());
  auto running = LoadCheckpoint(raw(), "c", 3);
  ASSERT_TRUE(running.status().IsNotFound()) << running.status().ToString();
  EXPECT_NE(running.status().message().find("is running"), std::string::npos) << running.status().ToString();
  ReleaseWriterLock(raw(), "c", 3, writer);
}

}  // namespace
}  // namespace sluice
