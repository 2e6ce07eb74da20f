#include "io/io_engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "sluice/aligned_buffer.h"

namespace sluice {
namespace {

class IoEngineTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-io-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto e = MakeIoEngine(GetParam(), 8);
    if (!e.ok() && GetParam() == IoEngineKind::kUring) {
      GTEST_SKIP() << "io_uring unavailable on this host: " << e.status().ToString();
    }
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
  }
  void TearDown() override {
    engine_.reset();
    std::string cmd = "rm -rf " + dir_;
    (void)std::system(cmd.c_str());
  }
  std::string dir_;
  std::unique_ptr<IoEngine> engine_;
};

TEST_P(IoEngineTest, WritesAndReadsBackManyRequestsInFlight) {
  std::string path = dir_ + "/f";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  if (fd < 0) fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);  // filesystem without O_DIRECT
  ASSERT_GE(fd, 0);
  constexpr size_t kBlock = 1 << 20;
  constexpr int kBlocks = 24;
  auto out = AlignedBuffer::Allocate(kBlock * kBlocks);
  ASSERT_TRUE(out.ok());
  for (size_t i = 0; i < kBlock * kBlocks; ++i) out->data()[i] = static_cast<uint8_t>(i * 31 + i / 4096);
  int submitted = 0, completed = 0;
  while (completed < kBlocks) {
    while (submitted < kBlocks && engine_->in_flight() < engine_->queue_depth()) {
      IoRequest r{fd, true, uint64_t(submitted) * kBlock, out->data() + submitted * kBlock, kBlock, uint64_t(submitted)};
      ASSERT_TRUE(engine_->Submit(r).ok());
      ++submitted;
    }
    auto c = engine_->Reap();
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(c->status.ok()) << c->status.ToString();
    EXPECT_EQ(c->bytes, kBlock);
    ++completed;
  }
  auto in = AlignedBuffer::Allocate(kBlock * kBlocks);
  ASSERT_TRUE(in.ok());
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_TRUE(engine_->Submit(IoRequest{fd, false, uint64_t(i) * kBlock, in->data() + i * kBlock, kBlock, uint64_t(i)}).ok());
    if (engine_->in_flight() == engine_->queue_depth() || i == kBlocks - 1) {
      while (engine_->in_flight() > 0) {
        auto c = engine_->Reap();
        ASSERT_TRUE(c.ok() && c->status.ok());
        EXPECT_EQ(c->bytes, kBlock);
      }
    }
  }
  EXPECT_EQ(std::memcmp(in->data(), out->data(), kBlock * kBlocks), 0);
  ::close(fd);
}

TEST_P(IoEngineTest, ReadPastEndOfFileStopsShort) {
  std::string path = dir_ + "/short";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "abcdefgh", 8), 8);
  auto buf = AlignedBuffer::Allocate(4096);
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE(engine_->Submit(IoRequest{fd, false, 0, buf->data(), 4096, 5}).ok());
  auto c = engine_->Reap();
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->status.ok());
  EXPECT_EQ(c->tag, 5u);
  EXPECT_EQ(c->bytes, 8u);
  EXPECT_EQ(std::memcmp(buf->data(), "abcdefgh", 8), 0);
  ::close(fd);
}

TEST_P(IoEngineTest, ErrorsComeBackAsStatusWithTheOperation) {
  auto buf = AlignedBuffer::Allocate(4096);
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE(engine_->Submit(IoRequest{-1, true, 4096, buf->data(), 4096, 9}).ok());
  auto c = engine_->Reap();
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->status.ok());
  EXPECT_NE(c->status.message().find("write of 4096 bytes at offset 4096"), std::string::npos)
      << c->status.message();
  EXPECT_EQ(c->tag, 9u);
}

TEST_P(IoEngineTest, RefusesSubmissionBeyondQueueDepth) {
  std::string path = dir_ + "/qd";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  auto buf = AlignedBuffer::Allocate(4096 * 9);
  ASSERT_TRUE(buf.ok());
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(engine_->Submit(IoRequest{fd, true, uint64_t(i) * 4096, buf->data() + i * 4096, 4096, uint64_t(i)}).ok());
  }
  EXPECT_FALSE(engine_->Submit(IoRequest{fd, true, 8 * 4096, buf->data() + 8 * 4096, 4096, 8}).ok());
  while (engine_->in_flight() > 0) ASSERT_TRUE(engine_->Reap().ok());
  ::close(fd);
}

INSTANTIATE_TEST_SUITE_P(Engines, IoEngineTest,
                         ::testing::Values(IoEngineKind::kUring, IoEngineKind::kThreads),
                         [](const auto& info) {
                           return info.param == IoEngineKind::kUring ? "io_uring" : "threads";
                         });

TEST(MakeIoEngine, RejectsAbsurdQueueDepths) {
  EXPECT_FALSE(MakeIoEngine(IoEngineKind::kAuto, 0).ok());
  EXPECT_FALSE(MakeIoEngine(IoEngineKind::kAuto, 100000).ok());
}

}  // namespace
}  // namespace sluice
