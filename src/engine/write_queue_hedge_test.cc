// The write queue's hedging (write_queue.h), over the real file backend
// behind a Placement whose first placement of every object is slow: a
// write past the deadline gets its object written again under the sibling
// the placement names, the first copy holding every byte is the one listed,
// the loser is removed once the queue is done with it, and the budget, the
// size limit and failed copies are honoured. Caller buffers of a held
// object come back once it is finished, each exactly once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/loser_reaper.h"
#include "engine/write_queue.h"
#include "sluice/aligned_buffer.h"
#include "engine/slow_placement_fixture.h"
#include "sluice/backend_wrapper.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

class WriteQueueHedgeTest : public ::testing::Test {
 protected:
  static constexpr size_t kIo = 64 << 10;
  static constexpr int kWrites = 4;

  void SetUp() override {
    char tmpl[] = "/tmp/sluice-wqh-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto b = OpenBackend(dir_ + "?qd=8", true);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    store_ = std::make_unique<SlowFirstPlacement>(std::move(b).value());
    data_ = Bytes(kIo * kWrites, 7);
    for (int i = 0; i < kWrites; ++i) {
      auto buf = AlignedBuffer::Allocate(kIo);
      ASSERT_TRUE(buf.ok());
      std::memcpy(buf->data(), data_.data() + i * kIo, kIo);
      bufs_.push_back(std::move(buf).value());
    }
  }
  void TearDown() override {
    store_.reset();
    std::string cmd = "rm -rf " + dir_;
    (void)std::system(cmd.c_str());
  }

  // Writes the test's bytes as object `name` (placed) from the caller's
  // buffers; returns Finish's status.
  Status WriteObject(WriteQueue& q, const std::string& name, uint64_t size_hint) {
    RETURN_IF_ERROR(q.BeginObject(name, size_hint, /*placed=*/true));
    for (int i = 0; i < kWrites; ++i) RETURN_IF_ERROR(q.Write(i * kIo, bufs_[i].data(), kIo, i, false));
    RETURN_IF_ERROR(q.EndObject(data_.size()));
    return q.Finish();
  }

  std::string Read(const std::string& name) {
    auto r = store_->Open(name, {});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return "";
    auto buf = AlignedBuffer::Allocate(AlignUp((*r)->size() + 1, 4096));
    EXPECT_TRUE((*r)->StartRead(0, buf->data(), buf->size(), 0).ok());
    auto c = (*r)->Reap();
    EXPECT_TRUE(c.ok() && c->status.ok());
    return std::string(reinterpret_cast<const char*>(buf->data()), c->bytes);
  }

