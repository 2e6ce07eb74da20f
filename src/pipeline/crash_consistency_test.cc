// Power-loss consistency: the store's operations run over a fault-injecting
// wrapper around the real file backend that "loses power" after its N-th
// mutating operation, for every N. Then everything the backend had not yet
// made durable is lost (an unfinished object vanishes, is cut short, or
// survives, chosen at random), and a fresh store over the same directory must
// hold only intact checkpoints: every committed one verifies, checkpoints
// committed before are untouched, and gc leaves nothing incomplete.
//
// kill -9 (tests/crash_test.sh) keeps the page cache; this also loses it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "format/writer_lock.h"
#include "sluice/backend.h"
#include "sluice/backend_wrapper.h"
#include "sluice/pipeline.h"
#include "sluice/store.h"

namespace sluice {
namespace {

// Power is lost machine-wide: one FaultState is shared by every store of a
// test (both tiers of a pipeline), and counts their mutating operations
// together.
struct FaultState {
  int64_t ops = 0;                   // mutating operations so far
  int64_t crash_at = -1;             // the op that fails, and all after it
  std::set<std::string> unsynced;    // paths of objects created but not yet durable
  // Called once, right after an object whose name contains `race_on` is
  // created or published: lets a test race a save with something else.
  std::string race_on;
  std::function<void()> race;
  void MaybeRace(const std::string& name) {
    if (!race || race_on.empty() || name.find(race_on) == std::string::npos) return;
    auto hook = std::move(race);
    race = nullptr;
    hook();
  }
  // The number of the operation that published the last commit record
  // seen (at a seal, format/commit_record.h): power lost from there on fails a save, later (its latest-step
  // hint and lock release, best effort) it has committed.
  int64_t commit_op = 0;
  bool dead() const { return crash_at >= 0 && ops >= crash_at; }
  // Counts one mutating operation (on object `name`, where one is named);
  // false once the power is out (crash_at = k fails operation number k).
  bool Tick(const std::string& name = "") {
    if (dead()) return false;
    ++ops;
    // Every commit record is published at its claim's seal.
    if (name.find("/seal/") != std::string::npos) {
      commit_op = ops;
    }
    return !dead();
  }
};

Status PowerLost() { return Status::IOError("injected power loss"); }

class FaultWritable final : public WritableObjectWrapper {
 public:
  FaultWritable(std::unique_ptr<WritableObject> inner, FaultState* st, std::string path)
      : WritableObjectWrapper(std::move(inner)), st_(st), path_(std::move(path)) {}
  Status StartWrite(uint64_t offset, const void* data, size_t len, uint64_t tag) override {
    if (!st_->Tick()) return PowerLost();
    return WritableObjectWrapper::StartWrite(offset, data, len, tag);
  }
  Status Finish(uint64_t final_size) override {
    if (!st_->Tick()) return PowerLost();
    RETURN_IF_ERROR(WritableObjectWrapper::Finish(final_size));
    st_->unsynced.erase(path_);
    return Status::OK();
  }

