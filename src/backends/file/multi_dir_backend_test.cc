// A file store over several directories: where objects go, how names find
// them, and how the store's layout is kept and defended. The conformance
// suite (backend_conformance_test) runs its behaviours over such stores
// too; hedging past a slow device is tested with a throttled loop device
// in tests/slow_dir_test.sh, which needs root.
#include "backends/file/multi_dir_backend.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/write_queue.h"
#include "sluice/aligned_buffer.h"
#include "sluice/backend.h"

namespace sluice {
namespace {

std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + static_cast<size_t>(seed) * 7 + i / 4096) & 0xff);
  return s;
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

class MultiDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("SLUICE_TEST_DIR");
    std::string tmpl = std::string(tmp ? tmp : "/tmp") + "/sluice-multidir-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    ASSERT_NE(mkdtemp(buf.data()), nullptr);
    base_ = buf.data();
    home_ = base_ + "/nvme0";
    a_ = base_ + "/nvme1";
    b_ = base_ + "/nvme2";
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + base_ + "'";
    (void)std::system(cmd.c_str());
  }

  std::string Uri(const std::string& query = "") const {
    return "file://" + home_ + (query.empty() ? "" : "?" + query);
  }

  // Writes `data` as one placed object through a write queue (as a save
  // does); returns the name it is stored under.
  std::string Write(Backend& b, const std::string& name, const std::string& data) {
    const size_t align = b.caps().io_alignment;
    const size_t padded = AlignUp(data.size(), align);
    auto buf = AlignedBuffer::Allocate(std::max<size_t>(padded, 1));
    EXPECT_TRUE(buf.ok());
    std::memset(buf->data(), 0, buf->size());
    std::memcpy(buf->data(), data.data(), data.size());
    const size_t io = 256 << 10;
    WriteQueue queue(b, WriteQueueOptions{});
    Status st = queue.BeginObject(name, data.size(), /*placed=*/true);
    for (size_t off = 0; off < padded && st.ok(); off += io) {
      st = queue.Write(off, buf->data() + off, std::min(io, padded - off), off, false);
    }
    if (st.ok()) st = queue.EndObject(data.size());
    if (st.ok()) st = queue.Finish();
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok() || queue.objects().size() != 1) return "";
    return queue.objects()[0].name;
  }

  std::string Read(Backend& b, const std::string& name) {
    auto r = b.Open(name, {});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return "";
    const size_t size = (*r)->size();
    auto buf = AlignedBuffer::Allocate(std::max<size_t>(AlignUp(size, 4096), 4096));
    EXPECT_TRUE((*r)->StartRead(0, buf->data(), buf->size(), 1).ok());
    auto c = (*r)->Reap();
    EXPECT_TRUE(c.ok() && c->status.ok());
    return std::string(reinterpret_cast<const char*>(buf->data()), c->bytes);
  }

  std::string base_, home_, a_, b_;
};

TEST(DirectoryOfName, TheSuffixBeforeTheExtensionSaysWhere) {
  EXPECT_EQ(DirectoryOfName("ckpt/x/1/data/r000000-ab-000001.dat", 3), 0u);
  EXPECT_EQ(DirectoryOfName("ckpt/x/1/data/r000000-ab-000001-d1.dat", 3), 1u);
  EXPECT_EQ(DirectoryOfName("ckpt/x/1/data/r000000-ab-000001-d2.dat", 3), 2u);
  EXPECT_EQ(DirectoryOfName("ckpt/x/1/data/r000000-ab-000001-d2", 3), 2u);
  // Past the last directory (a name copied from a store with more): the home.
  EXPECT_EQ(DirectoryOfName("ckpt/x/1/data/r000000-ab-000001-d3.dat", 3), 0u);
  // Not a suffix of ours.
  EXPECT_EQ(DirectoryOfName("ckpt/x/1/data/r000000-ab-000001-d01.dat", 3), 0u);
  EXPECT_EQ(DirectoryOfName("ckpt/x/1/data/r000000-ab-000001-h1.dat", 3), 0u);
  EXPECT_EQ(DirectoryOfName("ckpt/x-d1/1/manifest/r000000.man", 3), 0u);
  EXPECT_EQ(DirectoryOfName("ckpt/x/1/COMMIT", 3), 0u);
  EXPECT_EQ(DirectoryOfName("-d1.dat", 3), 1u);
  EXPECT_EQ(DirectoryOfName("d1.dat", 3), 0u);
  // A repair staged beside an object keeps its last component, and so its directory.
  EXPECT_EQ(DirectoryOfName("ckpt/x/1/repair/w/data/r000000-ab-000001-d2.dat", 3), 2u);
}

