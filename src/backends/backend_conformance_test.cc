// The backend conformance suite: one set of behaviours every Backend must
// have, run against every backend configuration. A new backend adds its URIs
// to BackendUris() and must pass unchanged.
//
// Extra file-store roots (e.g. XFS and btrfs mounts made by
// tests/filesystems_test.sh) come from SLUICE_CONFORMANCE_ROOTS, a
// ':'-separated list of directories. A RADOS store comes from
// SLUICE_RADOS_URI (rados://POOL/PREFIX?conf=...&id=..., as printed by
// scripts/ceph-dev-cluster env; tests/ceph_test.sh sets it), and an S3 store
// from SLUICE_S3_URI (s3://BUCKET/PREFIX?endpoint=..., its credentials in
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY): each test then works under its
// own random sub-prefix of PREFIX, and removes what it made.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/write_queue.h"
#include "sluice/aligned_buffer.h"
#include "io/crc32c.h"
#include "sluice/backend.h"

namespace sluice {
namespace {

OpenOptions KnownSize(uint64_t size) {
  OpenOptions o;
  o.known_size = size;
  return o;
}

struct BackendConfig {
  std::string label;
  std::string root;    // directory for file stores
  std::string query;   // URI options
  std::string uri;     // other stores: a full URI; each test gets its own sub-prefix
  int extra_dirs = 0;  // file stores over several directories: how many besides the first (dirs=)
};

std::vector<BackendConfig> BackendUris() {
  std::vector<BackendConfig> out;
  const char* tmp = std::getenv("SLUICE_TEST_DIR");
  std::string base = tmp ? tmp : "/tmp";
  out.push_back({"file_auto", base, "", ""});
  out.push_back({"file_threads", base, "io=threads", ""});
  out.push_back({"file_buffered", base, "direct=off", ""});
  out.push_back({"file_threads_buffered", base, "io=threads&direct=off&qd=3", ""});
  // Over several directories: objects spread, hedged writes on.
  out.push_back({"file_dirs3", base, "", "", 2});
  out.push_back({"file_dirs2_threads_hedge_off", base, "io=threads&hedge=off", "", 1});
  if (const char* roots = std::getenv("SLUICE_CONFORMANCE_ROOTS")) {
    std::string s = roots;
    size_t pos = 0;
    int n = 0;
    while (pos <= s.size()) {
      size_t colon = s.find(':', pos);
      std::string r = s.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
      if (!r.empty()) {
        out.push_back({"root" + std::to_string(n) + "_auto", r, "", ""});
        out.push_back({"root" + std::to_string(n) + "_threads", r, "io=threads", ""});
        ++n;
      }
      if (colon == std::string::npos) break;
      pos = colon + 1;
    }
  }
  if (const char* rados = std::getenv("SLUICE_RADOS_URI"); rados != nullptr && *rados != '\0') {
    std::string uri = rados;
    out.push_back({"rados", "", "", uri});
    // Few writes in flight: completions come back in whatever order.
    out.push_back({"rados_qd2", "", "", uri + (uri.find('?') == std::string::npos ? "?" : "&") + "qd=2"});
  }
  if (const char* s3 = std::getenv("SLUICE_S3_URI"); s3 != nullptr && *s3 != '\0') {
    std::string uri = s3;
    const char* sep = uri.find('?') == std::string::npos ? "?" : "&";
    out.push_back({"s3", "", "", uri});
    // Parts of the smallest size, two writes in flight: writes gather into
    // parts, and a writer that keeps less than a part in flight still moves.
    out.push_back({"s3_part5_qd2", "", "", uri + sep + "part_mib=5&qd=2"});
  }
  return out;
}

// `uri` with "/<unique>" appended to its location (before any '?').
std::string WithUniquePrefix(const std::string& uri) {
  static std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(::getpid()));
  char unique[32];
  snprintf(unique, sizeof unique, "conf-%016llx", static_cast<unsigned long long>(rng()));
  size_t q = uri.find('?');
  std::string location = uri.substr(0, q);
  while (!location.empty() && location.back() == '/') location.pop_back();
  return location + "/" + unique + (q == std::string::npos ? "" : uri.substr(q));
}

class BackendConformance : public ::testing::TestWithParam<BackendConfig> {
 protected:
  void SetUp() override {
    if (!GetParam().uri.empty()) {
      uri_ = WithUniquePrefix(GetParam().uri);
      auto b = OpenBackend(uri_, true);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      backend_ = std::move(b).value();
      return;
    }
    std::string tmpl = GetParam().root + "/sluice-conf-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    ASSERT_NE(mkdtemp(buf.data()), nullptr) << "cannot make a directory under " << GetParam().root;
    dir_ = buf.data();
    std::string query = GetParam().query;
    for (int i = 0; i < GetParam().extra_dirs; ++i) {
      std::vector<char> more(tmpl.begin(), tmpl.end());
      more.push_back('\0');
      ASSERT_NE(mkdtemp(more.data()), nullptr);
      extra_dirs_.push_back(more.data());
      query += std::string(i == 0 ? (query.empty() ? "" : "&") + std::string("dirs=") : ",") + more.data();
    }
    uri_ = "file://" + dir_ + (query.empty() ? "" : "?" + query);
    auto b = OpenBackend(uri_, true);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend_ = std::move(b).value();
  }
  void TearDown() override {
    if (!GetParam().uri.empty()) {
      if (backend_) {
        auto left = backend_->List("");
        ASSERT_TRUE(left.ok()) << left.status().ToString();
        for (const auto& o : *left) EXPECT_TRUE(backend_->Remove(o.name).ok()) << o.name;
      }
      backend_.reset();
      return;
    }
    backend_.reset();
    std::string cmd = "rm -rf '" + dir_ + "'";
    for (const auto& d : extra_dirs_) cmd += " '" + d + "'";
    (void)std::system(cmd.c_str());
  }

