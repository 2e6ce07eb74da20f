// The write queue on its own, over the real file backend (O_DIRECT, so
// every buffer, offset and length must be aligned): bytes land exactly
// across objects of any size, whether they come as the caller's buffers or
// through the queue's own; a failed write or a failed completion stops the
// queue, hands every caller buffer back exactly once, finishes no object
// after it and leaks no token-bucket slot; at most a few objects are open.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/write_queue.h"
#include "sluice/aligned_buffer.h"
#include "io/token_bucket.h"
#include "sluice/backend_wrapper.h"

namespace sluice {
namespace {

std::string Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// Counts objects open at once, and fails the Nth StartWrite (or completes
// it with an error) when told to.
struct Faults {
  int fail_start_at = -1;     // StartWrite number that returns an error
  int fail_complete_at = -1;  // StartWrite number whose completion carries one
  int starts = 0;
  int open = 0;
  int max_open = 0;
  int finished = 0;
};

class FaultyObject final : public WritableObjectWrapper {
 public:
  FaultyObject(std::unique_ptr<WritableObject> inner, Faults* f)
      : WritableObjectWrapper(std::move(inner)), f_(f) {
    f_->max_open = std::max(f_->max_open, ++f_->open);
  }
  ~FaultyObject() override { --f_->open; }
  Status StartWrite(uint64_t offset, const void* data, size_t len, uint64_t tag) override {
    const int n = f_->starts++;
    if (n == f_->fail_start_at) return Status::IOError("injected: start write " + std::to_string(n));
    if (n == f_->fail_complete_at) failing_tag_ = tag;
    return WritableObjectWrapper::StartWrite(offset, data, len, tag);
  }
  Result<IoCompletion> Reap() override {
    ASSIGN_OR_RETURN(IoCompletion c, WritableObjectWrapper::Reap());
    if (failing_tag_ && c.tag == *failing_tag_) c.status = Status::IOError("injected: completion");
    return c;
  }
  Status Finish(uint64_t size) override {
    ++f_->finished;
    return WritableObjectWrapper::Finish(size);
  }

 private:
  Faults* f_;
  std::optional<uint64_t> failing_tag_;
};

class FaultyBackend final : public BackendWrapper {
 public:
  FaultyBackend(std::unique_ptr<Backend> inner, Faults* f) : BackendWrapper(std::move(inner)), f_(f) {}
  Result<std::unique_ptr<WritableObject>> Create(const std::string& n, const CreateOptions& o) override {
    ASSIGN_OR_RETURN(auto w, BackendWrapper::Create(n, o));
    return std::unique_ptr<WritableObject>(new FaultyObject(std::move(w), f_));
  }

 private:
  Faults* f_;
};

class WriteQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-wq-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Reopen(4);
  }
  void Reopen(int qd) {
    backend_.reset();
    auto b = OpenBackend(dir_ + "?qd=" + std::to_string(qd), true);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend_ = std::make_unique<FaultyBackend>(std::move(b).value(), &faults_);
  }
  void TearDown() override {
    backend_.reset();
    std::string cmd = "rm -rf " + dir_;
    (void)std::system(cmd.c_str());
  }
  std::string ReadObject(const std::string& name) {
    auto r = backend_->Open(name, {});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return "";
    std::string out((*r)->size(), '\0');
    auto buf = AlignedBuffer::Allocate(AlignUp(out.size() + 1, 4096));
    EXPECT_TRUE(buf.ok());
    EXPECT_TRUE((*r)->StartRead(0, buf->data(), buf->size(), 0).ok());
    auto c = (*r)->Reap();
    EXPECT_TRUE(c.ok() && c->status.ok());
    std::memcpy(out.data(), buf->data(), out.size());
    return out;
  }

  std::string dir_;
  Faults faults_;
  std::unique_ptr<Backend> backend_;
};

// Objects of odd sizes, written through the queue's own buffers in odd
// pieces, come out exact (padded tails trimmed), and no more than a few
// objects are ever open at once.
TEST_F(WriteQueueTest, OwnedBuffersWriteExactBytesAcrossManyObjects) {
  std::map<std::string, std::string> want;
  for (int i = 0; i < 9; ++i) want["obj" + std::to_string(i)] = Bytes(i * 300'007 + (i % 3) * 4096 + 1, i);
  {
    WriteQueue q(*backend_, WriteQueueOptions{nullptr, nullptr, 0, nullptr, 64 << 10});
    for (const auto& [name, bytes] : want) {
      ASSERT_TRUE(q.BeginObject(name, 0).ok());
      size_t at = 0, piece = 1;
      while (at < bytes.size()) {
        auto space = q.Space();
        ASSERT_TRUE(space.ok()) << space.status().ToString();
        size_t n = std::min({piece, space->second, bytes.size() - at});
        std::memcpy(space->first, bytes.data() + at, n);
        ASSERT_TRUE(q.Fill(n).ok());
        at += n;
        piece = piece * 7 % 100'003 + 1;
      }
      ASSERT_TRUE(q.EndObject(bytes.size()).ok());
    }
    ASSERT_TRUE(q.Finish().ok()) << q.error().ToString();
    ASSERT_EQ(q.objects().size(), want.size());
  }
  for (const auto& [name, bytes] : want) EXPECT_TRUE(ReadObject(name) == bytes) << name;
  EXPECT_EQ(faults_.finished, static_cast<int>(want.size()));
}

// Each open object holds a descriptor and an I/O ring on a file store:
// however deep the queue, a stream of one-write objects keeps at most three
// open.
TEST_F(WriteQueueTest, AtMostThreeObjectsAreOpenAtOnce) {
  Reopen(16);
  WriteQueue q(*backend_, WriteQueueOptions{nullptr, nullptr, 0, nullptr, 64 << 10});
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(q.BeginObject("tiny" + std::to_string(i), 0).ok());
    auto space = q.Space();
    ASSERT_TRUE(space.ok());
    std::memset(space->first, i, 1000);
    ASSERT_TRUE(q.Fill(1000).ok());
    ASSERT_TRUE(q.EndObject(1000).ok());
  }
  ASSERT_TRUE(q.Finish().ok()) << q.error().ToString();
  EXPECT_EQ(q.objects().size(), 40u);
  EXPECT_LE(faults_.max_open, 3);
}

// Failures: a write that cannot start, or one that completes with an error.
// Every caller buffer comes back exactly once, no object is finished after
// the error, and the bucket's slots are all free again.
TEST_F(WriteQueueTest, AFailedWriteStopsTheQueueAndReturnsEveryBuffer) {
  for (int mode = 0; mode < 2; ++mode) {
    for (int fail_at : {0, 3, 9, 14}) {
      SCOPED_TRACE("mode " + std::to_string(mode) + ", write " + std::to_string(fail_at));
      faults_ = Faults{};
      (mode == 0 ? faults_.fail_start_at : faults_.fail_complete_at) = fail_at;
      TokenBucket bucket(0, 1, 1);  // one slot: a leaked one shows
      std::map<uint64_t, int> returned;
      const size_t io = 64 << 10;
      std::vector<AlignedBuffer> bufs;
      for (int i = 0; i < 16; ++i) {
        auto b = AlignedBuffer::Allocate(io);
        ASSERT_TRUE(b.ok());
        std::memset(b->data(), i, io);
        bufs.push_back(std::move(b).value());
      }
      Status last;
      int started = 0;
      {
        WriteQueue q(*backend_, WriteQueueOptions{&bucket, nullptr, 0,
                                                  [&](uint64_t tag) { ++returned[tag]; }, 0});
        const std::string name = "f" + std::to_string(mode) + "-" + std::to_string(fail_at);
        for (int obj = 0; obj < 4 && last.ok(); ++obj) {
          last = q.BeginObject(name + "-" + std::to_string(obj), 0);
          for (int w = 0; w < 4 && last.ok(); ++w) {
            last = q.Write(w * io, bufs[obj * 4 + w].data(), io, obj * 4 + w, false);
            ++started;
          }
          if (last.ok()) last = q.EndObject(4 * io);
        }
        if (last.ok()) last = q.Finish();
        EXPECT_FALSE(last.ok());
        EXPECT_TRUE(q.WaitOut());
        EXPECT_EQ(q.in_flight(), 0u);
        EXPECT_LE(q.objects().size(), static_cast<size_t>(fail_at / 4)) << "an object after the error was finished";
      }
      ASSERT_EQ(returned.size(), static_cast<size_t>(started)) << "buffers not handed back";
      for (const auto& [tag, times] : returned) EXPECT_EQ(times, 1) << "buffer " << tag;
      EXPECT_FALSE(bucket.WouldWait(1)) << "a token-bucket slot leaked";
    }
  }
}

}  // namespace
}  // namespace sluice
