// Incremental saves through the pipeline, on real file stores: unchanged
// chunks are referenced in the base step instead of written, removal,
// retention and gc keep what later steps reference, drains copy only what
// a tier lacks, a hash collision is caught by the CRC, and a bad shared
// chunk is named in both steps and repaired once for both.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>

#include "checkpoint/step_copy.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/latest_hint.h"
#include "checkpoint/references.h"
#include "checkpoint/slow_names_fixture.h"
#include "checkpoint/writer_registry.h"
#include "sluice/backend_wrapper.h"
#include "format/commit_record.h"
#include "format/layout.h"
#include "io/content_hash.h"
#include "pipeline/drain.h"
#include "pipeline/scrub.h"
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
  for (size_t i = n - n % 8; i < n; ++i) s[i] = static_cast<char>(rng());
  return s;
}

using Items = std::map<std::string, std::string>;

// Bytes of regular files under `path` (recursively).
uint64_t DiskBytes(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return 0;
  uint64_t total = 0;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    struct stat st;
    const std::string p = path + "/" + n;
    if (lstat(p.c_str(), &st) != 0) continue;
    total += S_ISDIR(st.st_mode) ? DiskBytes(p) : static_cast<uint64_t>(st.st_size);
  }
  closedir(d);
  return total;
}

Items State(uint32_t adapter_seed);

class IncrementalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-incr-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    testing::UseCollidingContentHashForTesting(false);
    std::string cmd = "rm -rf " + dir_;
    (void)std::system(cmd.c_str());
  }
  std::string Tier(int k) const { return dir_ + "/tier" + std::to_string(k); }
  std::string DataDir(int tier, uint64_t step) const { return Tier(tier) + "/" + StepPrefix("m", step) + "data"; }

  std::unique_ptr<Pipeline> Open(int tiers, uint32_t keep_last0 = 0) {
    PipelineOptions o;
    for (int k = 0; k < tiers; ++k) o.tiers.push_back(TierOptions{Tier(k)});
    o.tiers[0].keep_last = keep_last0;
    o.store.create_if_missing = true;
    o.store.chunk_bytes = 1 << 20;
    o.store.object_bytes = 8ull << 20;
    o.staging_bytes = 64ull << 20;
    o.retry_initial_ms = 100;
    o.retry_max_ms = 400;
    auto p = Pipeline::Open(o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(p).value() : nullptr;
  }

  SaveStats Save(Pipeline& p, uint64_t step, const Items& items, bool incremental = true) {
    SaveOptions so;
    so.incremental = incremental;
    auto pending = p.Begin({"m", step}, 0, 1, so);
    EXPECT_TRUE(pending.ok()) << pending.status().ToString();
    if (!pending.ok()) return {};
    for (const auto& [k, v] : items) EXPECT_TRUE((*pending)->AddItem(k, "", v.data(), v.size()).ok());
    auto h = (*pending)->Snapshot();
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (!h.ok()) return {};
    Status st = (*h)->Wait();
    EXPECT_TRUE(st.ok()) << st.ToString();
    return (*h)->stats();
  }

  Items Load(Store& store, uint64_t step) {
    Items got;
    auto r = store.OpenCheckpoint("m", step);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return got;
    for (const auto& it : (*r)->items()) got[it.key].resize(it.size);
    Status st = (*r)->ReadAll(std::nullopt, [&](const ItemInfo& item, uint64_t off, const void* d, size_t n) {
      if (n > 0) std::memcpy(&got[item.key][off], d, n);
      return Status::OK();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    return got;
  }

  void ExpectIntact(Store& store, uint64_t step, const Items& items) {
    auto v = store.Verify("m", step);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(v->ok()) << "step " << step << ": " << (v->bad.empty() ? "" : v->bad[0].reason);
    EXPECT_TRUE(Load(store, step) == items) << "step " << step;
  }

  // Steps 1 and 2 of "m" saved through a one-tier pipeline, and tier 0's
  // store opened beside it.
  void SaveTwoSteps(std::unique_ptr<Pipeline>* p, std::unique_ptr<Backend>* tier0) {
    *p = Open(1);
    ASSERT_NE(*p, nullptr);
    Save(**p, 1, State(10));
    Save(**p, 2, State(11));
    auto opened = OpenBackend(Tier(0), false);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    *tier0 = std::move(opened).value();
  }

  std::string dir_;
};

// 8 MiB of frozen weights, a 3 MiB + 17 B odd-sized item, and a 2 MiB
// adapter that changes every step.
Items State(uint32_t adapter_seed) {
  return {{"frozen", Bytes(8 << 20, 1)}, {"odd", Bytes((3 << 20) + 17, 2)}, {"adapter", Bytes(2 << 20, adapter_seed)}};
}

TEST_F(IncrementalTest, UnchangedChunksAreReferencedNotWritten) {
  auto p = Open(1);
  const Items s1 = State(100), s2 = State(200);
  SaveStats full = Save(*p, 1, s1);
  EXPECT_EQ(full.referenced_bytes, 0u);
  SaveStats inc = Save(*p, 2, s2);
  const uint64_t unchanged = s1.at("frozen").size() + s1.at("odd").size();
  EXPECT_EQ(inc.referenced_bytes, unchanged);
  EXPECT_EQ(inc.base_step, 1u);
  EXPECT_EQ(inc.bytes, full.bytes);
  // Only the adapter's bytes were written for step 2 (padded to 4 KiB).
  EXPECT_LE(DiskBytes(DataDir(0, 2)), s2.at("adapter").size() + 4096);
  ExpectIntact(p->tier(0), 1, s1);
  ExpectIntact(p->tier(0), 2, s2);
  auto list = p->tier(0).List("m", false);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].referenced_bytes, unchanged);
  // A full save writes everything again.
  SaveStats again = Save(*p, 3, s2, /*incremental=*/false);
  EXPECT_EQ(again.referenced_bytes, 0u);
  EXPECT_GE(DiskBytes(DataDir(0, 3)), again.bytes);
  // And a step after it builds on it (the newest), not on step 1.
  SaveStats next = Save(*p, 4, State(300));
  EXPECT_EQ(next.base_step, 3u);
}

TEST_F(IncrementalTest, TwoItemsSharingOneBaseChunkRestoreAndDrain) {
  auto p = Open(1);
  const std::string block = Bytes(1 << 20, 9);
  Save(*p, 1, {{"a", block}});
  const Items s2{{"b", block}, {"c", block}, {"d", Bytes(5000, 4)}};
  SaveStats st = Save(*p, 2, s2);
  EXPECT_EQ(st.referenced_bytes, 2u << 20);
  ExpectIntact(p->tier(0), 2, s2);
  auto dst = Store::Open(Tier(1), StoreOptions{.create_if_missing = true});
  ASSERT_TRUE(dst.ok());
  ASSERT_TRUE(CopyCommittedStep(p->tier(0).backend(), (*dst)->backend(), "m", 2, CopyControl{}).ok());
  ExpectIntact(**dst, 2, s2);
}

TEST_F(IncrementalTest, RemovingTheBaseKeepsWhatLaterStepsReference) {
  auto p = Open(1);
  const Items s1 = State(100), s2 = State(200), s3 = State(300);
  Save(*p, 1, s1);
  Save(*p, 2, s2);
  Save(*p, 3, s3);
  Store& store = p->tier(0);
  const uint64_t before = DiskBytes(DataDir(0, 1));
  ASSERT_TRUE(store.Remove({"m", 1}).ok());
  // Step 1's objects holding frozen and odd chunks stay for 2 and 3 (whole
  // objects: the one its adapter shares with frozen bytes too).
  EXPECT_LE(DiskBytes(DataDir(0, 1)), before);
  EXPECT_GE(DiskBytes(DataDir(0, 1)), 11u << 20);
  EXPECT_FALSE(store.OpenCheckpoint("m", 1).ok());
  ExpectIntact(store, 2, s2);
  ExpectIntact(store, 3, s3);
  auto gc = store.CollectGarbage(0);
  ASSERT_TRUE(gc.ok());
  ExpectIntact(store, 3, s3);
  ASSERT_TRUE(store.Remove({"m", 2}).ok());
  ExpectIntact(store, 3, s3);
  // The last step that needs them goes: so do the shared objects.
  ASSERT_TRUE(store.Remove({"m", 3}).ok());
  EXPECT_EQ(DiskBytes(Tier(0) + "/ckpt/m"), 0u);
}