  // Writes `data` as object `name` through the asynchronous path, in
  // io-sized pieces, honouring the backend's alignment.
  void WriteObject(const std::string& name, const std::string& data, size_t io = 1 << 16) {
    auto w = backend_->Create(name, CreateOptions{data.size()});
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    const size_t align = backend_->caps().io_alignment;
    size_t padded = AlignUp(data.size(), align);
    auto buf = AlignedBuffer::Allocate(std::max<size_t>(padded, 1));
    ASSERT_TRUE(buf.ok());
    std::memset(buf->data(), 0, buf->size());
    std::memcpy(buf->data(), data.data(), data.size());
    io = AlignUp(io, align);
    for (size_t off = 0; off < padded; off += io) {
      while ((*w)->in_flight() >= (*w)->queue_depth()) {
        auto c = (*w)->Reap();
        ASSERT_TRUE(c.ok() && c->status.ok());
      }
      size_t len = std::min(io, padded - off);
      ASSERT_TRUE((*w)->StartWrite(off, buf->data() + off, len, off).ok());
    }
    while ((*w)->in_flight() > 0) {
      auto c = (*w)->Reap();
      ASSERT_TRUE(c.ok());
      ASSERT_TRUE(c->status.ok()) << c->status.ToString();
    }
    Status st = (*w)->Finish(data.size());
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  // Writes `data` through a write queue as one placed object (named by the
  // backend's Placement where it has one); the first error comes back, and
  // *stored the name the queue lists the object under.
  Status WritePlaced(const std::string& name, const std::string& data, std::string* stored,
                     size_t io = 1 << 20) {
    const size_t align = backend_->caps().io_alignment;
    const size_t padded = AlignUp(data.size(), align);
    auto buf = AlignedBuffer::Allocate(std::max<size_t>(padded, 1));
    if (!buf.ok()) return buf.status();
    std::memset(buf->data(), 0, buf->size());
    std::memcpy(buf->data(), data.data(), data.size());
    io = AlignUp(io, align);
    WriteQueue queue(*backend_, WriteQueueOptions{});
    RETURN_IF_ERROR(queue.BeginObject(name, data.size(), /*placed=*/true));
    for (size_t off = 0; off < padded; off += io) {
      RETURN_IF_ERROR(queue.Write(off, buf->data() + off, std::min(io, padded - off), off, false));
    }
    RETURN_IF_ERROR(queue.EndObject(data.size()));
    RETURN_IF_ERROR(queue.Finish());
    if (queue.objects().size() != 1) return Status::IOError("the queue lists " + std::to_string(queue.objects().size()));
    *stored = queue.objects()[0].name;
    return Status::OK();
  }

  std::string ReadObject(const std::string& name, uint64_t offset, size_t len) {
    auto r = backend_->Open(name, {});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return "";
    const size_t align = backend_->caps().io_alignment;
    uint64_t start = AlignDown(offset, align);
    size_t span = AlignUp(offset + len, align) - start;
    auto buf = AlignedBuffer::Allocate(std::max<size_t>(span, 1));
    EXPECT_TRUE(buf.ok());
    EXPECT_TRUE((*r)->StartRead(start, buf->data(), span, 1).ok());
    auto c = (*r)->Reap();
    EXPECT_TRUE(c.ok() && c->status.ok());
    size_t have = c->bytes > offset - start ? c->bytes - (offset - start) : 0;
    return std::string(reinterpret_cast<char*>(buf->data()) + (offset - start), std::min(have, len));
  }

  std::string dir_;
  std::vector<std::string> extra_dirs_;  // a multi-directory store's other directories
  std::string uri_;
  std::unique_ptr<Backend> backend_;
};

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (auto& c : s) {
    x ^= x << 13; x ^= x >> 17; x ^= x << 5;
    c = static_cast<char>(x);
  }
  return s;
}

TEST_P(BackendConformance, AdvertisesAtomicPublishAndAnIoPath) {
  EXPECT_TRUE(backend_->caps().atomic_publish_if_absent);
  EXPECT_FALSE(backend_->caps().io_path.empty());
  EXPECT_GE(backend_->caps().io_alignment, 1u);
}

TEST_P(BackendConformance, WrittenObjectReadsBackExactlyAtAnyOffset) {
  const std::string data = Pattern(3 * 1048576 + 12345, 1);  // unaligned length
  WriteObject("a/b/obj.dat", data);
  EXPECT_EQ(ReadObject("a/b/obj.dat", 0, data.size()), data);
  EXPECT_EQ(ReadObject("a/b/obj.dat", 1048577, 4000), data.substr(1048577, 4000));
  EXPECT_EQ(ReadObject("a/b/obj.dat", data.size() - 7, 7), data.substr(data.size() - 7));
  auto r = backend_->Open("a/b/obj.dat", {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->size(), data.size()) << "Finish must set the logical size";
}

TEST_P(BackendConformance, ReadPastEndStopsShort) {
  WriteObject("short", "hello");
  EXPECT_EQ(ReadObject("short", 0, 100000), "hello");
}

// A reader that lets the backend lend its buffers (the chunk reader) gets
// every byte, from wherever it landed, and a crc the backend offers for a
// read is the crc of exactly those bytes: the chunk reader checks chunks by it.
TEST_P(BackendConformance, LentReadsHandOutTheBytesAndTheirCrc) {
  const size_t piece = 1 << 20;
  const std::string data = Pattern(4 * piece + 777, 5);  // the last read is short
  WriteObject("lent", data, piece);
  auto r = backend_->Open("lent", {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  if (const LentReadBuffers* lending = backend_->caps().lent_read_buffers) lending->Allow(**r);
  const size_t reads = (data.size() + piece - 1) / piece;
  auto buf = AlignedBuffer::Allocate(reads * piece);
  ASSERT_TRUE(buf.ok());
  size_t reaped = 0, offered = 0;
  auto reap_one = [&] {
    auto c = (*r)->Reap();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE(c->status.ok()) << c->status.ToString();
    const size_t off = static_cast<size_t>(c->tag) * piece;
    ASSERT_EQ(c->bytes, std::min(piece, data.size() - off)) << "read " << c->tag;
    const uint8_t* got = c->data != nullptr ? c->data : buf->data() + off;
    EXPECT_EQ(std::memcmp(got, data.data() + off, c->bytes), 0) << "read " << c->tag;
    if (c->crc32c) {
      ++offered;
      EXPECT_EQ(c->crc32c(), Crc32c(data.data() + off, c->bytes)) << "read " << c->tag;
    }
    ++reaped;
  };
  for (size_t i = 0; i < reads; ++i) {
    while ((*r)->in_flight() >= (*r)->queue_depth()) reap_one();
    ASSERT_TRUE((*r)->StartRead(i * piece, buf->data() + i * piece, piece, i).ok());
  }
  while ((*r)->in_flight() > 0) reap_one();
  EXPECT_EQ(reaped, reads);
  if (GetParam().uri.rfind("rados://", 0) == 0) {
    EXPECT_EQ(offered, reads) << "RADOS offers the crc of every read";
  }
}

// Writers checksum chunks through the backend's TransportChecksum where it
// has one (ChecksumForWrite below): it must be exactly
// Crc32cExtend, whatever it caches, and the write that follows (covering
// the checksummed pieces, the gaps between them, and pieces checksummed but
// never written) must store the bytes unchanged.
// What a writer does: the backend's TransportChecksum where it offers one,
// the plain CRC otherwise.
uint32_t ChecksumForWrite(Backend& backend, WritableObject& w, uint32_t crc, const void* data, size_t len) {
  if (const TransportChecksum* t = backend.caps().transport_checksum) return t->ChecksumForWrite(w, crc, data, len);
  return Crc32cExtend(crc, data, len);
}

TEST_P(BackendConformance, ChecksumForWriteIsTheChunkCrcAndWritesStayExact) {
  const size_t align = backend_->caps().io_alignment;
  const size_t io = AlignUp(size_t{1} << 20, align);
  const std::string data = Pattern(3 * io, 11);
  auto buf = AlignedBuffer::Allocate(data.size());
  ASSERT_TRUE(buf.ok());
  std::memcpy(buf->data(), data.data(), data.size());
  auto w = backend_->Create("summed", CreateOptions{data.size()});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  // Pieces of each write: large and small ones, a chained crc across two
  // pieces, and a gap that is never checksummed.
  struct Piece { size_t off, len; };
  const std::vector<std::vector<Piece>> plan = {
      {{0, io}},                                                    // one piece, the whole write
      {{io, 100}, {io + 100, 399900}, {io + 400000, io - 400000}},  // small + large, contiguous
      {{2 * io + 4096, 70000}, {2 * io + 200000, 100000}},          // gaps before, between, after
  };
  for (size_t k = 0; k < plan.size(); ++k) {
    uint32_t chained = 0;
    for (const Piece& p : plan[k]) {
      uint32_t got = ChecksumForWrite(*backend_, **w, 0, buf->data() + p.off, p.len);
      EXPECT_EQ(got, Crc32c(data.data() + p.off, p.len)) << "write " << k << " piece at " << p.off;
      if (k == 1) chained = ChecksumForWrite(*backend_, **w, chained, buf->data() + p.off, p.len);
    }
    if (k == 1) {
      EXPECT_EQ(chained, Crc32c(data.data() + io, io)) << "a crc extended piece by piece";
    }
    ASSERT_TRUE((*w)->StartWrite(k * io, buf->data() + k * io, io, k).ok());
    if ((*w)->in_flight() >= (*w)->queue_depth()) {
      auto c = (*w)->Reap();
      ASSERT_TRUE(c.ok() && c->status.ok());
    }
  }
  // Checksummed and then not written: the next write (other memory) goes
  // out whole, and a later write of those bytes, changed meanwhile, carries
  // their new contents. (On RADOS a crc kept from before the change would
  // make the OSD refuse the write.)
  auto reap_all = [&] {
    while ((*w)->in_flight() > 0) {
      auto c = (*w)->Reap();
      ASSERT_TRUE(c.ok());
      ASSERT_TRUE(c->status.ok()) << c->status.ToString();
    }
  };
  reap_all();  // the bytes of the first write change below
  std::string tail = Pattern(2 * io, 12);
  auto other = AlignedBuffer::Allocate(io);
  ASSERT_TRUE(other.ok());
  std::memcpy(other->data(), tail.data(), io);
  (void)ChecksumForWrite(*backend_, **w, 0, buf->data(), io);
  ASSERT_TRUE((*w)->StartWrite(3 * io, other->data(), io, 3).ok());
  reap_all();
  std::memcpy(buf->data(), tail.data() + io, io);
  ASSERT_TRUE((*w)->StartWrite(4 * io, buf->data(), io, 4).ok());
  reap_all();
  ASSERT_TRUE((*w)->Finish(5 * io).ok());
  w->reset();
  EXPECT_TRUE(ReadObject("summed", 0, data.size()) == data) << "the object's bytes differ from what was written";
  EXPECT_TRUE(ReadObject("summed", 3 * io, 2 * io) == tail) << "the writes after an unwritten checksum differ";
}

TEST_P(BackendConformance, EmptyObject) {
  WriteObject("empty", "");
  auto r = backend_->Open("empty", {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->size(), 0u);
}

TEST_P(BackendConformance, CreateExistingIsAlreadyExistsAndLeavesItAlone) {
  WriteObject("x", "original");
  auto again = backend_->Create("x", CreateOptions{0});
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(again.status().IsAlreadyExists()) << again.status().ToString();
  EXPECT_EQ(ReadObject("x", 0, 100), "original");
}

TEST_P(BackendConformance, PlacedObjectsLiveUnderTheOneNameTheQueueLists) {
  const std::string data = Pattern(5 * 1048576 + 777, 9);
  std::string stored;
  Status st = WritePlaced("r/obj-000001.dat", data, &stored);
  ASSERT_TRUE(st.ok()) << st.ToString();
  // Beside the name asked for: same place, same extension.
  EXPECT_EQ(stored.rfind("r/obj-000001", 0), 0u) << stored;
  EXPECT_EQ(stored.substr(stored.size() - 4), ".dat") << stored;
  EXPECT_EQ(ReadObject(stored, 0, data.size()), data);
  // One copy only: whatever was written elsewhere on the way is gone.
  auto listed = backend_->List("r/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, stored);
  EXPECT_EQ((*listed)[0].size, data.size());
  // An object never written is created empty all the same.
  st = WritePlaced("r/empty.dat", "", &stored);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto r = backend_->Open(stored, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->size(), 0u);
}

TEST_P(BackendConformance, APlacementNamesSiblingsElsewhereAndNeverATakenName) {
  Placement* placement = backend_->caps().placement;
  if (placement == nullptr) GTEST_SKIP() << "no Placement on this backend";
  bool avoided = true;
  const std::string first = placement->Place("p/obj-000002.dat", {}, &avoided);
  ASSERT_FALSE(first.empty());
  const std::string second = placement->Place("p/obj-000002.dat", {first}, &avoided);
  if (second.empty()) return;  // one placement only (a multi-directory store of one)
  EXPECT_NE(second, first);
  EXPECT_EQ(second.rfind("p/obj-000002", 0), 0u) << second;
  EXPECT_EQ(second.substr(second.size() - 4), ".dat") << second;
  const std::string third = placement->Place("p/obj-000002.dat", {first, second}, &avoided);
  EXPECT_TRUE(third.empty() || (third != first && third != second)) << third;
  // Each is an ordinary name: created, written and read as any other.
  WriteObject(second, "sibling");
  EXPECT_EQ(ReadObject(second, 0, 7), "sibling");
}

TEST_P(BackendConformance, ReapUntilGivesUpAtItsDeadlineAndLosesNothing) {
  const std::string data = Pattern(4 << 20, 5);
  auto buf = AlignedBuffer::Allocate(data.size());
  ASSERT_TRUE(buf.ok());
  std::memcpy(buf->data(), data.data(), data.size());
  auto w = backend_->Create("reap/obj.dat", CreateOptions{data.size()});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const size_t io = 1 << 20;
  size_t started = 0;
  for (size_t off = 0; off < data.size() && (*w)->in_flight() < (*w)->queue_depth(); off += io, ++started) {
    ASSERT_TRUE((*w)->StartWrite(off, buf->data() + off, io, off).ok());
  }
  // A deadline already past waits for nothing: a completion, or none.
  std::set<uint64_t> tags;
  auto now = (*w)->ReapUntil(std::chrono::steady_clock::now() - std::chrono::seconds(1));
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  if (now->has_value()) tags.insert((*now)->tag);
  while ((*w)->in_flight() > 0) {
    auto c = (*w)->ReapUntil(std::chrono::steady_clock::now() + std::chrono::seconds(30));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE(c->has_value()) << "no write completed in 30 s";
    EXPECT_TRUE((*c)->status.ok()) << (*c)->status.ToString();
    EXPECT_TRUE(tags.insert((*c)->tag).second) << "tag " << (*c)->tag << " reaped twice";
  }
  EXPECT_EQ(tags.size(), started);
  ASSERT_TRUE((*w)->Finish(started * io).ok());
  EXPECT_EQ(ReadObject("reap/obj.dat", 0, started * io), data.substr(0, started * io));
}

TEST_P(BackendConformance, APlacedObjectNeverWritesIntoAnExistingName) {
  WriteObject("r/taken.dat", "original");
  std::string stored;
  Status st = WritePlaced("r/taken.dat", Pattern(2 * 1048576, 3), &stored);
  if (backend_->caps().placement == nullptr) {
    EXPECT_TRUE(st.IsAlreadyExists()) << st.ToString();
  } else {
    // Placed beside the name, or refused as taken; never into it.
    EXPECT_TRUE(st.IsAlreadyExists() || (st.ok() && stored != "r/taken.dat")) << st.ToString() << " " << stored;
  }
  auto r = backend_->Open("r/taken.dat", {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->size(), 8u);
  EXPECT_EQ(ReadObject("r/taken.dat", 0, 8), "original");
}

TEST_P(BackendConformance, MissingObjectsAreNotFound) {
  auto r = backend_->Open("nope", {});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsNotFound());
  EXPECT_TRUE(backend_->ReadSmall("nope/deeper").status().IsNotFound());
  EXPECT_TRUE(backend_->Remove("nope").IsNotFound());
}

TEST_P(BackendConformance, OpenWithAKnownSizeReadsLikeOpenAndAMissingObjectIsNotFound) {
  const std::string data = Pattern(3 << 20, 11);
  WriteObject("known/obj.dat", data);
  auto r = backend_->Open("known/obj.dat", KnownSize(data.size()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->size(), data.size());
  auto buf = AlignedBuffer::Allocate(data.size());
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE((*r)->StartRead(0, buf->data(), data.size(), 7).ok());
  auto c = (*r)->Reap();
  ASSERT_TRUE(c.ok() && c->status.ok());
  ASSERT_EQ(c->bytes, data.size());
  const uint8_t* got = c->data != nullptr ? c->data : buf->data();
  EXPECT_TRUE(std::string(reinterpret_cast<const char*>(got), c->bytes) == data);
  // Missing: NotFound, at the open or at the first read.
  auto missing = backend_->Open("known/nope.dat", KnownSize(4096));
  if (missing.ok()) {
    auto mbuf = AlignedBuffer::Allocate(4096);
    ASSERT_TRUE(mbuf.ok());
    Status started = (*missing)->StartRead(0, mbuf->data(), 4096, 1);
    Status read = started;
    if (started.ok()) {
      auto mc = (*missing)->Reap();
      read = mc.ok() ? mc->status : mc.status();
    }
    EXPECT_TRUE(read.IsNotFound()) << read.ToString();
  } else {
    EXPECT_TRUE(missing.status().IsNotFound()) << missing.status().ToString();
  }
}

TEST_P(BackendConformance, PublishIfAbsentIsExclusiveAndWhole) {
  ASSERT_TRUE(backend_->PublishIfAbsent("rec/COMMIT", "first").ok());
  Status second = backend_->PublishIfAbsent("rec/COMMIT", "second");
  EXPECT_TRUE(second.IsAlreadyExists()) << second.ToString();
  auto got = backend_->ReadSmall("rec/COMMIT");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "first");
  // An empty record is a valid record.
  ASSERT_TRUE(backend_->PublishIfAbsent("rec/empty", "").ok());
  EXPECT_EQ(*backend_->ReadSmall("rec/empty"), "");
}

// A record larger than a backend's first read of it (RADOS: 1 MiB, the rest
// read after) comes back whole.
TEST_P(BackendConformance, ALargeRecordIsReadWhole) {
  std::string big(3 * (1 << 20) + 12345, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  ASSERT_TRUE(backend_->PublishIfAbsent("rec/big", big).ok());
  auto got = backend_->ReadSmall("rec/big");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->size(), big.size());
  EXPECT_TRUE(*got == big);
}

TEST_P(BackendConformance, ReplaceSwapsInTheStagedObjectWhole) {
  // Over an existing object (the repair case): the target then holds the
  // staged bytes, large or small, and the staged name is gone.
  const std::string old_bytes = Pattern(2 * 1048576 + 7, 3), new_bytes = Pattern(3 * 1048576 + 11, 4);
  WriteObject("rep/data/obj.dat", old_bytes);
  WriteObject("rep/staged/obj.dat", new_bytes);
  ASSERT_TRUE(backend_->Replace("rep/staged/obj.dat", "rep/data/obj.dat").ok());
  EXPECT_EQ((*backend_->Open("rep/data/obj.dat", {}))->size(), new_bytes.size());
  EXPECT_EQ(ReadObject("rep/data/obj.dat", 0, new_bytes.size()), new_bytes);
  EXPECT_TRUE(backend_->Open("rep/staged/obj.dat", {}).status().IsNotFound());
  // Over nothing, into a prefix that does not exist yet.
  ASSERT_TRUE(backend_->PublishIfAbsent("rep/staged/rec", "record").ok());
  ASSERT_TRUE(backend_->Replace("rep/staged/rec", "rep/new/dir/rec").ok());
  EXPECT_EQ(*backend_->ReadSmall("rep/new/dir/rec"), "record");
  // A staged object that is not there changes nothing.
  EXPECT_TRUE(backend_->Replace("rep/staged/none", "rep/data/obj.dat").IsNotFound());
  EXPECT_EQ((*backend_->Open("rep/data/obj.dat", {}))->size(), new_bytes.size());
  EXPECT_EQ(ReadObject("rep/data/obj.dat", 0, new_bytes.size()), new_bytes);
}

TEST_P(BackendConformance, ConcurrentPublishersExactlyOneWins) {
  for (int round = 0; round < 20; ++round) {
    std::string name = "race/" + std::to_string(round);
    std::atomic<int> wins{0}, losses{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        Status st = backend_->PublishIfAbsent(name, Pattern(100000, t));
        if (st.ok()) ++wins;
        else if (st.IsAlreadyExists()) ++losses;
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(wins.load(), 1) << "round " << round;
    ASSERT_EQ(losses.load(), 7);
    auto got = backend_->ReadSmall(name);
    ASSERT_TRUE(got.ok());
    bool whole = false;
    for (int t = 0; t < 8; ++t) whole |= (*got == Pattern(100000, t));
    EXPECT_TRUE(whole) << "a reader saw a mixed or partial record";
  }
}

TEST_P(BackendConformance, ListFindsObjectsUnderAPrefixWithSizes) {
  WriteObject("p/one", "1");
  WriteObject("p/sub/two", "22");
  ASSERT_TRUE(backend_->PublishIfAbsent("p/sub/three", "333").ok());
  WriteObject("q/other", "x");
  auto listed = backend_->List("p/");
  ASSERT_TRUE(listed.ok());
  std::set<std::pair<std::string, uint64_t>> got;
  for (const auto& o : *listed) got.insert({o.name, o.size});
  std::set<std::pair<std::string, uint64_t>> want = {{"p/one", 1}, {"p/sub/two", 2}, {"p/sub/three", 3}};
  EXPECT_EQ(got, want);
  for (const auto& o : *listed) EXPECT_GT(o.mtime_unix_ms, 0);
  auto all = backend_->List("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 4u);
  EXPECT_TRUE(backend_->List("absent/")->empty());
}

// One level of names under a prefix: what ChildListing gives where the
// backend has it, and what the catalog derives from a walk where it has not
// (RADOS): the same answer either way, each child once, nothing outside.
TEST_P(BackendConformance, ChildrenOfAPrefixAreNamedOnceEach) {
  const ChildListing* children = backend_->caps().child_listing;
  auto children_of = [&](const std::string& prefix) -> Result<std::multiset<std::string>> {
    std::multiset<std::string> out;
    if (children != nullptr) {
      ASSIGN_OR_RETURN(auto names, children->ListChildren(prefix));
      out.insert(names.begin(), names.end());
      return out;
    }
    ASSIGN_OR_RETURN(auto listed, backend_->List(prefix));
    std::set<std::string> seen;
    for (const auto& o : listed) seen.insert(o.name.substr(prefix.size(), o.name.find('/', prefix.size()) - prefix.size()));
    out.insert(seen.begin(), seen.end());
    return out;
  };
  WriteObject("c/00000000000000000001/COMMIT", "1");
  WriteObject("c/00000000000000000001/data/x", "22");
  ASSERT_TRUE(backend_->PublishIfAbsent("c/00000000000000000002/data/y", "3").ok());
  WriteObject("c/top", "4");
  WriteObject("cc/00000000000000000009/z", "5");
  auto got = children_of("c/");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, (std::multiset<std::string>{"00000000000000000001", "00000000000000000002", "top"}));
  auto deeper = children_of("c/00000000000000000001/");
  ASSERT_TRUE(deeper.ok());
  EXPECT_EQ(*deeper, (std::multiset<std::string>{"COMMIT", "data"}));
  auto none = children_of("absent/");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

// Enough objects to spread over every placement group of a RADOS pool
// (whose listing runs slice by slice in parallel): each is listed once.
TEST_P(BackendConformance, ListReturnsEveryObjectExactlyOnce) {
  std::set<std::string> want;
  for (int i = 0; i < 200; ++i) {
    std::string name = "many/" + std::to_string(i) + "/x";
    ASSERT_TRUE(backend_->PublishIfAbsent(name, std::to_string(i)).ok()) << name;
    want.insert(name);
  }
  WriteObject("manyother/y", "y");
  auto listed = backend_->List("many/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  std::multiset<std::string> got;
  for (const auto& o : *listed) got.insert(o.name);
  EXPECT_EQ(got.size(), want.size());
  EXPECT_EQ(std::set<std::string>(got.begin(), got.end()), want);
}

TEST_P(BackendConformance, RemoveMakesObjectsDisappear) {
  WriteObject("r/a", "a");
  ASSERT_TRUE(backend_->Remove("r/a").ok());
  EXPECT_TRUE(backend_->Open("r/a", {}).status().IsNotFound());
  EXPECT_TRUE(backend_->List("r/")->empty());
  // The name can be created again.
  WriteObject("r/a", "again");
  EXPECT_EQ(ReadObject("r/a", 0, 10), "again");
}

TEST_P(BackendConformance, RemovingEmptyContainersNeverTouchesObjects) {
  WriteObject("e/keep/a", "a");
  WriteObject("e/gone/b", "b");
  ASSERT_TRUE(backend_->Remove("e/gone/b").ok());
  ASSERT_TRUE(backend_->ReclaimLeftovers("e/", 0).ok());
  auto listed = backend_->List("e/");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "e/keep/a");
  EXPECT_EQ(ReadObject("e/keep/a", 0, 10), "a");
  // What went can be created again.
  WriteObject("e/gone/b", "again");
  EXPECT_EQ(ReadObject("e/gone/b", 0, 10), "again");
  EXPECT_TRUE(backend_->ReclaimLeftovers("absent/", 0).ok());
}

TEST_P(BackendConformance, ManyWritesInFlightOutOfOrderCompletion) {
  const std::string data = Pattern(16 << 20, 9);
  WriteObject("big", data, 256 << 10);
  EXPECT_EQ(ReadObject("big", 0, data.size()), data);
}

INSTANTIATE_TEST_SUITE_P(All, BackendConformance, ::testing::ValuesIn(BackendUris()),
                         [](const auto& info) { return info.param.label; });

// --- Fallbacks, forced by a seccomp filter in a child process so that the
// real kernel refuses exactly what a container or a filesystem would.

int InstallSeccomp(bool deny_uring, bool deny_direct) {
  std::vector<sock_filter> f;
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  if (deny_uring) {
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1));
    f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)));
  }
  if (deny_direct) {
    // openat(dirfd, path, flags, mode): refuse flags with O_DIRECT, as tmpfs
    // before 6.6 and some FUSE filesystems do.
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_openat, 0, 3));
    f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[2])));
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, O_DIRECT, 0, 1));
    f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EINVAL & SECCOMP_RET_DATA)));
  }
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  sock_fprog prog{static_cast<unsigned short>(f.size()), f.data()};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return static_cast<int>(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog));
}

