// Lazy snapshots (PendingCheckpoint::SnapshotLazily): the call returns before
// the copy; items land in the order they were added; WaitItems returns once
// the items asked for are copied, while later ones still copy; nothing
// commits before Finish(), a failed verdict or a dropped snapshot commits
// nothing, and a pipeline closing on an unfinished snapshot does not hang.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sluice/pipeline.h"

namespace sluice {
namespace {

// Bytes that arrive only once the test opens the gate.
class GatedSource final : public ItemSource {
 public:
  explicit GatedSource(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  Result<size_t> Read(void* buf, size_t len) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
    size_t n = std::min(len, bytes_.size() - pos_);
    std::memcpy(buf, bytes_.data() + pos_, n);
    pos_ += n;
    return n;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::vector<uint8_t> bytes_;
  size_t pos_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

class LazySnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-lazy-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::string cmd = "rm -rf " + dir_;
    (void)std::system(cmd.c_str());
  }
  std::unique_ptr<Pipeline> Open() {
    PipelineOptions o;
    o.tiers.push_back(TierOptions{dir_ + "/t0"});
    o.store.create_if_missing = true;
    o.store.chunk_bytes = 1 << 20;
    o.store.io_bytes = 1 << 20;
    o.staging_bytes = 16ull << 20;
    o.huge_pages = false;
    auto p = Pipeline::Open(o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(p).value() : nullptr;
  }
  static std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 13 + seed);
    return v;
  }
  static std::vector<uint8_t> Read(Pipeline& p, uint64_t step, const std::string& key, size_t size) {
    std::vector<uint8_t> got(size);
    auto r = p.OpenCheckpoint("m", step, nullptr);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    Status st = (*r)->ReadRange(key, 0, got.data(), size);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return got;
  }
  static bool Committed(Pipeline& p, uint64_t step) {
    auto listed = p.List("m");
    if (!listed.ok()) return false;
    for (const auto& c : *listed) {
      if (c.info.step == step && c.tiers[0].state == "committed") return true;
    }
    return false;
  }

  std::string dir_;
};

TEST_F(LazySnapshotTest, ItemsLandInOrderAndCommitOnlyOnceSealed) {
  auto p = Open();
  ASSERT_TRUE(p);
  std::vector<uint8_t> first = Pattern(3 << 20, 1), second_bytes = Pattern(2 << 20, 2);
  GatedSource second(second_bytes);
  auto pending = p->Begin({"m", 1}, 0, 1);
  ASSERT_TRUE(pending.ok());
  ASSERT_TRUE((*pending)->AddItem("first", "", first.data(), first.size()).ok());
  ASSERT_TRUE((*pending)->AddItem("second", "", second_bytes.size(), second).ok());
  auto lazy = (*pending)->SnapshotLazily();
  ASSERT_TRUE(lazy.ok()) << lazy.status().ToString();

  // The first item lands although the second cannot yet: the caller's first
  // buffer is free while the copy goes on.
  ASSERT_TRUE((*lazy)->WaitItems({0}).ok());
  EXPECT_FALSE((*lazy)->copy_done());
  std::fill(first.begin(), first.end(), 0xEE);  // after its copy: not in the checkpoint
  EXPECT_EQ((*lazy)->WaitItems({7}).code(), StatusCode::kInvalidArgument);

  second.Open();
  ASSERT_TRUE((*lazy)->WaitAll().ok());
  EXPECT_TRUE((*lazy)->copy_done());
  EXPECT_GT((*lazy)->copy_seconds(), 0.0);
  // Copied and written, but not finished: not committed.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto handle = (*lazy)->handle();
  EXPECT_FALSE(handle->done());
  EXPECT_FALSE(Committed(*p, 1));

  (*lazy)->Finish(Status::OK());
  ASSERT_TRUE(handle->Wait().ok());
  EXPECT_EQ(Read(*p, 1, "first", 3 << 20), Pattern(3 << 20, 1));
  EXPECT_EQ(Read(*p, 1, "second", 2 << 20), second_bytes);
}

TEST_F(LazySnapshotTest, AFailedVerdictCommitsNothing) {
  auto p = Open();
  ASSERT_TRUE(p);
  std::vector<uint8_t> data = Pattern(2 << 20, 3);
  auto pending = p->Begin({"m", 2}, 0, 1);
  ASSERT_TRUE(pending.ok());
  ASSERT_TRUE((*pending)->AddItem("x", "", data.data(), data.size()).ok());
  auto lazy = (*pending)->SnapshotLazily();
  ASSERT_TRUE(lazy.ok());
  ASSERT_TRUE((*lazy)->WaitAll().ok());
  (*lazy)->Finish(Status::InvalidArgument("item 'x' changed before it was copied"));
  (*lazy)->Finish(Status::OK());  // the first verdict counts
  Status st = (*lazy)->handle()->WaitTier(0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.ToString().find("changed before it was copied"), std::string::npos) << st.ToString();
  EXPECT_FALSE(Committed(*p, 2));

  // The pipeline goes on: the next save commits.
  auto next = p->Begin({"m", 3}, 0, 1);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  ASSERT_TRUE((*next)->AddItem("x", "", data.data(), data.size()).ok());
  auto h = (*next)->Snapshot();
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE((*h)->Wait().ok());
  EXPECT_EQ(Read(*p, 3, "x", data.size()), data);
}

TEST_F(LazySnapshotTest, ADroppedSnapshotCommitsNothing) {
  auto p = Open();
  ASSERT_TRUE(p);
  std::vector<uint8_t> data = Pattern(1 << 20, 4);
  std::shared_ptr<SaveHandle> handle;
  {
    auto pending = p->Begin({"m", 4}, 0, 1);
    ASSERT_TRUE(pending.ok());
    ASSERT_TRUE((*pending)->AddItem("x", "", data.data(), data.size()).ok());
    auto lazy = (*pending)->SnapshotLazily();
    ASSERT_TRUE(lazy.ok());
    handle = (*lazy)->handle();
    ASSERT_TRUE((*lazy)->WaitAll().ok());
  }
  Status st = handle->WaitTier(0);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_FALSE(Committed(*p, 4));
}

TEST_F(LazySnapshotTest, ClosingOnAnUnsealedSnapshotFailsItInsteadOfHanging) {
  auto p = Open();
  ASSERT_TRUE(p);
  std::vector<uint8_t> data = Pattern(1 << 20, 5);
  auto pending = p->Begin({"m", 5}, 0, 1);
  ASSERT_TRUE(pending.ok());
  ASSERT_TRUE((*pending)->AddItem("x", "", data.data(), data.size()).ok());
  auto lazy = (*pending)->SnapshotLazily();
  ASSERT_TRUE(lazy.ok());
  auto handle = (*lazy)->handle();
  p.reset();  // closes: the copy finishes, the unfinished save fails
  Status st = handle->WaitTier(0);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.ToString().find("closed before the lazy snapshot was finished"), std::string::npos)
      << st.ToString();
  EXPECT_TRUE((*lazy)->copy_done());
}