TEST_F(IncrementalTest, RetentionKeepsSharedObjects) {
  auto p = Open(1, /*keep_last0=*/2);
  Items last;
  for (uint32_t step = 1; step <= 6; ++step) {
    last = State(100 + step);
    Save(*p, step, last);
  }
  // Retention runs just after the commit Wait() returned on.
  Result<std::vector<CheckpointInfo>> list = std::vector<CheckpointInfo>();
  for (int i = 0; i < 500; ++i) {
    list = p->tier(0).List("m", false);
    ASSERT_TRUE(list.ok());
    if (list->size() == 2) break;
    usleep(10'000);
  }
  ASSERT_EQ(list->size(), 2u);
  ExpectIntact(p->tier(0), 5, State(105));
  ExpectIntact(p->tier(0), 6, last);
  // Frozen bytes are stored once, in step 1's objects (with step 1's
  // adapter, which shares an object with them); one adapter per kept step.
  // Steps 2-4 left nothing behind.
  EXPECT_LE(DiskBytes(Tier(0) + "/ckpt/m"), (13u << 20) + 2 * (2u << 20) + 64 * 1024);
}

TEST_F(IncrementalTest, DrainsCopyOnlyWhatTheTierLacks) {
  auto p = Open(2);
  const Items s1 = State(100), s2 = State(200);
  Save(*p, 1, s1);
  Save(*p, 2, s2);
  // Tier 1 had step 1 already: step 2's drain wrote only its adapter.
  EXPECT_LE(DiskBytes(DataDir(1, 2)), s2.at("adapter").size() + 4096);
  ExpectIntact(p->tier(1), 1, s1);
  ExpectIntact(p->tier(1), 2, s2);
  // A third tier that never saw step 1 gets the shared objects too.
  auto lone = Store::Open(dir_ + "/lone", StoreOptions{.create_if_missing = true});
  ASSERT_TRUE(lone.ok());
  ASSERT_TRUE(CopyCommittedStep(p->tier(0).backend(), (*lone)->backend(), "m", 2, CopyControl{}).ok());
  ExpectIntact(**lone, 2, s2);
  auto gc = (*lone)->CollectGarbage(0);
  ASSERT_TRUE(gc.ok());
  ExpectIntact(**lone, 2, s2);
}

TEST_F(IncrementalTest, AHashCollisionIsCaughtByTheCrc) {
  testing::UseCollidingContentHashForTesting(true);
  auto p = Open(1);
  const Items s1 = State(100);
  Items s2 = {{"frozen", Bytes(8 << 20, 11)}, {"odd", Bytes((3 << 20) + 17, 12)}, {"adapter", Bytes(2 << 20, 13)}};
  Save(*p, 1, s1);
  // Every chunk of step 2 has the hash of a chunk of step 1 of its length;
  // none has its CRC, so none is referenced.
  SaveStats st = Save(*p, 2, s2);
  EXPECT_EQ(st.referenced_bytes, 0u);
  ExpectIntact(p->tier(0), 2, s2);
  // Equal chunks (same CRC too) are still shared.
  // (The index holds one chunk per colliding hash and length, so fewer are
  // found than without the stub.)
  SaveStats same = Save(*p, 3, s2);
  EXPECT_GT(same.referenced_bytes, 0u);
  ExpectIntact(p->tier(0), 3, s2);
}

TEST_F(IncrementalTest, ABadSharedChunkNamesBothStepsAndOneRepairHealsBoth) {
  auto p = Open(2);
  const Items s1 = State(100), s2 = State(200);
  Save(*p, 1, s1);
  Save(*p, 2, s2);
  // Flip a byte of a frozen chunk step 2 shares (it lies in step 1's object).
  auto loaded = LoadCheckpoint(p->tier(0).backend(), "m", 2);
  ASSERT_TRUE(loaded.ok());
  const Manifest& m = loaded->manifests[0];
  const ManifestItem* frozen = nullptr;
  for (const auto& it : m.items) frozen = it.key == "frozen" ? &it : frozen;
  ASSERT_NE(frozen, nullptr);
  const ChunkRef& shared = frozen->chunks[1];
  ASSERT_TRUE(m.IsReference(shared.object));
  const std::string victim = Tier(0) + "/" + m.objects[shared.object].name;
  int fd = open(victim.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c;
  const off_t at = static_cast<off_t>(shared.offset + 100);
  ASSERT_EQ(pread(fd, &c, 1, at), 1);
  c ^= 0x40;
  ASSERT_EQ(pwrite(fd, &c, 1, at), 1);
  close(fd);
  auto v = p->tier(0).Verify("m", 2);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->bad.size(), 1u);
  EXPECT_NE(v->bad[0].reason.find("step 1"), std::string::npos) << v->bad[0].reason;
  EXPECT_NE(v->bad[0].object.find("/00000000000000000001/"), std::string::npos) << v->bad[0].object;
  ScrubOptions so;
  auto report = Scrub({&p->tier(0).backend(), &p->tier(1).backend()}, so);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ExpectIntact(p->tier(0), 1, s1);
  ExpectIntact(p->tier(0), 2, s2);
}

TEST_F(IncrementalTest, DrainingABaseAfterItsLaterStepLeavesTheSharedObjectsAlone) {
  auto p = Open(1);
  const Items s1 = State(100), s2 = State(200);
  Save(*p, 1, s1);
  Save(*p, 2, s2);
  auto dst = Store::Open(Tier(1), StoreOptions{.create_if_missing = true});
  ASSERT_TRUE(dst.ok());
  // Step 2 first (as when step 1's drain failed), then step 1.
  ASSERT_TRUE(CopyCommittedStep(p->tier(0).backend(), (*dst)->backend(), "m", 2, CopyControl{}).ok());
  auto inodes = [&] {
    std::map<std::string, ino_t> out;
    auto listed = (*dst)->backend().List(StepPrefix("m", 1) + "data/");
    EXPECT_TRUE(listed.ok());
    for (const auto& o : *listed) {
      struct stat st;
      EXPECT_EQ(stat((Tier(1) + "/" + o.name).c_str(), &st), 0);
      out[o.name] = st.st_ino;
    }
    return out;
  };
  const auto before = inodes();
  ASSERT_FALSE(before.empty());
  ASSERT_TRUE(CopyCommittedStep(p->tier(0).backend(), (*dst)->backend(), "m", 1, CopyControl{}).ok());
  // The objects step 2 already shares there were not rewritten.
  const auto after = inodes();
  for (const auto& [name, ino] : before) EXPECT_EQ(after.at(name), ino) << name;
  ExpectIntact(**dst, 1, s1);
  ExpectIntact(**dst, 2, s2);
}

TEST_F(IncrementalTest, AStepNumberSavedAgainAfterRemovalSharesWhatItsFolderKept) {
  auto p = Open(1);
  Save(*p, 5, State(100));
  Save(*p, 6, State(200));
  ASSERT_TRUE(p->tier(0).Remove({"m", 5}).ok());  // its objects stay for step 6
  const Items again = State(300);
  SaveStats st = Save(*p, 5, again);  // base: step 6, whose chunks lie in step 5's folder
  EXPECT_EQ(st.base_step, 6u);
  EXPECT_GT(st.referenced_bytes, 0u);
  auto list = p->tier(0).List("m", false);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].referenced_bytes, st.referenced_bytes) << "the kept objects count as shared";
  ExpectIntact(p->tier(0), 5, again);
  auto dst = Store::Open(Tier(1), StoreOptions{.create_if_missing = true});
  ASSERT_TRUE(dst.ok());
  ASSERT_TRUE(CopyCommittedStep(p->tier(0).backend(), (*dst)->backend(), "m", 5, CopyControl{}).ok());
  ExpectIntact(**dst, 5, again);
}

// The latest-step hint (LatestHintObject): a save records its step there
// after committing, and the next incremental save finds its base by it,
// without a listing (on RADOS a walk of the whole pool, seconds past a slow
// OSD); a hint naming no committed step falls back to the listing, and rm
// and gc take a hint that names nothing.
TEST_F(IncrementalTest, TheLatestHintFindsTheBaseWithoutAListing) {
  auto p = Open(1);
  ASSERT_NE(p, nullptr);
  Save(*p, 1, State(10));
  Save(*p, 2, State(11));
  const std::string hint_file = Tier(0) + "/" + LatestHintObject("m");
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  // The step, then its commit record.
  EXPECT_EQ(read(hint_file).substr(0, 2), "2\n");
  struct CountingLists : BackendWrapper {
    using BackendWrapper::BackendWrapper;
    int lists = 0;
    Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
      ++lists;
      return BackendWrapper::List(prefix);
    }
  };
  auto opened = OpenBackend(Tier(0), false);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  CountingLists counted(**opened);
  auto base = ReferenceBase(counted, "m", 3, 0, "0123456789abcdef");
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  ASSERT_TRUE(base->has_value());
  EXPECT_EQ((*base)->step(), 2u);
  EXPECT_EQ(counted.lists, 0);
  // A hint naming a step never committed: the name's steps, listed, give
  // step 2. (A file store lists a name's children in one readdir
  // (ChildListing), so no walk at all; a store without it walks once.)
  const int walks = (*opened)->caps().child_listing != nullptr ? 0 : 1;
  ASSERT_TRUE((*opened)->Remove(LatestHintObject("m")).ok());
  ASSERT_TRUE((*opened)->PublishIfAbsent(LatestHintObject("m"), "7").ok());
  base = ReferenceBase(counted, "m", 4, 0, "0123456789abcdee");
  ASSERT_TRUE(base.ok() && base->has_value()) << base.status().ToString();
  EXPECT_EQ((*base)->step(), 2u);
  EXPECT_EQ(counted.lists, walks);
  // Garbage: the same.
  ASSERT_TRUE((*opened)->Remove(LatestHintObject("m")).ok());
  ASSERT_TRUE((*opened)->PublishIfAbsent(LatestHintObject("m"), "2x").ok());
  base = ReferenceBase(counted, "m", 5, 0, "0123456789abcded");
  ASSERT_TRUE(base.ok() && base->has_value());
  EXPECT_EQ((*base)->step(), 2u);
  EXPECT_EQ(counted.lists, 2 * walks);
  // gc takes a hint that names no committed step...
  auto store = Store::Open(Tier(0), StoreOptions{});
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->CollectGarbage(0).ok());
  struct stat st;
  EXPECT_NE(::stat(hint_file.c_str(), &st), 0) << "a garbage hint survived gc";
  // ...and rm the hint that names the step it removes.
  Save(*p, 3, State(12));
  EXPECT_EQ(read(hint_file).substr(0, 2), "3\n");
  ASSERT_TRUE((*store)->CollectGarbage(0).ok());
  EXPECT_EQ(read(hint_file).substr(0, 2), "3\n") << "gc took a good hint";
  ASSERT_TRUE((*store)->Remove({"m", 3}).ok());
  EXPECT_NE(::stat(hint_file.c_str(), &st), 0) << "rm left a hint naming the step it removed";
  ExpectIntact(**store, 2, State(11));
}

