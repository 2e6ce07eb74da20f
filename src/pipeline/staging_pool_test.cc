// StagingPool: pipelines of two stores stage into one arena, made once;
// a store whose slab size differs is refused; the memory goes back only
// when no save holds a slab, and never after KeepResident().
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/staging_arena.h"
#include "sluice/pipeline.h"

namespace sluice {
namespace {

class StagingPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-pool-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::string cmd = "rm -rf " + dir_;
    (void)std::system(cmd.c_str());
  }
  StagingPoolOptions PoolOptions(double idle_seconds = 0) {
    StagingPoolOptions o;
    o.bytes = 32ull << 20;
    o.huge_pages = false;
    o.idle_release_seconds = idle_seconds;
    o.on_allocated = [this](void*, uint64_t) { ++allocated_; };
    o.on_freeing = [this](void*, uint64_t) { ++freed_; };
    return o;
  }
  std::unique_ptr<Pipeline> Open(const std::string& store, std::shared_ptr<StagingPool> pool,
                                 uint64_t io_bytes = 1 << 20) {
    PipelineOptions o;
    o.tiers.push_back(TierOptions{dir_ + "/" + store});
    o.store.create_if_missing = true;
    o.store.chunk_bytes = 1 << 20;
    o.store.io_bytes = io_bytes;
    o.staging_bytes = 1ull << 20;  // ignored: the pool's size counts
    o.staging_pool = std::move(pool);
    auto p = Pipeline::Open(o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(p).value() : nullptr;
  }
  static Status Save(Pipeline& p, uint64_t step, const std::vector<uint8_t>& data) {
    ASSIGN_OR_RETURN(auto pending, p.Begin({"m", step}, 0, 1));
    RETURN_IF_ERROR(pending->AddItem("x", "", data.data(), data.size()));
    ASSIGN_OR_RETURN(auto handle, pending->Snapshot());
    return handle->Wait();
  }
  static std::vector<uint8_t> Read(Pipeline& p, uint64_t step, size_t size) {
    std::vector<uint8_t> got(size);
    auto r = p.OpenCheckpoint("m", step, nullptr);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    Status st = (*r)->ReadAll(std::nullopt, [&](const ItemInfo&, uint64_t off, const void* d, size_t n) {
      std::memcpy(got.data() + off, d, n);
      return Status::OK();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    return got;
  }
  static std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + seed);
    return v;
  }

  std::string dir_;
  int allocated_ = 0, freed_ = 0;
};

TEST_F(StagingPoolTest, PipelinesOfManyStoresShareOneArenaMadeOnce) {
  auto pool = StagingPool::Open(PoolOptions());
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ((*pool)->resident_bytes(), 0u);  // nothing until a pipeline needs it
  std::vector<std::unique_ptr<Pipeline>> pipelines;
  for (int k = 0; k < 5; ++k) {
    pipelines.push_back(Open("store" + std::to_string(k), *pool));
    ASSERT_NE(pipelines.back(), nullptr);
  }
  EXPECT_EQ(allocated_, 1);
  EXPECT_EQ((*pool)->resident_bytes(), 32ull << 20);
  // Larger than the arena: each save streams through the shared slabs.
  for (int k = 0; k < 5; ++k) {
    auto data = Pattern(40ull << 20, static_cast<uint8_t>(k));
    ASSERT_TRUE(Save(*pipelines[k], 1, data).ok());
    EXPECT_EQ(Read(*pipelines[k], 1, data.size()), data);
  }
  EXPECT_EQ(allocated_, 1);
  pipelines.clear();
  EXPECT_EQ(freed_, 0);  // the pool holds it
  pool->reset();
  EXPECT_EQ(freed_, 1);
}

TEST_F(StagingPoolTest, SavesOfTwoStoresAtOnceQueueForTheSameSlabs) {
  auto pool = StagingPool::Open(PoolOptions());
  ASSERT_TRUE(pool.ok());
  auto a = Open("a", *pool), b = Open("b", *pool);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto da = Pattern(48ull << 20, 1), db = Pattern(48ull << 20, 2);
  Status sa, sb;
  std::thread ta([&] { sa = Save(*a, 7, da); });
  std::thread tb([&] { sb = Save(*b, 7, db); });
  ta.join();
  tb.join();
  ASSERT_TRUE(sa.ok()) << sa.ToString();
  ASSERT_TRUE(sb.ok()) << sb.ToString();
  EXPECT_EQ(Read(*a, 7, da.size()), da);
  EXPECT_EQ(Read(*b, 7, db.size()), db);
}

TEST_F(StagingPoolTest, AStoreWhoseSlabsDifferIsRefusedNamingBoth) {
  auto pool = StagingPool::Open(PoolOptions());
  ASSERT_TRUE(pool.ok());
  auto a = Open("a", *pool, 1 << 20);
  ASSERT_NE(a, nullptr);
  PipelineOptions o;
  o.tiers.push_back(TierOptions{dir_ + "/b"});
  o.store.create_if_missing = true;
  o.store.chunk_bytes = 1 << 20;
  o.store.io_bytes = 2 << 20;
  o.staging_pool = *pool;
  auto refused = Pipeline::Open(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().ToString().find("2097152"), std::string::npos) << refused.status().ToString();
}

TEST_F(StagingPoolTest, IdleMemoryGoesBackAndTheNextSaveFaultsItInAgain) {
  auto pool = StagingPool::Open(PoolOptions(0.2));
  ASSERT_TRUE(pool.ok());
  auto p = Open("a", *pool);
  ASSERT_NE(p, nullptr);
  auto data = Pattern(8ull << 20, 3);
  ASSERT_TRUE(Save(*p, 1, data).ok());
  EXPECT_EQ((*pool)->resident_bytes(), 32ull << 20);
  for (int i = 0; i < 100 && (*pool)->resident_bytes() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ((*pool)->resident_bytes(), 0u);  // the idle thread gave it back
  auto again = Pattern(8ull << 20, 4);
  ASSERT_TRUE(Save(*p, 2, again).ok());
  EXPECT_EQ(Read(*p, 2, again.size()), again);
  EXPECT_EQ(Read(*p, 1, data.size()), data);
  EXPECT_EQ(allocated_, 1);  // the same mapping, faulted in again
}

TEST(StagingArenaTest, MemoryGoesBackOnlyOnceEverySlabReservedIsReleased) {
  auto arena = StagingArena::Create(8 * 4096, 4096, false, false);
  ASSERT_TRUE(arena.ok());
  auto& a = **arena;
  uint64_t first = a.Reserve(3);
  a.Release(first);
  a.Release(first + 1);
  EXPECT_FALSE(a.ReleaseMemoryIfIdle(std::chrono::seconds(0)));  // first + 2 still held
  a.Release(first + 2);
  EXPECT_FALSE(a.ReleaseMemoryIfIdle(std::chrono::hours(1)));  // reserved just now
  EXPECT_TRUE(a.ReleaseMemoryIfIdle(std::chrono::seconds(0)));
  EXPECT_FALSE(a.resident());
  std::memset(a.SlabOf(a.Reserve(1)), 0xab, 4096);  // faults in again, usable
  EXPECT_TRUE(a.resident());
}

// The arena's pages fault in on a thread of its own while the first save
// fills the slabs touched so far: what a writer put in a slab is never
// overwritten by that thread's touching, whichever gets where first.
TEST(StagingArenaTest, SlabsFilledWhileTheArenaFaultsInKeepTheirBytes) {
  constexpr uint64_t kSlab = 1 << 20, kSlabs = 96;
  for (int round = 0; round < 3; ++round) {
    auto arena = StagingArena::Create(kSlab * kSlabs, kSlab, false, round == 2);
    ASSERT_TRUE(arena.ok());
    auto& a = **arena;
    const uint64_t first = a.Reserve(kSlabs);
    for (uint64_t i = 0; i < kSlabs; ++i) {
      ASSERT_TRUE(a.WaitWritable(first + i, [] { return false; }));
      std::memset(a.SlabOf(first + i), static_cast<int>(0x11 + i), kSlab);
    }
    a.WaitAllTouched();
    for (uint64_t i = 0; i < kSlabs; ++i) {
      const uint8_t* p = a.SlabOf(first + i);
      for (uint64_t off = 0; off < kSlab; off += 4096) {
        ASSERT_EQ(p[off], static_cast<uint8_t>(0x11 + i)) << "slab " << i << " offset " << off;
      }
    }
  }
}

TEST_F(StagingPoolTest, MemoryGoesBackOnRequestWhenIdleButNeverAfterKeepResident) {
  auto pool = StagingPool::Open(PoolOptions());
  ASSERT_TRUE(pool.ok());
  auto p = Open("a", *pool);
  ASSERT_NE(p, nullptr);
  auto data = Pattern(4ull << 20, 5);
  auto pending = p->Begin({"m", 3}, 0, 1);
  ASSERT_TRUE(pending.ok());
  ASSERT_TRUE((*pending)->AddItem("x", "", data.data(), data.size()).ok());
  auto handle = (*pending)->Snapshot();
  ASSERT_TRUE(handle.ok());
  ASSERT_TRUE((*handle)->Wait().ok());
  EXPECT_TRUE((*pool)->ReleaseIfIdle());  // written out: nothing holds a slab
  EXPECT_FALSE((*pool)->ReleaseIfIdle());  // already given back
  ASSERT_TRUE(Save(*p, 4, data).ok());
  (*pool)->KeepResident();
  EXPECT_FALSE((*pool)->ReleaseIfIdle());
  EXPECT_EQ((*pool)->resident_bytes(), 32ull << 20);
  EXPECT_EQ(Read(*p, 3, data.size()), data);
}

TEST_F(StagingPoolTest, ABudgetOverPhysicalMemoryIsRefusedAtOpen) {
  StagingPoolOptions o;
  o.bytes = 1ull << 50;
  EXPECT_EQ(StagingPool::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.bytes = 32ull << 20;
  o.idle_release_seconds = -1;
  EXPECT_EQ(StagingPool::Open(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice
