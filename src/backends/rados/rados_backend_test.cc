// What the RADOS backend promises beyond the conformance suite, against a
// real cluster: SLUICE_RADOS_URI (as printed by scripts/ceph-dev-cluster
// env; tests/ceph_test.sh runs this). Without it every test skips, visibly.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "engine/write_queue.h"
#include "sluice/aligned_buffer.h"
#include "sluice/backend.h"

namespace sluice {
namespace {

// The messenger lives in libceph-common, which carries its own copy of the
// bufferlist code and so its own crc cache counters (librados exports
// another copy, under its own symbol version, to its users): the counters
// that tell what the messenger did are libceph-common's.
struct MessengerCrcCounters {
  void (*track)(bool) = nullptr;
  int (*hits)() = nullptr;
  int (*adjusted)() = nullptr;
  bool Load() {
    void* lib = dlopen("libceph-common.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) lib = dlopen("/usr/lib/x86_64-linux-gnu/ceph/libceph-common.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (lib == nullptr) return false;
    track = reinterpret_cast<void (*)(bool)>(dlsym(lib, "_ZN4ceph6buffer7v15_2_016track_cached_crcEb"));
    hits = reinterpret_cast<int (*)()>(dlsym(lib, "_ZN4ceph6buffer7v15_2_014get_cached_crcEv"));
    adjusted = reinterpret_cast<int (*)()>(dlsym(lib, "_ZN4ceph6buffer7v15_2_023get_cached_crc_adjustedEv"));
    return track && hits && adjusted;
  }
};

class RadosBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* uri = std::getenv("SLUICE_RADOS_URI");
    if (uri == nullptr || *uri == '\0') GTEST_SKIP() << "SLUICE_RADOS_URI not set: no Ceph cluster to test against";
    std::string u = uri;
    size_t q = u.find('?');
    char unique[40];
    snprintf(unique, sizeof unique, "/rados-test-%016llx",
             static_cast<unsigned long long>(std::random_device{}()) << 20 ^ static_cast<unsigned long long>(getpid()));
    u = u.substr(0, q) + unique + (q == std::string::npos ? "" : u.substr(q));
    auto b = OpenBackend(u, true);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend_ = std::move(b).value();
  }
  void TearDown() override {
    if (!backend_) return;
    auto left = backend_->List("");
    ASSERT_TRUE(left.ok()) << left.status().ToString();
    for (const auto& o : *left) EXPECT_TRUE(backend_->Remove(o.name).ok()) << o.name;
  }

  // Writes `writes` pieces of `io` bytes, each checksummed through
  // ChecksumForWrite first when `checksum`; returns how many crcs the
  // client's bufferlists took from their cache meanwhile.
  int WriteCountingCachedCrcs(const std::string& name, int writes, size_t io, bool checksum) {
    auto buf = AlignedBuffer::Allocate(writes * io);
    EXPECT_TRUE(buf.ok());
    if (!buf.ok()) return -1;
    for (size_t i = 0; i < buf->size(); ++i) buf->data()[i] = static_cast<uint8_t>(i * 131 + i / 4099);
    auto w = backend_->Create(name, CreateOptions{buf->size()});
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    if (!w.ok()) return -1;
    EXPECT_NE(backend_->caps().transport_checksum, nullptr) << "RADOS offers its transport checksum";
    if (backend_->caps().transport_checksum == nullptr) return -1;
    MessengerCrcCounters crcs;
    EXPECT_TRUE(crcs.Load()) << dlerror();
    if (!crcs.track) return -1;
    crcs.track(true);
    const int before = crcs.hits() + crcs.adjusted();
    for (int i = 0; i < writes; ++i) {
      uint8_t* p = buf->data() + i * io;
      if (checksum) (void)backend_->caps().transport_checksum->ChecksumForWrite(**w, 0, p, io);
      while ((*w)->in_flight() >= (*w)->queue_depth()) EXPECT_TRUE((*w)->Reap().ok());
      EXPECT_TRUE((*w)->StartWrite(i * io, p, io, i).ok());
    }
    while ((*w)->in_flight() > 0) {
      auto c = (*w)->Reap();
      EXPECT_TRUE(c.ok() && c->status.ok());
    }
    EXPECT_TRUE((*w)->Finish(buf->size()).ok());
    return crcs.hits() + crcs.adjusted() - before;
  }

  std::unique_ptr<Backend> backend_;
};

// The messenger checksums every message it sends. Bytes the writer already
// checksummed through ChecksumForWrite must not be hashed a second time:
// the send finds their crc in the buffer's cache.
TEST_F(RadosBackendTest, BytesChecksummedForAWriteAreNotHashedAgainToSendThem) {
  const int writes = 8;
  const size_t io = 4 << 20;
  int plain = WriteCountingCachedCrcs("plain", writes, io, false);
  int summed = WriteCountingCachedCrcs("summed", writes, io, true);
  printf("# crcs the messenger found cached: %d for %d writes checksummed first, %d for %d plain ones\n",
         summed, writes, plain, writes);
  EXPECT_GE(summed, writes) << "each write's data crc should have come from the cache";
  EXPECT_LT(plain, writes) << "without ChecksumForWrite the messenger hashes the data itself";
}

// The same for the data objects of a save, placed and held for a hedge
// (hedge=on, the default) by the write queue: the caller's bytes are sent
// as they are, and hashed once.
TEST_F(RadosBackendTest, PlacedWritesAreHashedOnceToo) {
  ASSERT_NE(backend_->caps().placement, nullptr) << "hedging is on by default";
  const int writes = 8;
  const size_t io = 4 << 20;
  auto buf = AlignedBuffer::Allocate(writes * io);
  ASSERT_TRUE(buf.ok());
  for (size_t i = 0; i < buf->size(); ++i) buf->data()[i] = static_cast<uint8_t>(i * 131 + i / 4099);
  MessengerCrcCounters crcs;
  ASSERT_TRUE(crcs.Load()) << dlerror();
  crcs.track(true);
  const int before = crcs.hits() + crcs.adjusted();
  const uint64_t submitted = backend_->caps().placement->Stats().bytes_submitted;
  WriteQueue queue(*backend_, WriteQueueOptions{});
  ASSERT_TRUE(queue.BeginObject("placed-000001.dat", buf->size(), /*placed=*/true).ok());
  for (int i = 0; i < writes; ++i) {
    uint8_t* p = buf->data() + i * io;
    (void)queue.Checksum(0, p, io);
    ASSERT_TRUE(queue.Write(i * io, p, io, i, false).ok());
  }
  ASSERT_TRUE(queue.EndObject(buf->size()).ok());
  Status st = queue.Finish();
  ASSERT_TRUE(st.ok()) << st.ToString();
  const int summed = crcs.hits() + crcs.adjusted() - before;
  printf("# placed: crcs the messenger found cached: %d for %d writes checksummed first\n", summed, writes);
  EXPECT_GE(summed, writes) << "each placed write's data crc should have come from the cache";
  EXPECT_EQ(backend_->caps().placement->Stats().bytes_submitted - submitted, writes * io);
  ASSERT_EQ(queue.objects().size(), 1u);
  EXPECT_EQ(queue.objects()[0].size, writes * io);
}

}  // namespace
}  // namespace sluice