TEST_F(LazySnapshotTest, AnEagerSaveAfterALazyOneCommitsBothInOrder) {
  auto p = Open();
  ASSERT_TRUE(p);
  std::vector<uint8_t> a = Pattern(4 << 20, 6), b = Pattern(4 << 20, 7);
  auto pa = p->Begin({"m", 6}, 0, 1);
  ASSERT_TRUE(pa.ok());
  ASSERT_TRUE((*pa)->AddItem("x", "", a.data(), a.size()).ok());
  auto lazy = (*pa)->SnapshotLazily();
  ASSERT_TRUE(lazy.ok());
  auto pb = p->Begin({"m", 7}, 0, 1);
  ASSERT_TRUE(pb.ok());
  ASSERT_TRUE((*pb)->AddItem("x", "", b.data(), b.size()).ok());
  auto hb = (*pb)->Snapshot();  // waits for the lazy copy's turn, then copies
  ASSERT_TRUE(hb.ok());
  EXPECT_TRUE((*lazy)->copy_done());
  (*lazy)->Finish(Status::OK());
  EXPECT_TRUE((*lazy)->handle()->Wait().ok());
  EXPECT_TRUE((*hb)->Wait().ok());
  EXPECT_EQ(Read(*p, 6, "x", a.size()), a);
  EXPECT_EQ(Read(*p, 7, "x", b.size()), b);
}

TEST_F(LazySnapshotTest, AnEagerSaveLargerThanTheArenaAfterALazyOneWaitsItsTurnAndBothCommit) {
  auto p = Open();  // 16 MiB of staging
  ASSERT_TRUE(p);
  std::vector<uint8_t> a = Pattern(12 << 20, 8), b = Pattern(40 << 20, 9);
  auto pa = p->Begin({"m", 8}, 0, 1);
  ASSERT_TRUE(pa.ok());
  ASSERT_TRUE((*pa)->AddItem("x", "", a.data(), a.size()).ok());
  auto lazy = (*pa)->SnapshotLazily();
  ASSERT_TRUE(lazy.ok());
  // Whoever owns the lazy save finishes it once copied (sluice's Python
  // package does it on a thread of its own), while this thread saves on.
  std::thread finisher([&] {
    ASSERT_TRUE((*lazy)->WaitAll().ok());
    (*lazy)->Finish(Status::OK());
  });
  auto pb = p->Begin({"m", 9}, 0, 1);
  ASSERT_TRUE(pb.ok());
  ASSERT_TRUE((*pb)->AddItem("x", "", b.data(), b.size()).ok());
  auto hb = (*pb)->Snapshot();  // streams through the arena after the lazy copy
  finisher.join();
  ASSERT_TRUE(hb.ok()) << hb.status().ToString();
  EXPECT_TRUE((*lazy)->handle()->Wait().ok());
  EXPECT_TRUE((*hb)->Wait().ok());
  EXPECT_EQ(Read(*p, 8, "x", a.size()), a);
  EXPECT_EQ(Read(*p, 9, "x", b.size()), b);
}

TEST_F(LazySnapshotTest, ClosingSealsAnUnsealedSnapshotBeforeRunningTheCopiesQueuedAfterIt) {
  auto p = Open();
  ASSERT_TRUE(p);
  std::vector<uint8_t> a = Pattern(8 << 20, 10), b = Pattern(40 << 20, 11);
  auto pa = p->Begin({"m", 10}, 0, 1);
  ASSERT_TRUE(pa.ok());
  ASSERT_TRUE((*pa)->AddItem("x", "", a.data(), a.size()).ok());
  auto la = (*pa)->SnapshotLazily();
  ASSERT_TRUE(la.ok());
  ASSERT_TRUE((*la)->WaitAll().ok());  // copied, never finished
  auto pb = p->Begin({"m", 11}, 0, 1);
  ASSERT_TRUE(pb.ok());
  ASSERT_TRUE((*pb)->AddItem("x", "", b.data(), b.size()).ok());
  auto lb = (*pb)->SnapshotLazily();  // larger than the arena: needs the writer past a
  ASSERT_TRUE(lb.ok());
  auto ha = (*la)->handle(), hb = (*lb)->handle();
  p.reset();  // must not hang
  EXPECT_EQ(ha->WaitTier(0).code(), StatusCode::kUnavailable);
  EXPECT_EQ(hb->WaitTier(0).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace sluice
