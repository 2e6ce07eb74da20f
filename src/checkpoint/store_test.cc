// Store-level behaviour through the public API, on a real filesystem.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "format/commit_record.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "io/crc32c.h"
#include "sluice/backend_wrapper.h"
#include "sluice/store.h"
#include "checkpoint/store_test_fixture.h"

namespace sluice {
namespace {

TEST_F(StoreTest, RoundTripsItemsOfEverySizeAroundChunkAndIoBoundaries) {
  StoreOptions o;
  o.chunk_bytes = 64 << 10;
  o.io_bytes = 16 << 10;  // buffers smaller than chunks
  o.object_bytes = 1 << 20;  // force several data objects
  Reopen(o);
  std::map<std::string, std::string> items;
  size_t sizes[] = {0, 1, 4095, 4096, 4097, (64 << 10) - 1, 64 << 10, (64 << 10) + 1, 1 << 20, (3 << 20) + 17};
  uint32_t seed = 0;
  for (size_t s : sizes) items["dir/item-" + std::to_string(s)] = Bytes(s, ++seed);
  Save("sizes", 1, items);
  EXPECT_EQ(Load("sizes", 1), items);
  EXPECT_GT(DataFiles().size(), 3u) << "object rollover should have produced several data objects";
}

// A source that delivers its bytes in pieces of a given pattern of sizes
// (each capped by what is asked), or, `overdeliver`, claims one byte more
// than it was asked for.
class PatternSource final : public ItemSource {
 public:
  PatternSource(const std::string& bytes, std::vector<size_t> pieces, bool overdeliver = false)
      : bytes_(bytes), pieces_(std::move(pieces)), overdeliver_(overdeliver) {}
  Result<size_t> Read(void* buf, size_t len) override {
    if (overdeliver_) return len + 1;
    size_t n = pieces_.empty() ? len : pieces_[next_++ % pieces_.size()];
    n = std::min({n, len, bytes_.size() - pos_});
    std::memcpy(buf, bytes_.data() + pos_, n);
    pos_ += n;
    return n;
  }