TEST_F(MultiDirTest, ObjectsSpreadOverTheDirectoriesAndReadBack) {
  auto opened = OpenBackend(Uri("dirs=" + a_ + "," + b_), true);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Backend& b = **opened;
  EXPECT_NE(b.caps().io_path.find("3 directories"), std::string::npos) << b.caps().io_path;
  EXPECT_EQ(b.caps().max_object_bytes, 64ull << 20);
  ASSERT_NE(b.caps().placement, nullptr);
  EXPECT_TRUE(b.caps().placement->policy().enabled);
  std::map<std::string, std::string> stored;  // stored name -> bytes
  for (int i = 0; i < 6; ++i) {
    const std::string data = Pattern((1 << 20) + 4096 * i + 11, i);
    char name[64];
    snprintf(name, sizeof name, "ckpt/j/1/data/r000000-w-%06d.dat", i);
    stored[Write(b, name, data)] = data;
  }
  // Each directory got objects, each under the name its directory says.
  std::vector<int> in(3, 0);
  for (const auto& [name, data] : stored) {
    const size_t k = DirectoryOfName(name, 3);
    ++in[k];
    const std::string dir = k == 0 ? home_ : k == 1 ? a_ : b_;
    EXPECT_TRUE(FileExists(dir + "/" + name)) << dir << "/" << name;
    EXPECT_EQ(Read(b, name), data) << name;
  }
  EXPECT_EQ(in[0], 2);
  EXPECT_EQ(in[1], 2);
  EXPECT_EQ(in[2], 2);
  auto listed = b.List("ckpt/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  std::set<std::string> names;
  for (const auto& o : *listed) names.insert(o.name);
  EXPECT_EQ(names.size(), 6u);
  for (const auto& [name, data] : stored) EXPECT_EQ(names.count(name), 1u) << name;
  auto stat = b.Stat({stored.begin()->first, "ckpt/j/1/data/none-d1.dat"});
  ASSERT_TRUE(stat.ok());
  ASSERT_EQ(stat->size(), 1u);
  // Records live in the home.
  ASSERT_TRUE(b.PublishIfAbsent("ckpt/j/1/COMMIT", "c").ok());
  EXPECT_TRUE(FileExists(home_ + "/ckpt/j/1/COMMIT"));
  // Nothing the store keeps for itself is listed.
  auto all = b.List("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 7u);
  // A name the home holds is taken.
  auto again = b.Create("ckpt/j/1/COMMIT", CreateOptions{0});
  EXPECT_TRUE(again.status().IsAlreadyExists()) << again.status().ToString();
}

TEST_F(MultiDirTest, TheLayoutIsRecordedAndDefended) {
  std::string name;
  {
    auto b = OpenBackend(Uri("dirs=" + a_ + "," + b_), true);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    for (int i = 0; i < 3; ++i) name = Write(**b, "d/obj-00000" + std::to_string(i) + ".dat", Pattern(8192, i));
  }
  // Later opens need no dirs=.
  auto plain = OpenBackend(Uri(), false);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_NE((*plain)->caps().io_path.find("3 directories"), std::string::npos);
  EXPECT_EQ(Read(**plain, name), Pattern(8192, 2));
  auto same = OpenBackend(Uri("dirs=" + a_ + "," + b_), false);
  EXPECT_TRUE(same.ok()) << same.status().ToString();
  // Other directories, or the same in another order: refused, naming the recorded ones.
  auto swapped = OpenBackend(Uri("dirs=" + b_ + "," + a_), true);
  ASSERT_FALSE(swapped.ok());
  EXPECT_EQ(swapped.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(swapped.status().message().find("spans " + a_ + "," + b_), std::string::npos)
      << swapped.status().ToString();
  // Another directory opened alone: refused, naming the home.
  auto alone = OpenBackend("file://" + a_, false);
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(alone.status().message().find("directory 1 of the multi-directory store at " + home_),
            std::string::npos)
      << alone.status().ToString();
  // A directory named twice.
  const std::string other = base_ + "/other";
  auto twice = OpenBackend("file://" + other + "?dirs=" + a_ + "," + a_, true);
  ASSERT_FALSE(twice.ok());
  // (a_ is already marked for the first store, which is refused first, or named twice.)
  EXPECT_EQ(twice.status().code(), StatusCode::kInvalidArgument) << twice.status().ToString();
  const std::string c = base_ + "/c";
  auto twice_fresh = OpenBackend("file://" + other + "?dirs=" + c + "," + c + "/", true);
  ASSERT_FALSE(twice_fresh.ok());
  EXPECT_NE(twice_fresh.status().message().find("named twice"), std::string::npos) << twice_fresh.status().ToString();
  // A directory of another store.
  auto stolen = OpenBackend("file://" + other + "?dirs=" + b_, true);
  ASSERT_FALSE(stolen.ok());
  EXPECT_NE(stolen.status().message().find("another multi-directory store (home " + home_ + ")"), std::string::npos)
      << stolen.status().ToString();
  // Hedge options without other directories.
  auto single = OpenBackend("file://" + base_ + "/single?hedge=off", true);
  ASSERT_FALSE(single.ok());
  EXPECT_EQ(single.status().code(), StatusCode::kInvalidArgument);
  auto bad_dirs = OpenBackend(Uri("dirs=relative/dir"), true);
  EXPECT_EQ(bad_dirs.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(MultiDirTest, AReplacedEmptyDirectoryLosesOnlyItsObjects) {
  std::map<std::string, std::string> stored;
  {
    auto b = OpenBackend(Uri("dirs=" + a_), true);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    for (int i = 0; i < 4; ++i) {
      std::string data = Pattern(4096 * (i + 1), i);
      stored[Write(**b, "d/obj-00000" + std::to_string(i) + ".dat", data)] = data;
    }
  }
  // The device behind a_ is replaced: an empty directory where it was.
  std::string cmd = "rm -rf '" + a_ + "' && mkdir '" + a_ + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto b = OpenBackend(Uri(), true);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  int lost = 0;
  for (const auto& [name, data] : stored) {
    if (DirectoryOfName(name, 2) == 1) {
      EXPECT_TRUE((*b)->Open(name, {}).status().IsNotFound()) << name;
      ++lost;
    } else {
      EXPECT_EQ(Read(**b, name), data);
    }
  }
  EXPECT_EQ(lost, 2);
  // And it is the store's again: new objects go there.
  std::set<size_t> dirs;
  for (int i = 0; i < 2; ++i) dirs.insert(DirectoryOfName(Write(**b, "e/obj-00000" + std::to_string(i) + ".dat", "x"), 2));
  EXPECT_EQ(dirs.size(), 2u);
}

TEST_F(MultiDirTest, ACreationCutShortOrRacedEndsInOneStore) {
  // Four processes' worth of opens of a fresh store at once: one layout
  // wins, and every open uses it.
  std::vector<std::thread> openers;
  std::vector<Status> got(4);
  for (int i = 0; i < 4; ++i) {
    openers.emplace_back([&, i] { got[i] = OpenBackend(Uri("dirs=" + a_ + "," + b_), true).status(); });
  }
  for (auto& t : openers) t.join();
  for (const auto& st : got) EXPECT_TRUE(st.ok()) << st.ToString();
  // Cut short after the layout, before a marker: the next open writes it.
  ASSERT_EQ(::unlink((b_ + "/.sluice-dir-of").c_str()), 0);
  auto again = OpenBackend(Uri(), true);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(FileExists(b_ + "/.sluice-dir-of"));
  std::string name = Write(**again, "c/obj-000001.dat", "x");
  EXPECT_EQ(Read(**again, name), "x");
}

TEST_F(MultiDirTest, AMissingOrForeignDirectoryIsNeverTakenSilently) {
  std::string stored;
  {
    auto b = OpenBackend(Uri("dirs=" + a_), true);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    for (int i = 0; i < 2; ++i) stored = Write(**b, "m/obj-00000" + std::to_string(i) + ".dat", "y");
  }
  // Missing (a device not mounted): not made on the disk beneath.
  std::string cmd = "mv '" + a_ + "' '" + a_ + ".away'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto missing = OpenBackend(Uri(), true);
  ASSERT_FALSE(missing.ok());
  // A fault that can pass: retried by a pipeline, never taken for a store to make.
  EXPECT_EQ(missing.status().code(), StatusCode::kUnavailable) << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("not mounted"), std::string::npos) << missing.status().ToString();
  struct stat st;
  EXPECT_NE(::stat(a_.c_str(), &st), 0) << "the missing directory was made";
  // Back, but its marker gone while it holds objects: refused.
  cmd = "mv '" + a_ + ".away' '" + a_ + "' && rm '" + a_ + "/.sluice-dir-of'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto foreign = OpenBackend(Uri(), true);
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("holds files but no marker"), std::string::npos)
      << foreign.status().ToString();
  // Read-only opens do not judge it: they read what is there.
  auto reading = OpenBackend(Uri(), false);
  ASSERT_TRUE(reading.ok()) << reading.status().ToString();
  EXPECT_EQ(Read(**reading, stored), "y");
  // Another store's directory cannot be a home.
  auto home_of_other = OpenBackend("file://" + b_ + "?dirs=" + base_ + "/x", true);
  EXPECT_TRUE(home_of_other.ok()) << home_of_other.status().ToString();
  auto bad_home = OpenBackend("file://" + base_ + "/x?dirs=" + base_ + "/y", true);
  ASSERT_FALSE(bad_home.ok());
  EXPECT_NE(bad_home.status().message().find("cannot be the home"), std::string::npos) << bad_home.status().ToString();
}

TEST_F(MultiDirTest, WithHedgingOffObjectsStillSpread) {
  auto b = OpenBackend(Uri("dirs=" + a_ + "&hedge=off"), true);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_NE((*b)->caps().placement, nullptr);
  EXPECT_FALSE((*b)->caps().placement->policy().enabled);
  std::set<size_t> dirs;
  for (int i = 0; i < 4; ++i) {
    const std::string data = Pattern(300000, i);
    const std::string name = Write(**b, "h/obj-00000" + std::to_string(i) + ".dat", data);
    dirs.insert(DirectoryOfName(name, 2));
    EXPECT_EQ(Read(**b, name), data);
  }
  EXPECT_EQ(dirs.size(), 2u);
}

}  // namespace
}  // namespace sluice