  std::vector<std::string> Listed() {
    auto listed = store_->List("d/");
    EXPECT_TRUE(listed.ok());
    std::vector<std::string> names;
    for (const auto& o : *listed) names.push_back(o.name);
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string dir_;
  std::unique_ptr<SlowFirstPlacement> store_;
  std::string data_;
  std::vector<AlignedBuffer> bufs_;
};

TEST_F(WriteQueueHedgeTest, ALateObjectIsWrittenAgainAndTheCopyThatFinishesIsListed) {
  std::map<uint64_t, int> returned;
  const auto start = Clock::now();
  Clock::duration finished_after{};
  {
    WriteQueue q(*store_, WriteQueueOptions{nullptr, nullptr, 0, [&](uint64_t tag) { ++returned[tag]; }, 0});
    Status st = WriteObject(q, "d/obj-000001.dat", data_.size());
    ASSERT_TRUE(st.ok()) << st.ToString();
    finished_after = Clock::now() - start;
    ASSERT_EQ(q.objects().size(), 1u);
    EXPECT_EQ(q.objects()[0].name, "d/obj-000001-h1.dat");
    EXPECT_EQ(q.objects()[0].size, data_.size());
    // The loser still writes from the caller's buffers: they are not back.
    EXPECT_LT(returned.size(), static_cast<size_t>(kWrites));
  }
  // Finished without waiting for the slow copy; the loser went after it.
  EXPECT_LT(finished_after, milliseconds(1000));
  EXPECT_GE(Clock::now() - start, milliseconds(1500));
  EXPECT_EQ(returned.size(), static_cast<size_t>(kWrites));
  for (const auto& [tag, times] : returned) EXPECT_EQ(times, 1) << tag;
  EXPECT_EQ(Read("d/obj-000001-h1.dat"), data_);
  EXPECT_EQ(Listed(), std::vector<std::string>{"d/obj-000001-h1.dat"}) << "the loser was not discarded";
  EXPECT_EQ(store_->late.count("d/obj-000001.dat"), 1u);
  const HedgeStats s = store_->Stats();
  EXPECT_EQ(s.objects_hedged, 1u);
  EXPECT_EQ(s.hedges_won, 1u);
  EXPECT_EQ(s.extra_bytes, data_.size());
  EXPECT_EQ(s.bytes_submitted, data_.size());
}

// Where the caller's memory stays mapped (a staging arena), the queue does
// not wait for the loser: the LoserReaper does, and discards it.
TEST_F(WriteQueueHedgeTest, WithBuffersThatStayMappedTheLoserIsLeftToTheReaper) {
  std::map<uint64_t, int> returned;
  const auto start = Clock::now();
  {
    WriteQueueOptions o;
    o.on_complete = [&](uint64_t tag) { ++returned[tag]; };
    o.buffers_stay_mapped = true;
    WriteQueue q(*store_, o);
    Status st = WriteObject(q, "d/obj-000007.dat", data_.size());
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(q.objects()[0].name, "d/obj-000007-h1.dat");
    EXPECT_EQ(returned.size(), static_cast<size_t>(kWrites)) << "every buffer is back once the object is finished";
  }
  EXPECT_LT(Clock::now() - start, milliseconds(1000)) << "the queue waited for its loser";
  EXPECT_EQ(LoserReaper::Get().busy(), 1u);
  LoserReaper::Get().WaitIdle();
  EXPECT_GE(Clock::now() - start, milliseconds(1500));
  for (const auto& [tag, times] : returned) EXPECT_EQ(times, 1) << tag;
  EXPECT_EQ(Read("d/obj-000007-h1.dat"), data_);
  EXPECT_EQ(Listed(), std::vector<std::string>{"d/obj-000007-h1.dat"}) << "the loser was not discarded";
}

TEST_F(WriteQueueHedgeTest, OverBudgetTheLateCopyGoesOnAlone) {
  store_->slow = milliseconds(300);
  store_->budget_bytes = kIo;  // less than the object
  {
    WriteQueue q(*store_, WriteQueueOptions{});
    Status st = WriteObject(q, "d/obj-000002.dat", data_.size());
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(q.objects().size(), 1u);
    EXPECT_EQ(q.objects()[0].name, "d/obj-000002.dat");
  }
  EXPECT_EQ(Read("d/obj-000002.dat"), data_);
  EXPECT_EQ(Listed(), std::vector<std::string>{"d/obj-000002.dat"});
  EXPECT_EQ(store_->Stats().objects_hedged, 0u);
  EXPECT_EQ(store_->Stats().hedges_refused, 1u);
  EXPECT_EQ(store_->creates, 1);
}

TEST_F(WriteQueueHedgeTest, AnObjectPastTheHoldLimitIsNotHedgedAndItsBuffersComeBackAsWritten) {
  store_->slow = milliseconds(200);
  store_->policy_.max_held_bytes = 2 * kIo;
  std::vector<uint64_t> order;
  {
    WriteQueue q(*store_, WriteQueueOptions{nullptr, nullptr, 0, [&](uint64_t tag) { order.push_back(tag); }, 0});
    ASSERT_TRUE(q.BeginObject("d/obj-000003.dat", 0, /*placed=*/true).ok());
    for (int i = 0; i < kWrites; ++i) ASSERT_TRUE(q.Write(i * kIo, bufs_[i].data(), kIo, i, false).ok());
    // Past the limit the object is no longer held: what is done came back.
    while (q.in_flight() > 0) ASSERT_TRUE(q.ReapOne().ok());
    EXPECT_EQ(order.size(), static_cast<size_t>(kWrites));
    ASSERT_TRUE(q.EndObject(data_.size()).ok());
    ASSERT_TRUE(q.Finish().ok());
    EXPECT_EQ(q.objects()[0].name, "d/obj-000003.dat");
  }
  EXPECT_EQ(store_->Stats().objects_hedged, 0u);
  EXPECT_EQ(Read("d/obj-000003.dat"), data_);
}

// A buffer that comes back is the caller's again, at once: past the hold
// limit, what was written comes back, never the write being started.
TEST_F(WriteQueueHedgeTest, PastTheHoldLimitOnlyWrittenBuffersComeBack) {
  store_->slow = milliseconds(0);
  std::vector<uint64_t> order;
  {
    WriteQueueOptions o;
    o.max_held_bytes = 2 * kIo;  // the third write goes past it
    o.on_complete = [&](uint64_t tag) {
      order.push_back(tag);
      std::memset(bufs_[tag].data(), 0xEE, kIo);  // reused by the caller
    };
    WriteQueue q(*store_, o);
    Status st = WriteObject(q, "d/obj-000008.dat", data_.size());
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  EXPECT_EQ(order.size(), static_cast<size_t>(kWrites));
  EXPECT_TRUE(Read("d/obj-000008.dat") == data_) << "a buffer came back before its write was sent";
}

// An object larger than the hold limit is held while within it: a write
// late there is hedged all the same (and the hedged object is then held to
// its end).
TEST_F(WriteQueueHedgeTest, ALargeObjectLateWithinTheHoldLimitIsHedged) {
  store_->policy_.max_held_bytes = 2 * kIo;
  WriteQueue q(*store_, WriteQueueOptions{});
  ASSERT_TRUE(q.BeginObject("d/obj-000009.dat", 64ull << 20, /*placed=*/true).ok());
  ASSERT_TRUE(q.Write(0, bufs_[0].data(), kIo, 0, false).ok());
  while (q.in_flight() > 0) ASSERT_TRUE(q.ReapOne().ok());  // late: hedged
  for (int i = 1; i < kWrites; ++i) ASSERT_TRUE(q.Write(i * kIo, bufs_[i].data(), kIo, i, false).ok());
  ASSERT_TRUE(q.EndObject(data_.size()).ok());
  ASSERT_TRUE(q.Finish().ok());
  EXPECT_EQ(q.objects()[0].name, "d/obj-000009-h1.dat");
  EXPECT_EQ(store_->Stats().objects_hedged, 1u);
  EXPECT_EQ(Read("d/obj-000009-h1.dat"), data_);
}

TEST_F(WriteQueueHedgeTest, BuffersOfAHeldObjectComeBackOnlyOnceItIsFinished) {
  store_->slow = milliseconds(0);
  std::vector<uint64_t> order;
  WriteQueue q(*store_, WriteQueueOptions{nullptr, nullptr, 0, [&](uint64_t tag) { order.push_back(tag); }, 0});
  ASSERT_TRUE(q.BeginObject("d/obj-000004.dat", data_.size(), /*placed=*/true).ok());
  for (int i = 0; i < kWrites; ++i) ASSERT_TRUE(q.Write(i * kIo, bufs_[i].data(), kIo, i, false).ok());
  while (q.in_flight() > 0) ASSERT_TRUE(q.ReapOne().ok());
  EXPECT_TRUE(order.empty()) << "a held buffer came back before its object was finished";
  ASSERT_TRUE(q.EndObject(data_.size()).ok());
  ASSERT_TRUE(q.Finish().ok());
  std::sort(order.begin(), order.end());
  EXPECT_EQ(order, (std::vector<uint64_t>{0, 1, 2, 3}));
  EXPECT_EQ(q.objects()[0].name, "d/obj-000004.dat");
}

TEST_F(WriteQueueHedgeTest, AHedgeWhoseWritesFailLeavesTheObjectToTheLateCopy) {
  store_->slow = milliseconds(300);
  store_->fail_siblings = true;
  {
    WriteQueue q(*store_, WriteQueueOptions{});
    Status st = WriteObject(q, "d/obj-000005.dat", data_.size());
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(q.objects().size(), 1u);
    EXPECT_EQ(q.objects()[0].name, "d/obj-000005.dat");
  }
  EXPECT_EQ(Read("d/obj-000005.dat"), data_);
  EXPECT_EQ(Listed(), std::vector<std::string>{"d/obj-000005.dat"}) << "the failed copy was not removed";
  EXPECT_EQ(store_->Stats().objects_hedged, 1u);
  EXPECT_EQ(store_->Stats().hedges_won, 0u);
}

TEST_F(WriteQueueHedgeTest, WithHedgingOffNothingIsHeldOrWrittenTwice) {
  store_->slow = milliseconds(200);
  store_->policy_.enabled = false;
  std::vector<uint64_t> order;
  {
    WriteQueue q(*store_, WriteQueueOptions{nullptr, nullptr, 0, [&](uint64_t tag) { order.push_back(tag); }, 0});
    ASSERT_TRUE(q.BeginObject("d/obj-000006.dat", data_.size(), /*placed=*/true).ok());
    for (int i = 0; i < kWrites; ++i) ASSERT_TRUE(q.Write(i * kIo, bufs_[i].data(), kIo, i, false).ok());
    while (q.in_flight() > 0) ASSERT_TRUE(q.ReapOne().ok());
    EXPECT_EQ(order.size(), static_cast<size_t>(kWrites)) << "held with hedging off";
    ASSERT_TRUE(q.EndObject(data_.size()).ok());
    ASSERT_TRUE(q.Finish().ok());
  }
  EXPECT_EQ(store_->creates, 1);
  EXPECT_EQ(Listed(), std::vector<std::string>{"d/obj-000006.dat"});
}

}  // namespace
}  // namespace sluice