// The hint carries the step's commit record: the next save takes it for its
// first look at the record and reads the record once, after its refs record
// is published, instead of twice (each read waits in a slow OSD's queue
// where the record's placement group is one). The read after still decides:
// a hinted record that is not the committed one is not built upon.
TEST_F(IncrementalTest, TheHintsCommitRecordSparesTheFirstReadAndTheSecondStillDecides) {
  std::unique_ptr<Pipeline> p;
  std::unique_ptr<Backend> opened;
  ASSERT_NO_FATAL_FAILURE(SaveTwoSteps(&p, &opened));
  Backend& raw = *opened;
  struct CountingRecordReads : BackendWrapper {
    using BackendWrapper::BackendWrapper;
    std::map<std::string, int> reads;
    Result<std::string> ReadSmall(const std::string& name) override {
      ++reads[name];
      return BackendWrapper::ReadSmall(name);
    }
  };
  const std::string hint = LatestHintObject("m");
  auto hint_bytes = raw.ReadSmall(hint);
  ASSERT_TRUE(hint_bytes.ok()) << hint_bytes.status().ToString();
  // The record is at its claim's seal (format/commit_record.h).
  auto read = ReadCommitRecord(raw, "m", 2);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  const std::string seal = read->seal;
  const std::string committed = read->bytes;
  ASSERT_FALSE(seal.empty());
  EXPECT_EQ(*hint_bytes, "2\n" + seal + "\n" + committed) << "the hint does not carry step 2's commit record";
  auto set_hint = [&](const std::string& bytes) {
    Status removed = raw.Remove(hint);
    ASSERT_TRUE(removed.ok() || removed.IsNotFound()) << removed.ToString();
    ASSERT_TRUE(raw.PublishIfAbsent(hint, bytes).ok());
  };
  const char* writers[] = {"0123456789abcde0", "0123456789abcde1", "0123456789abcde2", "0123456789abcde3"};
  {
    CountingRecordReads counted(raw);
    auto base = ReferenceBase(counted, "m", 3, 0, writers[0]);
    ASSERT_TRUE(base.ok() && base->has_value()) << base.status().ToString();
    EXPECT_EQ((*base)->step(), 2u);
    EXPECT_EQ(counted.reads[CommitObject("m", 2)], 0) << "the claim was read although the hint names the seal";
    EXPECT_EQ(counted.reads[seal], 1) << "the hinted record was read before the refs record";
  }
  {  // A hint of an older writer (the step alone): read before and after.
    set_hint("2");
    CountingRecordReads counted(raw);
    auto base = ReferenceBase(counted, "m", 3, 0, writers[1]);
    ASSERT_TRUE(base.ok() && base->has_value()) << base.status().ToString();
    EXPECT_EQ((*base)->step(), 2u);
    EXPECT_EQ(counted.reads[seal], 2);
  }
  {  // A record of another step under step 2's number: not taken, read instead.
    auto step1 = ReadCommitRecord(raw, "m", 1);
    ASSERT_TRUE(step1.ok());
    set_hint("2\n" + step1->bytes);
    CountingRecordReads counted(raw);
    auto base = ReferenceBase(counted, "m", 3, 0, writers[2]);
    ASSERT_TRUE(base.ok() && base->has_value()) << base.status().ToString();
    EXPECT_EQ((*base)->step(), 2u);
    EXPECT_EQ(counted.reads[seal], 2);
  }
  // The hinted record is no longer the committed one (here the record was
  // published again with another creation time): the read after the refs
  // record decides, and step 2 is not built upon.
  set_hint(*hint_bytes);
  auto rec = DecodeCommitRecord(committed, "step 2's record");
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  rec->created_unix_ms += 1;
  ASSERT_TRUE(raw.Remove(seal).ok());
  ASSERT_TRUE(raw.PublishIfAbsent(seal, EncodeCommitRecord(*rec)).ok());
  {
    auto base = ReferenceBase(raw, "m", 3, 0, writers[3]);
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    EXPECT_FALSE(base->has_value()) << "built upon a hinted record that is not the committed one";
  }
  // No record at all (a removal interrupted between the record and the
  // hint; rm takes the seal before the claim): the same, and the next save
  // writes in full.
  ASSERT_TRUE(raw.Remove(seal).ok());
  ASSERT_TRUE(raw.Remove(CommitObject("m", 2)).ok());
  {
    auto base = ReferenceBase(raw, "m", 3, 0, "0123456789abcde4");
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    EXPECT_FALSE(base->has_value()) << "built upon a hinted step without a commit record";
  }
  const SaveStats third = Save(*p, 3, State(11));
  EXPECT_EQ(third.referenced_bytes, 0u) << "the stale hint's step was built upon";
  auto store = Store::Open(Tier(0), StoreOptions{});
  ASSERT_TRUE(store.ok());
  ExpectIntact(**store, 3, State(11));
}