 private:
  const std::string& bytes_;
  std::vector<size_t> pieces_;
  bool overdeliver_;
  size_t pos_ = 0;
  size_t next_ = 0;
};

// Whatever the mix of piece sizes a source delivers (whole buffers, odd
// sizes, pieces straddling chunk and buffer boundaries), memory items and
// object rollovers in mid-stream, every byte lands where it belongs, at any
// queue depth and on both I/O paths (qd=1: a write in flight too many is
// refused by the thread engine).
TEST_F(StoreTest, SourcesOfAnyPieceSizeRoundTripAcrossRollovers) {
  for (const char* query : {"direct=off", "io=threads&direct=off&qd=1", "direct=off&qd=3", "qd=2"}) {
    SCOPED_TRACE(query);
    StoreOptions o;
    o.io_bytes = 2 << 20;
    o.object_bytes = 9 << 20;  // rollovers in mid-stream
    Reopen(o, query);
    std::map<std::string, std::string> items = {
        {"big", Bytes((13 << 20) + 5, 1)},       {"tiny", Bytes(3, 2)},
        {"pieces", Bytes((11 << 20) + 999, 3)},  {"odd", Bytes(7 << 20, 4)},
        {"whole", Bytes((5 << 20) + 1, 5)},      {"after", Bytes((6 << 20) + 77, 6)},
    };
    const std::string name = "pieces-" + std::to_string(std::hash<std::string>()(query) % 100000);
    auto w = store_->BeginCheckpoint({name, 1}, 0, 1);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    auto add = [&](const std::string& key, ItemSource* src) {
      const std::string& v = items[key];
      Status st = src ? (*w)->AddItem(key, "meta:" + key, v.size(), *src)
                      : (*w)->AddItem(key, "meta:" + key, v.data(), v.size());
      ASSERT_TRUE(st.ok()) << key << ": " << st.ToString();
    };
    PatternSource big(items["big"], {});
    add("big", &big);
    add("tiny", nullptr);
    PatternSource pieces(items["pieces"], {100, 3 << 20, 1 << 20, (1 << 20) - 1, 4096});
    add("pieces", &pieces);
    PatternSource odd(items["odd"], {4097, 1, (2 << 20) - 3});
    add("odd", &odd);
    add("whole", nullptr);
    PatternSource after(items["after"], {SIZE_MAX});
    add("after", &after);
    auto stats = (*w)->Commit();
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_EQ(Load(name, 1), items);
    auto report = store_->Verify(name, 1);
    ASSERT_TRUE(report.ok());
    EXPECT_TRUE(report->ok());
  }
}

// A writer's memory is quiet again when Commit returns, whatever Commit
// returns: no write may still be in flight, not after a failed AddItem, nor
// when another writer committed the step first.
TEST_F(StoreTest, NoWriteOutlivesCommitEvenWhenItFails) {
  CountingBackend::Counts counts;
  std::atomic<int>& in_flight = counts.writes_in_flight;
  auto b = OpenBackend(dir_ + "?direct=off", true);
  ASSERT_TRUE(b.ok());
  StoreOptions o;
  o.io_bytes = 2 << 20;
  auto counted = Store::Open(std::unique_ptr<Backend>(new CountingBackend(std::move(b).value(), &counts)), o);
  const std::string v = Bytes(24 << 20, 7);
  {  // another writer commits the step first
    auto loser = counted->BeginCheckpoint({"outlive", 1}, 0, 1);
    ASSERT_TRUE(loser.ok());
    PatternSource src(v, {});
    ASSERT_TRUE((*loser)->AddItem("x", "", v.size(), src).ok());
    EXPECT_GT(in_flight.load(), 0) << "the test needs writes still in flight here";
    {
      auto winner = counted->BeginCheckpoint({"outlive", 1}, 0, 1);
      ASSERT_TRUE(winner.ok());
      ASSERT_TRUE((*winner)->AddItem("y", "", "1", 1).ok());
      ASSERT_TRUE((*winner)->Commit().ok());
    }
    auto lost = (*loser)->Commit();
    EXPECT_TRUE(lost.status().IsAlreadyExists()) << lost.status().ToString();
    EXPECT_EQ(in_flight.load(), 0) << "writes still in flight after Commit returned";
  }
  {  // an item fails midway, then Commit returns that error
    auto w = counted->BeginCheckpoint({"outlive", 2}, 0, 1);
    ASSERT_TRUE(w.ok());
    PatternSource src(v, {});
    ASSERT_TRUE((*w)->AddItem("x", "", v.size(), src).ok());
    EXPECT_GT(in_flight.load(), 0) << "the test needs writes still in flight here";
    PatternSource liar(v, {}, /*overdeliver=*/true);
    EXPECT_FALSE((*w)->AddItem("z", "", v.size(), liar).ok());
    EXPECT_FALSE((*w)->Commit().ok());
    EXPECT_EQ(in_flight.load(), 0) << "writes still in flight after Commit returned";
  }
}

TEST_F(StoreTest, ASourceDeliveringMoreThanAskedIsRefused) {
  std::string v = Bytes(3 << 20, 1);
  PatternSource liar(v, {}, /*overdeliver=*/true);
  auto w = store_->BeginCheckpoint({"liar", 1}, 0, 1);
  ASSERT_TRUE(w.ok());
  Status st = (*w)->AddItem("x", "", v.size(), liar);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
}

// A whole-checkpoint read is one stream over every data object (reads stay
// in flight across object boundaries): at every queue depth each byte lands
// once, and a missing object in the middle fails the read naming it, after
// the objects before it were handed out whole.
TEST_F(StoreTest, ReadAllStreamsAcrossObjectsAndStopsAtAMissingOne) {
  for (const char* q : {"qd=1", "qd=3", ""}) {
    StoreOptions o;
    o.chunk_bytes = 64 << 10;
    o.io_bytes = 128 << 10;
    o.object_bytes = 1 << 20;
    Reopen(o, q);
    std::map<std::string, std::string> items;
    for (int i = 0; i < 6; ++i) items["i" + std::to_string(i)] = Bytes((700 << 10) + i * 4099, i + 1);
    std::string name = std::string("across") + (q[0] ? q + 3 : "def");
    Save(name, 1, items);
    EXPECT_EQ(Load(name, 1), items) << q;
    std::vector<std::string> data;
    for (const auto& f : DataFiles()) {
      if (f.find(name + "/") != std::string::npos) data.push_back(f);
    }
    ASSERT_GE(data.size(), 4u) << q;
    std::sort(data.begin(), data.end());
    ASSERT_EQ(unlink((dir_ + "/" + data[2]).c_str()), 0);
    auto r = store_->OpenCheckpoint(name, 1);
    ASSERT_TRUE(r.ok());
    uint64_t delivered = 0;
    Status st = (*r)->ReadAll(std::nullopt, [&](const ItemInfo&, uint64_t, const void*, size_t n) {
      delivered += n;
      return Status::OK();
    });
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << q << ": " << st.ToString();
    EXPECT_NE(st.message().find("object missing"), std::string::npos) << st.ToString();
    EXPECT_GE(delivered, 2u * (1 << 20) - (64 << 10) * 2) << q << ": the first two objects' chunks";
  }
}

TEST_F(StoreTest, RangeReadsReturnExactBytesAnywhere) {
  StoreOptions o;
  o.chunk_bytes = 8192;
  o.io_bytes = 4096;
  Reopen(o);
  const std::string big = Bytes(1 << 20, 3);
  Save("r", 5, {{"big", big}, {"small", "xyz"}});
  auto r = store_->OpenCheckpoint("r", 5);
  ASSERT_TRUE(r.ok());
  std::mt19937 rng(11);
  for (int i = 0; i < 200; ++i) {
    uint64_t off = rng() % big.size();
    uint64_t len = rng() % (big.size() - off + 1);
    std::string out(len, '\0');
    Status st = (*r)->ReadRange("big", off, out.data(), len);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(out, big.substr(off, len)) << off << "+" << len;
  }
  char c;
  EXPECT_EQ((*r)->ReadRange("big", big.size(), &c, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*r)->ReadRange("big", UINT64_MAX, &c, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*r)->ReadRange("absent", 0, &c, 1).IsNotFound());
}

TEST_F(StoreTest, ReadIntoRestoresExactBytesIntoFreshAndUsedMemory) {
  StoreOptions o;
  o.chunk_bytes = 64 << 10;
  o.io_bytes = 16 << 10;
  o.object_bytes = 1 << 20;  // the big item spans objects
  Reopen(o);
  const std::string big = Bytes((6 << 20) + 123, 4), small = Bytes(77, 5);
  Save("m", 1, {{"big", big}, {"small", small}, {"skipped", "not asked for"}});
  auto r = store_->OpenCheckpoint("m", 1);
  ASSERT_TRUE(r.ok());
  for (uint32_t threads : {0u, 1u, 2u, 3u}) {
    // Fresh: never-touched anonymous memory, as a new tensor's.
    const size_t len = big.size() + small.size();
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    char* mem = static_cast<char*>(p);
    std::vector<ItemDestination> dests = {{"small", mem + big.size(), small.size(), true},
                                          {"big", mem, big.size(), true}};
    ReadIntoOptions ro;
    ro.prefault_threads = threads;
    Status st = (*r)->ReadInto(std::nullopt, dests, ro);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(std::string(mem, big.size()), big) << threads;
    EXPECT_EQ(std::string(mem + big.size(), small.size()), small) << threads;
    // Used: overwritten in place.
    std::memset(mem, 0x5a, len);
    for (auto& d : dests) d.fresh = false;
    ASSERT_TRUE((*r)->ReadInto(0, dests, ro).ok());
    EXPECT_EQ(std::string(mem, big.size()), big);
    munmap(p, len);
  }
}

TEST_F(StoreTest, ReadIntoRefusesBadDestinationsBeforeReadingAnything) {
  Save("m", 1, {{"a", Bytes(5000, 1)}, {"b", "bb"}});
  auto r = store_->OpenCheckpoint("m", 1);
  ASSERT_TRUE(r.ok());
  std::string a(5000, 'x'), b(2, 'y');
  auto untouched = [&] { return a == std::string(5000, 'x') && b == "yy"; };
  // The good destination comes first: it must stay untouched.
  EXPECT_TRUE((*r)->ReadInto(std::nullopt, {{"a", a.data(), 5000}, {"zz", b.data(), 2}}).IsNotFound());
  EXPECT_TRUE(untouched());
  EXPECT_EQ((*r)->ReadInto(std::nullopt, {{"a", a.data(), 5000}, {"b", b.data(), 3}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(untouched());
  EXPECT_EQ((*r)->ReadInto(std::nullopt, {{"a", a.data(), 5000}, {"a", a.data(), 5000}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*r)->ReadInto(std::nullopt, {{"a", nullptr, 5000}}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*r)->ReadInto(1, {{"a", a.data(), 5000}}).IsNotFound());  // no rank 1
  EXPECT_TRUE(untouched());
  ASSERT_TRUE((*r)->ReadInto(0, {{"b", b.data(), 2}}).ok());
  EXPECT_EQ(b, "bb");
  EXPECT_EQ(a, std::string(5000, 'x'));  // not listed: read, verified, not kept
}

TEST_F(StoreTest, LatestIsTheHighestCommittedStep) {
  Save("m", 3, {{"a", "3"}});
  Save("m", 10, {{"a", "10"}});
  Save("m", 7, {{"a", "7"}});
  Save("other", 99, {{"a", "x"}});
  EXPECT_EQ(Load("m", std::nullopt)["a"], "10");
  auto list = store_->List("m", false);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].step, 3u);
  EXPECT_EQ((*list)[2].step, 10u);
  EXPECT_EQ(store_->List("", false)->size(), 4u);
}

TEST_F(StoreTest, AbortedWriterLeavesNothingVisibleAndCleansUp) {
  {
    auto w = store_->BeginCheckpoint({"a", 1}, 0, 1);
    ASSERT_TRUE(w.ok());
    std::string d = Bytes(100000, 1);
    ASSERT_TRUE((*w)->AddItem("x", "", d.data(), d.size()).ok());
    // Destroyed without Commit: an abandoned save.
  }
  EXPECT_TRUE(store_->OpenCheckpoint("a", 1).status().IsNotFound());
  EXPECT_TRUE(store_->List("a", true)->empty());
  EXPECT_TRUE(DataFiles().empty());
}

TEST_F(StoreTest, DuplicateAndInvalidKeysAreRefused) {
  auto w = store_->BeginCheckpoint({"k", 1}, 0, 1);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->AddItem("a", "", "1", 1).ok());
  EXPECT_EQ((*w)->AddItem("a", "", "2", 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*w)->AddItem("../x", "", "2", 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*w)->AddItem("", "", "2", 1).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE((*w)->Commit().ok());
}

TEST_F(StoreTest, InvalidNamesRanksAndOptionsAreRefused) {
  EXPECT_EQ(store_->BeginCheckpoint({"a/b", 1}, 0, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->BeginCheckpoint({"..", 1}, 0, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->BeginCheckpoint({"", 1}, 0, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->BeginCheckpoint({"n", 1}, 2, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->BeginCheckpoint({"n", 1}, 0, 0).status().code(), StatusCode::kInvalidArgument);
  StoreOptions o;
  o.chunk_bytes = 0;
  Reopen(o);
  EXPECT_EQ(store_->BeginCheckpoint({"n", 1}, 0, 1).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreTest, SavingACommittedStepAgainIsAlreadyExists) {
  Save("c", 1, {{"a", "first"}});
  auto w = store_->BeginCheckpoint({"c", 1}, 0, 1);
  ASSERT_FALSE(w.ok());
  EXPECT_TRUE(w.status().IsAlreadyExists());
  EXPECT_EQ(Load("c", 1)["a"], "first");
}

// Rank 0 finds the other ranks' manifests by name, through the pointers
// they publish: a listing walks a whole RADOS pool, every poll. The ranks
// take their pointers back once the commit exists.
// Pointers left by earlier writers of a rank (junk, another rank's
// manifest, a manifest that is gone, a temporary) around a hole gc left:
// rank 0 judges each once and keeps probing the hole, which is where the
// live rank 1, arriving later, puts its pointer (the first free one). gc
// then takes the leftovers and the checkpoint stays whole.
// Without attempt ids, an earlier writer of rank 1 that is still alive (a
// relaunch whose predecessor on another host cannot be told dead) may be
// found first; a newer writer of that rank that arrives before the last
// rank wins, as the newest manifest of a rank always has.
TEST_F(StoreTest, FlippedByteIsFoundInExactlyOneChunk) {
  StoreOptions o;
  o.chunk_bytes = 16 << 10;
  Reopen(o);
  Save("flip", 1, {{"a", Bytes(200000, 1)}, {"b", Bytes(100000, 2)}});
  auto files = DataFiles();
  ASSERT_EQ(files.size(), 1u);
  std::string path = dir_ + "/" + files[0];
  for (long pos : {0L, 123456L, 299999L}) {
    FILE* f = fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    fseek(f, pos, SEEK_SET);
    int c = fgetc(f);
    fseek(f, pos, SEEK_SET);
    fputc(c ^ 0x01, f);
    fclose(f);
    auto report = store_->Verify("flip", 1);
    ASSERT_TRUE(report.ok());
    ASSERT_EQ(report->bad.size(), 1u) << "at " << pos;
    const BadChunk& b = report->bad[0];
    EXPECT_LE(b.object_offset, static_cast<uint64_t>(pos));
    EXPECT_GT(b.object_offset + b.length, static_cast<uint64_t>(pos));
    EXPECT_EQ(b.item, pos < 200000 ? "a" : "b");
    EXPECT_EQ(b.object, files[0]);
    auto r = store_->OpenCheckpoint("flip", 1);
    Status st = (*r)->ReadAll(std::nullopt, [](const ItemInfo&, uint64_t, const void*, size_t) { return Status::OK(); });
    EXPECT_TRUE(st.IsCorruption());
    EXPECT_NE(st.message().find("chunk " + std::to_string(b.chunk_index)), std::string::npos) << st.message();
    // Put it back.
    f = fopen(path.c_str(), "r+b");
    fseek(f, pos, SEEK_SET);
    fputc(c, f);
    fclose(f);
    ASSERT_TRUE(store_->Verify("flip", 1)->ok());
  }
}

TEST_F(StoreTest, MissingOrTruncatedDataObjectIsReportedPerChunk) {
  StoreOptions o;
  o.chunk_bytes = 16 << 10;
  Reopen(o);
  Save("t", 1, {{"a", Bytes(100000, 1)}});
  std::string path = dir_ + "/" + DataFiles()[0];
  ASSERT_EQ(truncate(path.c_str(), 50000), 0);
  auto report = store_->Verify("t", 1);
  ASSERT_TRUE(report.ok());
  // Chunks wholly or partly beyond 50000 are bad: 16K chunks -> 3 of 7 good.
  EXPECT_EQ(report->bad.size(), 4u);
  ASSERT_EQ(unlink(path.c_str()), 0);
  report = store_->Verify("t", 1);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->bad.size(), 7u);
  EXPECT_EQ(report->bad[0].reason, "object missing");
}

TEST_F(StoreTest, DamagedCommitOrManifestIsCorruptionAndGcKeepsEverything) {
  Save("d", 1, {{"a", Bytes(10000, 1)}});
  auto listed = store_->backend().List("");
  std::string manifest;
  for (const auto& ob : *listed) if (ob.name.find("/manifest/") != std::string::npos) manifest = ob.name;
  ASSERT_FALSE(manifest.empty());
  std::string mpath = dir_ + "/" + manifest;
  std::ofstream(mpath, std::ios::binary | std::ios::trunc) << "garbage";
  auto r = store_->OpenCheckpoint("d", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
  auto gc = store_->CollectGarbage(0);
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->objects_removed, 0u) << "gc must not delete what a damaged commit may reference";
  EXPECT_EQ(DataFiles().size(), 1u);
  std::ofstream(dir_ + "/" + CommitObject("d", 1), std::ios::binary | std::ios::trunc) << "";
  EXPECT_TRUE(store_->OpenCheckpoint("d", 1).status().IsCorruption());
  auto all = store_->List("d", true);
  ASSERT_EQ(all->size(), 1u);
  EXPECT_FALSE((*all)[0].complete);
  EXPECT_FALSE((*all)[0].problem.empty());
}

TEST_F(StoreTest, RemoveHidesThenDeletes) {
  Save("x", 1, {{"a", "1"}});
  Save("x", 2, {{"a", "2"}});
  ASSERT_TRUE(store_->Remove({"x", 1}).ok());
  EXPECT_TRUE(store_->OpenCheckpoint("x", 1).status().IsNotFound());
  EXPECT_EQ(Load("x", std::nullopt)["a"], "2");
  EXPECT_TRUE(store_->Remove({"x", 1}).IsNotFound());
  EXPECT_TRUE(store_->backend().List(StepPrefix("x", 1))->empty());
}

TEST_F(StoreTest, RemoveAndGcLeaveARunningSaveAlone) {
  Save("busy", 1, {{"a", "old"}});
  auto w = store_->BeginCheckpoint({"busy", 2}, 0, 1);
  ASSERT_TRUE(w.ok());
  std::string d = Bytes(100000, 4);
  ASSERT_TRUE((*w)->AddItem("a", "meta:a", d.data(), d.size()).ok());
  // The writer is registered and alive (this process): rm refuses, gc spares.
  EXPECT_EQ(store_->Remove({"busy", 2}).code(), StatusCode::kUnavailable);
  auto gc = store_->CollectGarbage(0);
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->objects_removed, 0u);
  auto stats = (*w)->Commit();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(Load("busy", 2)["a"], d);
  // Once done, the writer's lock is gone and rm works.
  EXPECT_TRUE(store_->Remove({"busy", 2}).ok());
}

// rm --all-steps: every step goes in one pass, shared data objects with
// them, except a step a writer is in, which is named and left whole.
TEST_F(StoreTest, RemoveAllTakesEveryStepButOneBeingSaved) {
  for (uint64_t step = 1; step <= 4; ++step) Save("all", step, {{"a", Bytes(70000, 1)}, {"b", Bytes(9000, step)}});
  Save("other", 1, {{"a", "keep"}});
  auto w = store_->BeginCheckpoint({"all", 5}, 0, 1);
  ASSERT_TRUE(w.ok());
  const std::string d = Bytes(50000, 9);
  ASSERT_TRUE((*w)->AddItem("a", "meta:a", d.data(), d.size()).ok());
  auto removed = store_->RemoveAll("all");
  ASSERT_FALSE(removed.ok());
  EXPECT_EQ(removed.status().code(), StatusCode::kUnavailable) << removed.status().ToString();
  EXPECT_NE(removed.status().message().find("steps 5 of all"), std::string::npos) << removed.status().ToString();
  auto listed = store_->List("all", true);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].step, 5u);
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_EQ(Load("all", 5)["a"], d);
  EXPECT_EQ(Load("other", 1)["a"], "keep");
  auto again = store_->RemoveAll("all");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, 1u);
  auto objects = store_->backend().List(NamePrefix("all"));
  ASSERT_TRUE(objects.ok());
  EXPECT_TRUE(objects->empty()) << objects->front().name;
  EXPECT_EQ(store_->RemoveAll("all").status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, NamesWithDotsInsideAreFine) {
  Save("run..2", 1, {{"a..b/c..", "x"}});
  EXPECT_EQ(Load("run..2", 1)["a..b/c.."], "x");
}

TEST_F(StoreTest, GcSparesYoungObjects) {
  StoreOptions o;
  o.rank_timeout_ms = 50;
  Reopen(o);
  auto w = store_->BeginCheckpoint({"young", 1}, 0, 2);
  ASSERT_TRUE((*w)->AddItem("a", "", "x", 1).ok());
  ASSERT_FALSE((*w)->Commit().ok());
  auto gc = store_->CollectGarbage(3600 * 1000);
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->objects_removed, 0u);
  gc = store_->CollectGarbage(0);
  EXPECT_EQ(gc->objects_removed, 2u);  // the data object and the manifest
}

// gc is mark and sweep over the whole store: an object stays exactly when
// some commit names it (through its manifests), whichever step's prefix it
// lives under, so steps may share objects (incremental saves, parity).
TEST_F(StoreTest, GcKeepsEveryObjectSomeCommitNamesWhereverItLives) {
  const std::map<std::string, std::string> items = {{"a", Bytes(3 << 20, 1)}, {"b", Bytes(5000, 2)}};
  Save("shared", 1, items);
  Backend& b = store_->backend();
  auto step1 = LoadCheckpoint(b, "shared", 1);
  ASSERT_TRUE(step1.ok()) << step1.status().ToString();
  // Step 2, made by hand: its manifest names step 1's data objects.
  Manifest m = step1->manifests[0];
  m.step = 2;
  const std::string manifest = ManifestObject("shared", 2, 0, m.writer_id);
  const std::string manifest_bytes = EncodeManifest(m);
  ASSERT_TRUE(b.PublishIfAbsent(manifest, manifest_bytes).ok());
  CommitRecord c = step1->commit;
  c.step = 2;
  c.ranks[0].manifest = manifest;
  c.ranks[0].manifest_bytes = manifest_bytes.size();
  c.ranks[0].manifest_crc32c = Crc32c(manifest_bytes.data(), manifest_bytes.size());
  ASSERT_TRUE(b.PublishIfAbsent(CommitObject("shared", 2), EncodeCommitRecord(c)).ok());
  // Step 1's own commit and manifest go: its data objects are now reached
  // only through step 2.
  ASSERT_TRUE(b.Remove(CommitObject("shared", 1)).ok());
  ASSERT_TRUE(b.Remove(step1->commit.ranks[0].manifest).ok());
  auto gc = store_->CollectGarbage(0);
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  for (const auto& o : m.objects) {
    auto st = b.Stat({o.name});
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->size(), 1u) << o.name << ", named by step 2's commit, was collected";
  }
  EXPECT_EQ(Load("shared", 2), items);
  auto report = store_->Verify("shared", 2);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok());
  // Once nothing names them, they go.
  ASSERT_TRUE(b.Remove(CommitObject("shared", 2)).ok());
  gc = store_->CollectGarbage(0);
  ASSERT_TRUE(gc.ok());
  auto left = b.List(CheckpointsPrefix());
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty()) << left->size() << " objects left, e.g. " << (*left)[0].name;
}

// An interrupted publish leaves a temporary file beside the object it was
// to become. The file store keeps that to itself: List never shows it (no
// layer above knows its naming), and gc reclaims it once it is old enough.
TEST_F(StoreTest, InterruptedPublishesAreNeverListedAndGcReclaimsThem) {
  Save("t", 1, {{"a", Bytes(1000, 1)}});
  const std::string step = dir_ + "/ckpt/t/00000000000000000001/";
  const std::string old_tmp = step + "COMMIT.tmp.0123456789abcdef";
  const std::string young_tmp = step + "manifest/r000000-0123456789abcdef.man.tmp.fedcba9876543210";
  for (const auto& p : {old_tmp, young_tmp}) {
    FILE* f = std::fopen(p.c_str(), "w");
    ASSERT_NE(f, nullptr) << p;
    std::fputs("half a record", f);
    std::fclose(f);
  }
  struct timeval past[2] = {{time(nullptr) - 7200, 0}, {time(nullptr) - 7200, 0}};
  ASSERT_EQ(::utimes(old_tmp.c_str(), past), 0);
  auto listed = store_->backend().List("");
  ASSERT_TRUE(listed.ok());
  for (const auto& o : *listed) EXPECT_EQ(o.name.find(".tmp."), std::string::npos) << o.name;
  ASSERT_TRUE(store_->CollectGarbage(3600 * 1000).ok());
  EXPECT_NE(::access(old_tmp.c_str(), F_OK), 0) << "an hour-old temporary outlived gc --min-age 1h";
  EXPECT_EQ(::access(young_tmp.c_str(), F_OK), 0) << "a young temporary (a publish in progress?) was removed";
  ASSERT_TRUE(store_->CollectGarbage(0).ok());
  EXPECT_NE(::access(young_tmp.c_str(), F_OK), 0);
  EXPECT_EQ(Load("t", 1), (std::map<std::string, std::string>{{"a", Bytes(1000, 1)}}));
}

// A writer killed between making a step's directories and creating a file
// in them leaves empty directories that no object removal prunes: gc must.
TEST_F(StoreTest, GcRemovesProbeFilesAKilledOpenLeft) {
  // A process killed while it probed the store for O_DIRECT (by a named
  // file, where O_TMPFILE is missing) leaves the probe in the root.
  const std::string probe = dir_ + "/.sluice-probe.0123456789abcdef";
  const std::string young = dir_ + "/.sluice-probe.fedcba9876543210";
  const std::string other = dir_ + "/.not-ours";
  for (const auto& f : {probe, young, other}) std::ofstream(f) << "x";
  struct timeval old_times[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(utimes(probe.c_str(), old_times), 0);
  ASSERT_EQ(utimes(other.c_str(), old_times), 0);
  ASSERT_TRUE(store_->CollectGarbage(60'000).ok());
  EXPECT_NE(access(probe.c_str(), F_OK), 0) << "an old probe stays";
  EXPECT_EQ(access(young.c_str(), F_OK), 0) << "a probe younger than min_age went";
  EXPECT_EQ(access(other.c_str(), F_OK), 0) << "a file that is not a probe went";
}

TEST_F(StoreTest, GcRemovesEmptyDirectoriesCrashedWritersLeft) {
  Save("kept", 1, {{"a", Bytes(1000, 1)}});
  const std::string empty_step = dir_ + "/ckpt/crashed/00000000000000000007";
  ASSERT_EQ(std::system(("mkdir -p " + empty_step + "/data " + empty_step + "/writers").c_str()), 0);
  // And a crashed save's leftovers in an otherwise empty directory tree:
  // gc removes the objects (touching the directories) and then the tree.
  const std::string killed = dir_ + "/ckpt/killed/00000000000000000003";
  ASSERT_EQ(std::system(("mkdir -p " + killed + "/data " + killed + "/manifest && echo x > " +
                         killed + "/data/r000000-0123456789abcdef-000000.dat").c_str()),
            0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // older than the gc below
  auto gc = store_->CollectGarbage(0);
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->objects_removed, 1u);
  struct stat st;
  EXPECT_NE(::stat((dir_ + "/ckpt/crashed").c_str(), &st), 0) << "the empty name directory is gone";
  EXPECT_NE(::stat((dir_ + "/ckpt/killed").c_str(), &st), 0) << "the emptied name directory is gone";
  EXPECT_EQ(::stat((dir_ + "/ckpt").c_str(), &st), 0) << "the prefix's own directory stays";
  EXPECT_EQ(Load("kept", 1)["a"], Bytes(1000, 1));
  EXPECT_EQ(::stat(dir_.c_str(), &st), 0) << "the store root stays";
  // A symlink in the store to an empty directory elsewhere: never followed.
  const std::string outside = dir_ + "-outside";
  ASSERT_EQ(std::system(("mkdir -p " + outside + "/empty && ln -s " + outside + " " + dir_ +
                         "/ckpt/link && ln -s " + outside + "/empty " + dir_ + "/ckpt/link2").c_str()),
            0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(store_->CollectGarbage(0).ok());
  EXPECT_EQ(::stat((outside + "/empty").c_str(), &st), 0) << "gc followed a symlink out of the store";
  (void)std::system(("rm -rf " + outside + " " + dir_ + "/ckpt/link " + dir_ + "/ckpt/link2").c_str());
  // A save into a step whose directories went meanwhile makes them again.
  Save("crashed", 7, {{"b", Bytes(10, 2)}});
  EXPECT_EQ(Load("crashed", 7)["b"], Bytes(10, 2));
}

TEST_F(StoreTest, WorksOnEveryIoPath) {
  for (const char* q : {"io=threads", "direct=off", "io=threads&direct=off", "qd=1"}) {
    Reopen(StoreOptions{}, q);
    std::map<std::string, std::string> items = {{"a", Bytes(5 << 20, 1)}, {"b", Bytes(7, 2)}};
    std::string name = std::string("path-") + std::to_string(std::hash<std::string>()(q) % 100000);
    Save(name, 1, items);
    EXPECT_EQ(Load(name, 1), items) << q;
    EXPECT_TRUE(store_->Verify(name, 1)->ok()) << q;
  }
}

}  // namespace
}  // namespace sluice