// Runs in a forked child: opens a store under the filter, checks the I/O
// path it chose and that a round trip works. Exit code 0 = pass; 77 = the
// filter could not be installed (skip).
int FallbackChild(const std::string& dir, bool deny_uring, bool deny_direct) {
  if (InstallSeccomp(deny_uring, deny_direct) != 0) return 77;
  auto b = OpenBackend("file://" + dir, true);
  if (!b.ok()) return 10;
  const std::string& path = (*b)->caps().io_path;
  if (deny_uring && path.find("threads") != 0) return 11;
  if (!deny_uring && path.find("io_uring") != 0) return 12;
  if (deny_direct && path.find("buffered") == std::string::npos) return 13;
  if (!deny_direct && path.find("O_DIRECT") == std::string::npos) return 14;
  if ((*b)->caps().io_alignment != (deny_direct ? 1u : 4096u)) return 15;
  auto w = (*b)->Create("obj", CreateOptions{8192});
  if (!w.ok()) return 16;
  auto buf = AlignedBuffer::Allocate(8192);
  if (!buf.ok()) return 17;
  for (size_t i = 0; i < 8192; ++i) buf->data()[i] = static_cast<uint8_t>(i * 7);
  if (!(*w)->StartWrite(0, buf->data(), 8192, 1).ok()) return 18;
  auto c = (*w)->Reap();
  if (!c.ok() || !c->status.ok() || c->bytes != 8192) return 19;
  if (!(*w)->Finish(8000).ok()) return 20;
  auto r = (*b)->Open("obj", {});
  if (!r.ok() || (*r)->size() != 8000) return 21;
  auto in = AlignedBuffer::Allocate(8192);
  if (!in.ok() || !(*r)->StartRead(0, in->data(), 8192, 2).ok()) return 22;
  auto rc = (*r)->Reap();
  if (!rc.ok() || !rc->status.ok() || rc->bytes != 8000) return 23;
  if (std::memcmp(in->data(), buf->data(), 8000) != 0) return 24;
  return 0;
}