TEST(LatestHintBytes, AStepThenOptionallyASealAndARecord) {
  auto hint = ParseLatestHint("12");
  ASSERT_TRUE(hint.has_value());
  EXPECT_EQ(hint->step, 12u);
  EXPECT_EQ(hint->record, "");
  hint = ParseLatestHint(std::string("12\nSLUICECR\0\n\x01", 14));
  ASSERT_TRUE(hint.has_value());
  EXPECT_EQ(hint->step, 12u);
  EXPECT_EQ(hint->record, std::string("SLUICECR\0\n\x01", 11));
  EXPECT_EQ(ParseHintedStep("12\nanything"), std::optional<uint64_t>(12));
  // A record published at a claim's seal: the seal's name comes first.
  hint = ParseLatestHint(std::string("12\nckpt/m/12/seal/ab-00\nSLUICECR\0\n\x01", 35));
  ASSERT_TRUE(hint.has_value());
  EXPECT_EQ(hint->seal, "ckpt/m/12/seal/ab-00");
  EXPECT_EQ(hint->record, std::string("SLUICECR\0\n\x01", 11));
  hint = ParseLatestHint(std::string("12\nSLUICECR\0\n\x01", 14));
  ASSERT_TRUE(hint.has_value());
  EXPECT_EQ(hint->seal, "") << "a record's newline taken for a seal's end";
  for (const char* bad : {"", "\n", "\nSLUICECR", "12x", "x12\n", "-1", " 12", "123456789012345678901"}) {
    EXPECT_FALSE(ParseLatestHint(bad).has_value()) << "'" << bad << "'";
  }
}

// The hint's fixed name may fall in a slow OSD's placement group: the
// first slot that is not slow is written instead, and read first, so that
// neither a save nor the next one's base lookup waits in that OSD's queue.
TEST_F(IncrementalTest, LatestHintSlotsKeepAwayFromASlowPlacement) {
  std::unique_ptr<Pipeline> p;
  std::unique_ptr<Backend> opened;
  ASSERT_NO_FATAL_FAILURE(SaveTwoSteps(&p, &opened));
  Backend& raw = *opened;
  // A slot's step ("(none)" if it holds no hint), without the record.
  auto slot = [&](uint32_t k) -> std::string {
    auto bytes = raw.ReadSmall(LatestHintObject("m", k));
    return bytes.ok() ? bytes->substr(0, bytes->find('\n')) : "(none)";
  };
  auto steps = [](const std::vector<LatestHint>& hints) {
    std::vector<uint64_t> out;
    for (const auto& h : hints) out.push_back(h.step);
    return out;
  };
  EXPECT_EQ(slot(0), "2");
  EXPECT_EQ(slot(1), "(none)") << "slot 0 was not slow: only it is written";
  // Slot 0 names step 1 (stale), and slots 0 and 1 are slow now: step 2 goes
  // to slot 2, and only there.
  ASSERT_TRUE(raw.Remove(LatestHintObject("m", 0)).ok());
  ASSERT_TRUE(raw.PublishIfAbsent(LatestHintObject("m", 0), "1").ok());
  const std::string slot0 = LatestHintObject("m", 0), slot1 = LatestHintObject("m", 1);
  SlowNames slow01(raw, [&](const std::string& n) { return n == slot0 || n == slot1; });
  PublishLatestHint(slow01, "m", 2);
  EXPECT_EQ(slot(0), "1");
  EXPECT_EQ(slot(1), "(none)");
  EXPECT_EQ(slot(2), "2");
  EXPECT_EQ(slot(3), "(none)");
  // A reader asks the slot a save would write first; the others only when
  // asked for them; a store without placements has slot 0 alone.
  EXPECT_EQ(steps(ReadLatestHints(slow01, "m")), (std::vector<uint64_t>{2}));
  EXPECT_EQ(steps(ReadLatestHints(slow01, "m", /*other_slots=*/true)), (std::vector<uint64_t>{1}));
  SlowNames none(raw, [](const std::string&) { return false; });
  EXPECT_EQ(steps(ReadLatestHints(none, "m")), (std::vector<uint64_t>{1}));
  EXPECT_EQ(steps(ReadLatestHints(none, "m", true)), (std::vector<uint64_t>{2}));
  EXPECT_EQ(steps(ReadLatestHints(raw, "m")), (std::vector<uint64_t>{1}));
  EXPECT_TRUE(ReadLatestHints(raw, "m", true).empty());
  // The base is found by the slot, without a listing.
  auto base = ReferenceBase(slow01, "m", 3, 0, "0123456789abcdef");
  ASSERT_TRUE(base.ok() && base->has_value()) << base.status().ToString();
  EXPECT_EQ((*base)->step(), 2u);
  EXPECT_EQ(slow01.lists, 0);
  // Slot 0 written before it turned slow, the others empty: the other
  // slots are read before a listing.
  for (uint32_t k = 0; k < kLatestHintSlots; ++k) {
    Status removed = raw.Remove(LatestHintObject("m", k));
    ASSERT_TRUE(removed.ok() || removed.IsNotFound()) << removed.ToString();
  }
  ASSERT_TRUE(raw.PublishIfAbsent(LatestHintObject("m", 0), "2").ok());
  base = ReferenceBase(slow01, "m", 4, 0, "0123456789abcdee");
  ASSERT_TRUE(base.ok() && base->has_value()) << base.status().ToString();
  EXPECT_EQ((*base)->step(), 2u);
  EXPECT_EQ(slow01.lists, 0);
  // Every slot slow: slot 0 after all.
  SlowNames all(raw, [](const std::string&) { return true; });
  ASSERT_TRUE(raw.Remove(LatestHintObject("m", 0)).ok());
  PublishLatestHint(all, "m", 1);
  EXPECT_EQ(slot(0), "1");
  EXPECT_EQ(steps(ReadLatestHints(all, "m")), (std::vector<uint64_t>{1}));
  // rm takes every slot naming the step it removes; gc every slot naming
  // no committed step.
  ASSERT_TRUE(raw.PublishIfAbsent(LatestHintObject("m", 1), "2").ok());
  ASSERT_TRUE(raw.PublishIfAbsent(LatestHintObject("m", 7), "9").ok());
  auto store = Store::Open(Tier(0), StoreOptions{});
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->CollectGarbage(0).ok());
  EXPECT_EQ(slot(7), "(none)") << "gc kept a slot naming no committed step";
  EXPECT_EQ(slot(1), "2");
  EXPECT_EQ(slot(0), "1");
  ASSERT_TRUE((*store)->Remove({"m", 2}).ok());
  EXPECT_EQ(slot(1), "(none)") << "rm left a slot naming the step it removed";
  EXPECT_EQ(slot(0), "1");
  ExpectIntact(**store, 1, State(10));
}

