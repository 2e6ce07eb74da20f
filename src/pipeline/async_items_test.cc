// Items whose bytes the source copies into staging itself (AsyncItemSource:
// a GPU tensor's device-to-host DMA in the Python module). Here the "device"
// is a copier thread that lands each copy late, so a snapshot that returned
// before waiting, marked a slab filled too early or reused a slab still being
// filled would save the wrong bytes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sluice/pipeline.h"

namespace sluice {
namespace {

std::string Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(rng());
  return s;
}

// Copies from `src` on its own thread, each copy landing `delay` after it was
// started, in order (one stream). Counts what the snapshot asked of it.
class LateCopier final : public AsyncItemSource {
 public:
  LateCopier(const std::string& src, std::chrono::microseconds delay) : src_(src), delay_(delay) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~LateCopier() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Status StartCopy(uint64_t offset, void* dst, size_t len) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (offset + len > src_.size()) return Status::InvalidArgument("copy past the end");
    if (fail_after_ >= 0 && starts_ >= fail_after_) return Status::IOError("device copy refused");
    ++starts_;
    if (waits_ == 0) ++starts_before_first_wait_;
    queue_.push_back({offset, dst, len});
    cv_.notify_all();
    return Status::OK();
  }
  Status Wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    ++waits_;
    done_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    return fail_wait_ ? Status::IOError("device copy failed") : Status::OK();
  }
  void FailAfter(int starts) { fail_after_ = starts; }
  void FailWait() { fail_wait_ = true; }
  int starts() const { return starts_; }
  int starts_before_first_wait() const { return starts_before_first_wait_; }
  int waits() const { return waits_; }

 private:
  struct Copy {
    uint64_t offset;
    void* dst;
    size_t len;
  };
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Copy c = queue_.front();
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      std::this_thread::sleep_for(delay_);
      std::memcpy(c.dst, src_.data() + c.offset, c.len);
      lock.lock();
      busy_ = false;
      done_cv_.notify_all();
    }
  }

  const std::string& src_;
  const std::chrono::microseconds delay_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Copy> queue_;
  bool busy_ = false;
  bool stop_ = false;
  int fail_after_ = -1;
  bool fail_wait_ = false;
  int starts_ = 0, starts_before_first_wait_ = 0, waits_ = 0;
  std::thread thread_;
};

class AsyncItemsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-async-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::string cmd = "rm -rf " + dir_;
    (void)std::system(cmd.c_str());
  }
  std::unique_ptr<Pipeline> Open(uint64_t staging) {
    PipelineOptions o;
    o.tiers.push_back(TierOptions{dir_ + "/tier0"});
    o.store.create_if_missing = true;
    o.store.chunk_bytes = 1 << 20;
    o.store.object_bytes = 16ull << 20;
    o.staging_bytes = staging;
    o.on_staging_allocated = [this](void* base, uint64_t bytes) { allocated_.push_back({base, bytes}); };
    o.on_staging_freeing = [this](void* base, uint64_t bytes) { freed_.push_back({base, bytes}); };
    auto p = Pipeline::Open(o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(p).value() : nullptr;
  }
  std::map<std::string, std::string> ReadBack(Pipeline& p, const std::string& name, uint64_t step) {
    std::map<std::string, std::string> got;
    auto r = p.OpenCheckpoint(name, step, nullptr);
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

  std::string dir_;
  std::vector<std::pair<void*, uint64_t>> allocated_, freed_;
};

TEST_F(AsyncItemsTest, DeviceCopiesAreAllInFlightAtOnceAndLandBeforeTheSnapshotReturns) {
  auto p = Open(64ull << 20);
  ASSERT_NE(p, nullptr);
  std::string dev_a = Bytes(20 << 20, 1), dev_b = Bytes((3 << 20) + 777, 2), host = Bytes(9 << 20, 3);
  const std::string a0 = dev_a, b0 = dev_b;
  LateCopier ca(dev_a, std::chrono::microseconds(2000)), cb(dev_b, std::chrono::microseconds(2000));
  auto pending = p->Begin({"gpu", 1}, 0, 1);
  ASSERT_TRUE(pending.ok());
  ASSERT_TRUE((*pending)->AddItem("dev_a", "", dev_a.size(), ca).ok());
  ASSERT_TRUE((*pending)->AddItem("host", "", host.data(), host.size()).ok());
  ASSERT_TRUE((*pending)->AddItem("dev_b", "", dev_b.size(), cb).ok());
  EXPECT_FALSE((*pending)->AddItem("dev_b", "", dev_b.size(), cb).ok()) << "duplicate key";
  auto h = (*pending)->Snapshot();
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  // Every piece was started before any wait: all in flight at once.
  EXPECT_GT(ca.starts(), 1);
  EXPECT_EQ(ca.starts_before_first_wait(), ca.starts());
  EXPECT_EQ(cb.starts_before_first_wait(), cb.starts());
  // The device memory may change now: the saved bytes are those at snapshot.
  dev_a.assign(dev_a.size(), 'x');
  dev_b.assign(dev_b.size(), 'y');
  ASSERT_TRUE((*h)->Wait().ok());
  auto got = ReadBack(*p, "gpu", 1);
  EXPECT_TRUE(got["dev_a"] == a0);
  EXPECT_TRUE(got["dev_b"] == b0);
  EXPECT_TRUE(got["host"] == host);
}

TEST_F(AsyncItemsTest, AnImageLargerThanTheArenaStreamsThroughIt) {
  auto p = Open(8ull << 20);  // a 40 MiB device item through 8 MiB of staging
  ASSERT_NE(p, nullptr);
  std::string dev = Bytes(40 << 20, 4), host = Bytes(5 << 20, 5);
  LateCopier c(dev, std::chrono::microseconds(500));
  auto pending = p->Begin({"big", 1}, 0, 1);
  ASSERT_TRUE(pending.ok());
  ASSERT_TRUE((*pending)->AddItem("host", "", host.data(), host.size()).ok());
  ASSERT_TRUE((*pending)->AddItem("dev", "", dev.size(), c).ok());
  auto h = (*pending)->Snapshot();
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE((*h)->Wait().ok());
  EXPECT_GT(c.waits(), 1) << "streamed: each piece waited for in turn";
  auto got = ReadBack(*p, "big", 1);
  EXPECT_TRUE(got["dev"] == dev);
  EXPECT_TRUE(got["host"] == host);
}

TEST_F(AsyncItemsTest, AFailedDeviceCopyFailsTheSaveAndCommitsNothing) {
  auto p = Open(64ull << 20);
  ASSERT_NE(p, nullptr);
  std::string dev = Bytes(12 << 20, 6);
  for (bool fail_wait : {false, true}) {
    LateCopier c(dev, std::chrono::microseconds(200));
    if (fail_wait) c.FailWait(); else c.FailAfter(0);
    auto pending = p->Begin({"bad", fail_wait ? 2u : 1u}, 0, 1);
    ASSERT_TRUE(pending.ok());
    ASSERT_TRUE((*pending)->AddItem("dev", "", dev.size(), c).ok());
    auto h = (*pending)->Snapshot();
    ASSERT_FALSE(h.ok());
    EXPECT_NE(h.status().message().find(fail_wait ? "device copy failed" : "device copy refused"),
              std::string::npos) << h.status().ToString();
    EXPECT_GE(c.waits(), 1) << "copies already started are waited for even after a failure";
  }
  auto listed = p->tier(0).List("bad", false);
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
  // The arena is usable again.
  LateCopier ok(dev, std::chrono::microseconds(0));
  auto pending = p->Begin({"bad", 3}, 0, 1);
  ASSERT_TRUE(pending.ok());
  ASSERT_TRUE((*pending)->AddItem("dev", "", dev.size(), ok).ok());
  auto h = (*pending)->Snapshot();
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE((*h)->Wait().ok());
  EXPECT_TRUE(ReadBack(*p, "bad", 3)["dev"] == dev);
}

TEST_F(AsyncItemsTest, TheArenaIsAnnouncedOnceAndBeforeItIsFreed) {
  auto p = Open(16ull << 20);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(allocated_.size(), 1u);
  EXPECT_EQ(allocated_[0].second, 16ull << 20);
  std::string dev = Bytes(3 << 20, 7);
  for (uint64_t step = 1; step <= 3; ++step) {
    LateCopier c(dev, std::chrono::microseconds(0));
    auto pending = p->Begin({"once", step}, 0, 1);
    ASSERT_TRUE(pending.ok());
    ASSERT_TRUE((*pending)->AddItem("dev", "", dev.size(), c).ok());
    auto h = (*pending)->Snapshot();
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE((*h)->Wait().ok());
  }
  EXPECT_EQ(allocated_.size(), 1u) << "pinned once per arena, not per save";
  EXPECT_TRUE(freed_.empty());
  p.reset();
  ASSERT_EQ(freed_.size(), 1u);
  EXPECT_EQ(freed_[0], allocated_[0]);
}

}  // namespace
}  // namespace sluice