class Fallback : public ::testing::TestWithParam<std::pair<bool, bool>> {};

TEST_P(Fallback, BackendFallsBackByItselfAndStillRoundTrips) {
  auto [deny_uring, deny_direct] = GetParam();
  char tmpl[] = "/tmp/sluice-fallback-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(FallbackChild(tmpl, deny_uring, deny_direct));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::string cmd = std::string("rm -rf ") + tmpl;
  (void)std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << "child died";
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "seccomp filters unavailable here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "failing check " << WEXITSTATUS(status) << " in FallbackChild";
}

INSTANTIATE_TEST_SUITE_P(Forced, Fallback,
                         ::testing::Values(std::make_pair(false, false), std::make_pair(true, false),
                                           std::make_pair(false, true), std::make_pair(true, true)),
                         [](const auto& info) {
                           std::string s = info.param.first ? "NoUring" : "Uring";
                           s += info.param.second ? "NoDirect" : "Direct";
                           return s;
                         });

TEST(OpenBackend, RejectsBadUris) {
  EXPECT_EQ(OpenBackend("", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenBackend("gopher://host/x", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenBackend("file:///tmp?io=bogus", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenBackend("file:///tmp?qd=0", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenBackend("file:///tmp?color=blue", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(OpenBackend("/definitely/not/here/sluice", false).status().IsNotFound());
  // A store that is a regular file is an operational error (exit 1), as a
  // missing one is, not a malformed URI.
  EXPECT_EQ(OpenBackend("/etc/passwd", false).status().code(), StatusCode::kIOError);
}

// Options are checked before any monitor is contacted, so no cluster is needed.
TEST(OpenBackend, RadosUriOptionsAreValidatedFirst) {
  auto probe = OpenBackend("rados://pool/p?colour=blue", false);
  if (probe.status().code() == StatusCode::kNotSupported) GTEST_SKIP() << probe.status().ToString();
  EXPECT_EQ(probe.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(probe.status().message().find("'colour'"), std::string::npos) << probe.status().ToString();
  EXPECT_EQ(OpenBackend("rados:///prefix", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenBackend("rados://pool/p?qd=0", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenBackend("rados://pool/p?qd=many", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenBackend("rados://pool/a//b", false).status().code(), StatusCode::kInvalidArgument);
  auto no_conf = OpenBackend("rados://pool/p?conf=/definitely/not/here.conf", false);
  EXPECT_TRUE(no_conf.status().IsNotFound()) << no_conf.status().ToString();
  EXPECT_NE(no_conf.status().message().find("/definitely/not/here.conf"), std::string::npos);
}

}  // namespace
}  // namespace sluice