TEST(LatestHintNames, SlotsAreRecognisedAndOthersAreNot) {
  EXPECT_EQ(LatestHintObject("m"), "ckpt/m/LATEST");
  EXPECT_EQ(LatestHintObject("m", 2), "ckpt/m/LATEST.2");
  EXPECT_EQ(NameOfLatestHint("ckpt/m/LATEST"), std::optional<std::string>("m"));
  EXPECT_EQ(NameOfLatestHint("ckpt/m/LATEST.1"), std::optional<std::string>("m"));
  EXPECT_EQ(NameOfLatestHint("ckpt/m/LATEST.15"), std::optional<std::string>("m"));
  EXPECT_EQ(NameOfLatestHint("ckpt/m/LATEST.16"), std::nullopt);
  EXPECT_EQ(NameOfLatestHint("ckpt/m/LATEST.0"), std::nullopt);
  EXPECT_EQ(NameOfLatestHint("ckpt//LATEST"), std::nullopt);
  EXPECT_EQ(NameOfLatestHint("ckpt/m/00000000000000000001/LATEST"), std::nullopt);
  EXPECT_EQ(NameOfLatestHint("other/m/LATEST"), std::nullopt);
  EXPECT_EQ(ParseHintedStep("12"), std::optional<uint64_t>(12));
  EXPECT_EQ(ParseHintedStep(""), std::nullopt);
  EXPECT_EQ(ParseHintedStep("1a"), std::nullopt);
  EXPECT_EQ(ParseHintedStep("-1"), std::nullopt);
  EXPECT_EQ(ParseHintedStep(std::string(21, '1')), std::nullopt);
}

// A writer id names its lock, references and manifest records, written one
// at a time: it is chosen so that none falls where writes are slow.
TEST_F(IncrementalTest, WriterIdsKeepTheirRecordsAwayFromSlowPlacements) {
  auto opened = OpenBackend(Tier(0), true);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  // Half of all ids put every record in a slow place, and any one record of
  // a quarter of the rest.
  auto slow = [](const std::string& name) {
    auto parsed = ParseObjectName(name);
    const std::string id = parsed ? WriterOfObject(parsed->rest) : "";
    return id.size() != 16 || id[0] < '8' || (id[1] < '4' && name.find(".refs") != std::string::npos);
  };
  SlowNames store(**opened, slow);
  for (int i = 0; i < 50; ++i) {
    const std::string id = NewWriterIdAwayFromSlow(store, "m", 7, 3u);
    EXPECT_FALSE(slow(WriterLockObject("m", 7, id))) << id;
    EXPECT_FALSE(slow(WriterRefsObject("m", 7, id))) << id;
    EXPECT_FALSE(slow(ManifestObject("m", 7, 3, id))) << id;
  }
  // Without placements: any id.
  EXPECT_EQ(NewWriterIdAwayFromSlow(**opened, "m", 7, 3u).size(), 16u);
}

}  // namespace
}  // namespace sluice