 private:
  FaultState* st_;
  std::string path_;
};

// The real file backend of `root`, losing power after the op the state says.
class FaultBackend final : public BackendWrapper {
 public:
  FaultBackend(std::unique_ptr<Backend> inner, FaultState* st, std::string root)
      : BackendWrapper(std::move(inner)), st_(st), root_(std::move(root)) {}
  Result<std::unique_ptr<WritableObject>> Create(const std::string& name, const CreateOptions& options) override {
    if (!st_->Tick()) return PowerLost();
    ASSIGN_OR_RETURN(auto w, BackendWrapper::Create(name, options));
    st_->unsynced.insert(root_ + "/" + name);
    st_->MaybeRace(name);
    return std::unique_ptr<WritableObject>(new FaultWritable(std::move(w), st_, root_ + "/" + name));
  }
  Result<std::unique_ptr<ReadableObject>> Open(const std::string& name, const OpenOptions& options) override {
    if (st_->dead()) return PowerLost();
    return BackendWrapper::Open(name, options);
  }
  Status PublishIfAbsent(const std::string& name, std::string_view bytes) override {
    // The publish is atomic and durable when it returns; power lost before
    // it leaves nothing (a leftover temporary at most, which the real
    // backend's own crash would leave too).
    if (!st_->Tick(name)) return PowerLost();
    Status published = BackendWrapper::PublishIfAbsent(name, bytes);
    if (published.ok()) st_->MaybeRace(name);
    return published;
  }
  Result<std::string> ReadSmall(const std::string& name) override {
    if (st_->dead()) return PowerLost();
    return BackendWrapper::ReadSmall(name);
  }
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
    if (st_->dead()) return PowerLost();
    return BackendWrapper::List(prefix);
  }
  Result<std::vector<ObjectInfo>> Stat(const std::vector<std::string>& names) override {
    if (st_->dead()) return PowerLost();
    return BackendWrapper::Stat(names);
  }
  Status Remove(const std::string& name) override {
    if (!st_->Tick(name)) return PowerLost();
    return BackendWrapper::Remove(name);
  }
  Status ReclaimLeftovers(const std::string& prefix, uint64_t min_age_ms) override {
    if (!st_->Tick()) return PowerLost();
    return BackendWrapper::ReclaimLeftovers(prefix, min_age_ms);
  }

 private:
  FaultState* st_;
  std::string root_;
};

std::string Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// A tier whose placement puts every data object beside its name
// ("...-000003.dat" -> "...-000003-h1.dat"), as a RADOS placement does for
// a name in a slow placement group: what a drain stores is not the name it
// asked for, and its commit must name what was stored. Deterministic (no
// write is ever late), so that power can be lost after every operation.
class BesidePlacement final : public BackendWrapper, public Placement {
 public:
  explicit BesidePlacement(std::unique_ptr<Backend> target) : BackendWrapper(std::move(target)) {
    caps_ = BackendWrapper::caps();
    caps_.placement = this;
  }
  const BackendCaps& caps() const override { return caps_; }
  const HedgePolicy& policy() const override { return policy_; }
  bool Slow(const std::string&) const override { return false; }
  std::string Place(const std::string& name, const std::vector<std::string>& taken, bool* avoided) override {
    *avoided = true;
    const size_t dot = name.rfind('.');
    const std::string beside = name.substr(0, dot) + "-h1" + name.substr(dot);
    return std::find(taken.begin(), taken.end(), beside) == taken.end() ? beside : std::string();
  }
  std::chrono::nanoseconds Deadline() const override { return std::chrono::hours(1); }
  void Observe(const std::string&, std::chrono::nanoseconds, bool) override {}
  bool Reserve(uint64_t) override { return true; }
  void Count(HedgeEvent, uint64_t) override {}
  HedgeStats Stats() const override { return {}; }

 private:
  BackendCaps caps_;
  HedgePolicy policy_;
};

class CrashConsistency : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-powerloss-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    tier1_ = dir_ + "-tier1";
    options_.chunk_bytes = 64 << 10;
    options_.io_bytes = 64 << 10;
    options_.object_bytes = 1 << 20;  // several data objects per save
    options_.rank_timeout_ms = 2000;
    options_.create_if_missing = true;
  }
  void TearDown() override {
    // How many times power was lost, for the record of how much was tried.
    std::printf("[ TRIALS   ] %lld power losses\n", static_cast<long long>(power_losses_));
    RecordProperty("power_losses", static_cast<int>(power_losses_));
    std::string cmd = "rm -rf " + dir_ + " " + tier1_;
    (void)std::system(cmd.c_str());
  }

  std::map<std::string, std::string> Items(uint32_t seed) {
    return {{"a", Bytes(1500000, seed)}, {"b/c", Bytes(70000, seed + 1)}, {"empty", ""}};
  }

  std::unique_ptr<Store> FaultyStore(FaultState* st) {
    auto b = OpenBackend(dir_, true);
    EXPECT_TRUE(b.ok());
    return Store::Open(std::unique_ptr<Backend>(new FaultBackend(std::move(b).value(), st, dir_)), options_);
  }
  std::unique_ptr<Store> CleanStore() {
    auto s = Store::Open(dir_, options_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s).value();
  }

  Status SaveWith(Store& store, uint64_t step, const std::map<std::string, std::string>& items) {
    ASSIGN_OR_RETURN(auto w, store.BeginCheckpoint({"m", step}, 0, 1));
    for (const auto& [k, v] : items) RETURN_IF_ERROR(w->AddItem(k, "", v.data(), v.size()));
    return w->Commit().status();
  }

  std::map<std::string, std::string> Load(Store& store, uint64_t step) {
    std::map<std::string, std::string> out;
    auto r = store.OpenCheckpoint("m", step);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return out;
    for (const auto& it : (*r)->items()) out[it.key].resize(it.size);
    Status st = (*r)->ReadAll(std::nullopt, [&](const ItemInfo& item, uint64_t off, const void* d, size_t n) {
      if (n > 0) std::memcpy(out[item.key].data() + off, d, n);
      return Status::OK();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    return out;
  }

  // What power loss does: objects that were not yet durable may be lost or
  // cut short, and after the reboot every writer of the lost boot is dead,
  // which this process (still running) models by rewriting the writer locks
  // it left with another boot id.
  void LosePower(FaultState* st, std::mt19937* rng) {
    ++power_losses_;
    LosePowerOn(st, rng, {dir_, tier1_});
  }
  void LosePowerOn(FaultState* st, std::mt19937* rng, const std::vector<std::string>& dirs) {
    for (const auto& dir : dirs) {
      auto b = OpenBackend(dir, false);
      if (b.status().IsNotFound()) continue;
      ASSERT_TRUE(b.ok());
      auto listed = (*b)->List("");
      ASSERT_TRUE(listed.ok());
      for (const auto& o : *listed) {
        if (o.name.size() < 5 || o.name.compare(o.name.size() - 5, 5, ".lock") != 0) continue;
        auto bytes = (*b)->ReadSmall(o.name);
        if (!bytes.ok()) continue;
        auto lock = DecodeWriterLock(*bytes, o.name);
        if (!lock.ok()) continue;
        lock->boot_id = "the-boot-that-lost-power";
        ASSERT_TRUE((*b)->Remove(o.name).ok());
        ASSERT_TRUE((*b)->PublishIfAbsent(o.name, EncodeWriterLock(*lock)).ok());
      }
    }
    for (const auto& path : st->unsynced) {
      struct stat sb;
      if (::stat(path.c_str(), &sb) != 0) continue;
      switch ((*rng)() % 3) {
        case 0: ::unlink(path.c_str()); break;
        case 1: (void)!::truncate(path.c_str(), sb.st_size > 0 ? (*rng)() % sb.st_size : 0); break;
        default: break;  // the page cache made it to disk after all
      }
    }
  }

  // The invariants after any crash.
  void CheckStore(const std::map<uint64_t, std::map<std::string, std::string>>& must_have,
                  const std::map<uint64_t, std::map<std::string, std::string>>& may_have,
                  int64_t crash_at, const std::string& dir = "") {
    auto opened = Store::Open(dir.empty() ? dir_ : dir, options_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    auto store = std::move(opened).value();
    auto list = store->List("m", false);
    ASSERT_TRUE(list.ok()) << list.status().ToString();
    std::set<uint64_t> committed;
    for (const auto& c : *list) committed.insert(c.step);
    for (const auto& [step, items] : must_have) {
      ASSERT_TRUE(committed.count(step)) << "crash at op " << crash_at << " lost committed step " << step;
      EXPECT_EQ(Load(*store, step), items) << "crash at op " << crash_at << ", step " << step;
    }
    for (uint64_t step : committed) {
      auto report = store->Verify("m", step);
      ASSERT_TRUE(report.ok()) << report.status().ToString();
      EXPECT_TRUE(report->ok()) << "crash at op " << crash_at << ": committed step " << step
                                << " has " << report->bad.size() << " bad chunks";
      if (!must_have.count(step)) {
        auto it = may_have.find(step);
        ASSERT_NE(it, may_have.end()) << "crash at op " << crash_at << ": unexpected step " << step;
        EXPECT_EQ(Load(*store, step), it->second);
      }
    }
    ASSERT_TRUE(store->CollectGarbage(0).ok());
    auto all = store->List("m", true);
    ASSERT_TRUE(all.ok());
    for (const auto& c : *all) EXPECT_TRUE(c.complete) << "crash at op " << crash_at << ": step " << c.step << " left incomplete after gc: " << c.problem;
  }

  // The user's path: a pipeline over `tiers` stores (dir_, then tier1_),
  // each over the real file backend, losing power as `st` says (no faults
  // when st is null).
  PipelineOptions PipeOptions(size_t tiers) {
    PipelineOptions o;
    o.store = options_;
    o.tiers.push_back(TierOptions{dir_});
    if (tiers > 1) o.tiers.push_back(TierOptions{tier1_});
    o.staging_bytes = 256 << 10;  // smaller than a save: the snapshot streams
    o.copy_threads = 1;
    o.resume_drains = false;
    o.retry_initial_ms = 10;
    o.retry_max_ms = 20;
    return o;
  }
  std::unique_ptr<Pipeline> OpenPipeline(FaultState* st, size_t tiers) {
    std::vector<std::unique_ptr<Store>> stores;
    for (size_t k = 0; k < tiers; ++k) {
      const std::string& dir = k == 0 ? dir_ : tier1_;
      auto b = OpenBackend(dir, true);
      EXPECT_TRUE(b.ok()) << b.status().ToString();
      if (!b.ok()) return nullptr;
      std::unique_ptr<Backend> backend = std::move(b).value();
      if (st != nullptr) backend = std::make_unique<FaultBackend>(std::move(backend), st, dir);
      if (k == 1 && tier1_placed_) backend = std::make_unique<BesidePlacement>(std::move(backend));
      stores.push_back(Store::Open(std::move(backend), options_));
    }
    auto p = Pipeline::Open(PipeOptions(tiers), std::move(stores));
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(p).value() : nullptr;
  }
  // A save as `sluice save` runs it: snapshot into staging, then wait for
  // tier 0's commit, and for the later tiers' drains until they commit or
  // fail once (a drain is retried forever while the pipeline lives).
  Status PipelineSave(Pipeline& p, uint64_t step, const std::map<std::string, std::string>& items) {
    ASSIGN_OR_RETURN(auto pending, p.Begin({"m", step}, 0, 1));
    for (const auto& [k, v] : items) RETURN_IF_ERROR(pending->AddItem(k, "", v.data(), v.size()));
    ASSIGN_OR_RETURN(auto handle, pending->Snapshot());
    RETURN_IF_ERROR(handle->WaitTier(0));
    for (size_t k = 1; k < p.tier_count(); ++k) {
      for (;;) {
        auto progress = handle->progress();
        if (progress[k].state == TierState::kCommitted) break;
        if (progress[k].attempts > 0 && progress[k].state == TierState::kFailed) return progress[k].error;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    return Status::OK();
  }

  // Saves `base` as step 1 on `tiers` tiers, then counts the operations of
  // a fault-free save of `next` (as step 99, removed again afterwards).
  void SeedAndCountOps(size_t tiers, const std::map<std::string, std::string>& base,
                       const std::map<std::string, std::string>& next, int64_t* ops,
                       int64_t* commit_op = nullptr) {
    {
      auto p = OpenPipeline(nullptr, tiers);
      ASSERT_NE(p, nullptr);
      ASSERT_TRUE(PipelineSave(*p, 1, base).ok());
    }
    FaultState st;
    auto p = OpenPipeline(&st, tiers);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(PipelineSave(*p, 99, next).ok());
    p.reset();
    *ops = st.ops;
    if (commit_op != nullptr) *commit_op = st.commit_op;
    for (size_t k = 0; k < tiers; ++k) {
      auto s = Store::Open(k == 0 ? dir_ : tier1_, options_);
      ASSERT_TRUE(s.ok());
      ASSERT_TRUE((*s)->Remove({"m", 99}).ok());
    }
  }

  std::string dir_;
  std::string tier1_;
  bool tier1_placed_ = false;  // tier 1 behind a BesidePlacement
  int64_t power_losses_ = 0;
  StoreOptions options_;
};

TEST_F(CrashConsistency, SaveSurvivesPowerLossAfterEveryOperation) {
  const auto base = Items(1), next = Items(10);
  {
    FaultState st;
    auto store = FaultyStore(&st);
    ASSERT_TRUE(SaveWith(*store, 1, base).ok());
  }
  // Count a save's operations once, without faults.
  int64_t total_ops, commit_op;
  {
    FaultState st;
    auto store = FaultyStore(&st);
    ASSERT_TRUE(SaveWith(*store, 99, next).ok());
    total_ops = st.ops;
    commit_op = st.commit_op;
    ASSERT_TRUE(store->Remove({"m", 99}).ok());
  }
  ASSERT_GT(total_ops, 20);
  // After the commit: the latest-step hint (two operations) and the lock.
  EXPECT_EQ(total_ops - commit_op, 3);
  std::mt19937 rng(42);
  for (int64_t crash_at = 0; crash_at <= total_ops; ++crash_at) {
    FaultState st;
    st.crash_at = crash_at;
    {
      auto store = FaultyStore(&st);
      Status saved = SaveWith(*store, 2, next);
      // Power lost up to its commit fails it; lost after, it has committed
      // all the same.
      if (crash_at < total_ops) {
        EXPECT_EQ(saved.ok(), crash_at > commit_op) << "op " << crash_at << ": " << saved.ToString();
      }
    }
    LosePower(&st, &rng);
    CheckStore({{1, base}}, {{2, next}}, crash_at);
    if (HasFatalFailure()) return;
    // Whatever the crash left, saving the step again works.
    auto store = CleanStore();
    auto list = store->List("m", false);
    bool has2 = false;
    for (const auto& c : *list) has2 |= c.step == 2;
    if (!has2) {
      ASSERT_TRUE(SaveWith(*store, 2, next).ok()) << "retry after crash at op " << crash_at;
    }
    ASSERT_TRUE(store->Remove({"m", 2}).ok());
  }
}

TEST_F(CrashConsistency, RemoveAndGcSurvivePowerLossAfterEveryOperation) {
  const auto base = Items(1), doomed = Items(20);
  std::mt19937 rng(7);
  for (int64_t crash_at = 0;; ++crash_at) {
    {
      auto store = CleanStore();
      ASSERT_TRUE(SaveWith(*store, 1, base).ok());
      ASSERT_TRUE(SaveWith(*store, 2, doomed).ok());
      // Leave garbage for gc: an uncommitted save of step 3 (rank 1 of 2
      // never comes).
      StoreOptions quick = options_;
      quick.rank_timeout_ms = 20;
      auto impatient = Store::Open(dir_, quick);
      ASSERT_TRUE(impatient.ok());
      auto w = (*impatient)->BeginCheckpoint({"m", 3}, 0, 2);
      ASSERT_TRUE(w.ok());
      ASSERT_TRUE((*w)->AddItem("x", "", "garbage", 7).ok());
      ASSERT_FALSE((*w)->Commit().ok());
    }
    FaultState st;
    st.crash_at = crash_at;
    bool finished;
    {
      auto store = FaultyStore(&st);
      Status rm = store->Remove({"m", 2});
      Status gc = rm.ok() ? store->CollectGarbage(0).status() : rm;
      finished = gc.ok();
    }
    LosePower(&st, &rng);
    // Step 2 may survive whole or be gone, never be torn.
    CheckStore({{1, base}}, {{2, doomed}}, crash_at);
    if (HasFatalFailure()) return;
    std::string cmd = "rm -rf " + dir_ + "/ckpt";
    (void)std::system(cmd.c_str());
    if (finished) break;
  }
}

// The synchronous save users run (`sluice save`, sluice.save): a pipeline
// whose snapshot streams through a staging arena smaller than the save.
TEST_F(CrashConsistency, PipelineSaveSurvivesPowerLossAfterEveryOperation) {
  const auto base = Items(1), next = Items(10);
  int64_t total_ops = 0, commit_op = 0;
  ASSERT_NO_FATAL_FAILURE(SeedAndCountOps(1, base, next, &total_ops, &commit_op));
  ASSERT_GT(total_ops, 20);
  EXPECT_GT(commit_op, 0);
  std::mt19937 rng(4242);
  for (int64_t crash_at = 0; crash_at <= total_ops; ++crash_at) {
    FaultState st;
    st.crash_at = crash_at;
    {
      auto p = OpenPipeline(&st, 1);
      ASSERT_NE(p, nullptr);
      Status saved = PipelineSave(*p, 2, next);
      if (crash_at < total_ops) {
        EXPECT_EQ(saved.ok(), crash_at > commit_op) << "op " << crash_at << ": " << saved.ToString();
      }
    }
    LosePower(&st, &rng);
    CheckStore({{1, base}}, {{2, next}}, crash_at);
    if (HasFatalFailure()) return;
    auto store = CleanStore();
    (void)store->Remove({"m", 2});
  }
}

// An incremental save (step 2 shares most chunks with step 1) while step 1
// is removed, power lost after every operation of either. The removal runs
// either just after the save published its refs record, before it checked
// that its base is still there (the save then writes in full), or once it
// writes its first data object, having referenced the base (the removal
// then keeps what the save references). Whatever survives is whole: step 2,
// if committed, restores bit-exact, and no object it references is gone.
class IncrementalRace : public CrashConsistency, public ::testing::WithParamInterface<const char*> {};

TEST_P(IncrementalRace, IncrementalSaveWhoseBaseIsRemovedSurvivesPowerLoss) {
  const std::string race_on = GetParam();
  const bool referenced = race_on != ".refs";
  const auto base = Items(1);
  auto next = Items(1);
  next["b/c"] = Bytes(70000, 99);  // one item changes, the rest is shared
  auto race = [&](FaultState* st) {
    st->race_on = race_on;
    st->race = [this, st] {
      auto store = FaultyStore(st);
      (void)store->Remove({"m", 1});
    };
  };
  int64_t total_ops = 0;
  {
    auto p = OpenPipeline(nullptr, 1);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(PipelineSave(*p, 1, base).ok());
  }
  {
    FaultState st;
    race(&st);
    auto p = OpenPipeline(&st, 1);
    ASSERT_TRUE(PipelineSave(*p, 2, next).ok());
    p.reset();
    total_ops = st.ops;
    auto store = CleanStore();
    EXPECT_FALSE(store->OpenCheckpoint("m", 1).ok()) << "the race removed the base";
    EXPECT_TRUE(store->Verify("m", 2)->ok());
    auto list = store->List("m", false);
    ASSERT_TRUE(list.ok());
    ASSERT_EQ(list->size(), 1u);
    EXPECT_EQ((*list)[0].referenced_bytes, referenced ? 1500000u : 0u);
  }
  ASSERT_GT(total_ops, 8);
  std::mt19937 rng(515);
  for (int64_t crash_at = 0; crash_at <= total_ops; ++crash_at) {
    {
      (void)std::system(("rm -rf " + dir_ + "/ckpt").c_str());
      auto p = OpenPipeline(nullptr, 1);
      ASSERT_NE(p, nullptr);
      ASSERT_TRUE(PipelineSave(*p, 1, base).ok());
    }
    FaultState st;
    st.crash_at = crash_at;
    race(&st);
    {
      auto p = OpenPipeline(&st, 1);
      ASSERT_NE(p, nullptr);
      (void)PipelineSave(*p, 2, next);
    }
    LosePower(&st, &rng);
    CheckStore({}, {{1, base}, {2, next}}, crash_at);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(RemovalTimes, IncrementalRace,
                         ::testing::Values(".refs", "/00000000000000000002/data/"));

// An async save into two tiers: tier 0 written and committed, then drained
// to tier 1 and committed there, power lost after every operation of
// either. Each tier holds only whole checkpoints, nothing committed before
// is lost, and the next pipeline's drain finishes the job.
class TwoTierCrash : public CrashConsistency, public ::testing::WithParamInterface<bool> {};

TEST_P(TwoTierCrash, SaveAndDrainSurvivePowerLossAfterEveryOperation) {
  tier1_placed_ = GetParam();
  const auto base = Items(1), next = Items(30);
  int64_t total_ops = 0;
  ASSERT_NO_FATAL_FAILURE(SeedAndCountOps(2, base, next, &total_ops));
  ASSERT_GT(total_ops, 40);
  std::mt19937 rng(77);
  for (int64_t crash_at = 0; crash_at <= total_ops; ++crash_at) {
    FaultState st;
    st.crash_at = crash_at;
    bool saved_ok;
    {
      auto p = OpenPipeline(&st, 2);
      ASSERT_NE(p, nullptr);
      // Power lost after tier 1's commit (a lock release, a note cleared in
      // the background) leaves a save that succeeded.
      saved_ok = PipelineSave(*p, 2, next).ok();
    }
    LosePower(&st, &rng);
    std::map<uint64_t, std::map<std::string, std::string>> must = {{1, base}};
    if (saved_ok) must[2] = next;  // a save that reported success is on both tiers
    CheckStore(must, {{2, next}}, crash_at, dir_);
    CheckStore(must, {{2, next}}, crash_at, tier1_);
    if (HasFatalFailure()) return;
    // The next run (`sluice drain`) finishes what was committed on tier 0.
    bool on_tier0 = false;
    {
      auto tier0 = CleanStore();
      auto listed = tier0->List("m", false);
      ASSERT_TRUE(listed.ok()) << listed.status().ToString();
      for (const auto& c : *listed) on_tier0 |= c.step == 2;
    }
    {
      auto p = OpenPipeline(nullptr, 2);
      ASSERT_NE(p, nullptr);
      auto drained = p->Drain("m");
      ASSERT_TRUE(drained.ok()) << drained.status().ToString();
      EXPECT_TRUE(drained->failures.empty()) << "crash at op " << crash_at << ": " << drained->failures[0];
    }
    if (on_tier0) CheckStore({{1, base}, {2, next}}, {}, crash_at, tier1_);
    if (HasFatalFailure()) return;
    for (const auto& dir : {dir_, tier1_}) {
      auto s = Store::Open(dir, options_);
      ASSERT_TRUE(s.ok());
      (void)(*s)->Remove({"m", 2});
    }
  }
}

// Tier 1 as a plain directory, and placed beside (a drain's stored names
// differ from the names it asked for).
INSTANTIATE_TEST_SUITE_P(Tier1, TwoTierCrash, ::testing::Values(false, true));

}  // namespace
}  // namespace sluice
