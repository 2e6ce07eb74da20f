// The bookkeeping behind the Placement of the backends that hedge
// (hedge_state.h), without a cluster: when a write is late, the byte
// budget, and which placement groups and OSDs are avoided. The write
// queue's own test hedges through it; tests/testbed_test.sh hedges for
// real, past a slow OSD of a 6-OSD cluster.
#include "backends/hedge_state.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <iterator>
#include <string>

#include <chrono>
#include <thread>
#include <vector>

namespace sluice {
namespace {

using std::chrono::milliseconds;

// HedgeState with a placement of its own: the name as given.
class TestState final : public HedgeState {
 public:
  using HedgeState::HedgeState;
  std::string Place(const std::string& name, const std::vector<std::string>&, bool* avoided) override {
    *avoided = false;
    return name;
  }
};

TEST(NameBesideTest, GoesBeforeTheExtension) {
  EXPECT_EQ(NameBeside("ckpt/a/1/data/r000000-ab-000003.dat", "-h2"), "ckpt/a/1/data/r000000-ab-000003-h2.dat");
  EXPECT_EQ(NameBeside("dir.v2/object", "-h1"), "dir.v2/object-h1");
  EXPECT_EQ(NameBeside("plain", "-h12"), "plain-h12");
}

TEST(HedgeStateTest, DeadlineIsAMultipleOfTheMedianNeverUnderTheFloor) {
  HedgeOptions o;
  o.floor_ms = 100;
  o.factor = 3;
  TestState s(o, nullptr);
  // Too few samples: a cautious default.
  EXPECT_EQ(s.Deadline(), milliseconds(500));
  for (int i = 0; i < 40; ++i) s.RecordLatency(milliseconds(i % 2 == 0 ? 50 : 70));
  // Median 50..70 ms (the lower middle of an even count), times 3.
  const auto d = s.Deadline();
  EXPECT_GE(d, milliseconds(150));
  EXPECT_LE(d, milliseconds(210));
  // A few very slow writes do not move the median (a p95 would follow them).
  for (int i = 0; i < 10; ++i) s.RecordLatency(milliseconds(5000));
  EXPECT_LE(s.Deadline(), milliseconds(210));
  // Fast writes: the floor.
  TestState fast(o, nullptr);
  for (int i = 0; i < 40; ++i) fast.RecordLatency(milliseconds(2));
  EXPECT_EQ(fast.Deadline(), milliseconds(100));
}

TEST(HedgeStateTest, ExtraBytesStayWithinTheBudget) {
  HedgeOptions o;
  o.extra = 0.25;
  TestState s(o, nullptr);
  // A credit of 0.25 x 256 MiB before anything was written.
  EXPECT_TRUE(s.Reserve(48ull << 20));
  EXPECT_FALSE(s.Reserve(32ull << 20));
  s.Count(HedgeEvent::kSubmitted, 256ull << 20);  // now 0.25 x 512 MiB = 128 MiB in all
  EXPECT_TRUE(s.Reserve(64ull << 20));
  EXPECT_FALSE(s.Reserve(32ull << 20));
  s.Count(HedgeEvent::kRefused, 0);
  const HedgeStats st = s.Stats();
  EXPECT_EQ(st.extra_bytes, 112ull << 20);
  EXPECT_EQ(st.bytes_submitted, 256ull << 20);
  EXPECT_EQ(st.hedges_refused, 1u);
  EXPECT_DOUBLE_EQ(st.budget, 0.25);
  // No budget: never.
  HedgeOptions none;
  none.extra = 0;
  TestState zero(none, nullptr);
  zero.Count(HedgeEvent::kSubmitted, 1ull << 30);
  EXPECT_FALSE(zero.Reserve(1));
}

TEST(HedgeStateTest, ALatePlacementGroupIsAvoidedForAWhile) {
  HedgeOptions o;
  o.avoid_ms = 200;
  TestState s(o, nullptr);
  EXPECT_FALSE(s.IsSlow(7));
  s.MarkSlow(7);
  EXPECT_TRUE(s.IsSlow(7));
  EXPECT_FALSE(s.IsSlow(8));
  std::this_thread::sleep_for(milliseconds(250));
  EXPECT_FALSE(s.IsSlow(7));
}

// 64 PGs over 6 OSDs on 3 hosts (0,2 | 1,4 | 3,5), one OSD per host each,
// as the test bed places them.
HedgeState::ActingSets SixOsds() {
  HedgeState::ActingSets sets;
  const int host[3][2] = {{0, 2}, {1, 4}, {3, 5}};
  for (uint32_t pg = 0; pg < 64; ++pg) {
    sets[pg] = {host[0][pg % 2], host[1][(pg / 2) % 2], host[2][(pg / 4) % 2]};
  }
  return sets;
}

TEST(HedgeStateTest, TheOsdLateWritesShareIsSuspectedAndItsGroupsAvoided) {
  int fetches = 0;
  TestState s(HedgeOptions{}, [&]() -> Result<HedgeState::ActingSets> {
    ++fetches;
    return SixOsds();
  });
  const auto sets = SixOsds();
  // Writes on time to PGs without osd.0 clear the other OSDs...
  std::vector<uint32_t> with0, without0;
  for (const auto& [pg, osds] : sets) (osds[0] == 0 ? with0 : without0).push_back(pg);
  s.MarkSlow(with0[0]);  // the first late write fetches the acting sets
  EXPECT_EQ(fetches, 1);
  for (uint32_t pg : without0) s.MarkOnTime(pg);
  // ...and late ones, all on PGs with osd.0, point at it.
  for (size_t i = 1; i < 6; ++i) s.MarkSlow(with0[i * 3]);
  EXPECT_EQ(fetches, 1);  // not again within the avoidance window
  EXPECT_EQ(s.SuspectOsds(), std::vector<int>{0});
  // Every PG of osd.0 is avoided, never late or not; no other PG is.
  for (uint32_t pg : with0) EXPECT_TRUE(s.IsSlow(pg)) << pg;
  for (uint32_t pg : without0) EXPECT_FALSE(s.IsSlow(pg)) << pg;
  // osd.0 writing on time again clears it.
  s.MarkOnTime(with0[1]);
  s.MarkOnTime(with0[2]);
  EXPECT_TRUE(s.SuspectOsds().empty());
  EXPECT_FALSE(s.IsSlow(with0[30]));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(HedgeStateTest, SuspectsAreSharedWithLaterProcesses) {
  char dir[] = "/tmp/sluice-hedge-share-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/slow-osds";
  const auto sets = SixOsds();
  std::vector<uint32_t> with0, without0;
  for (const auto& [pg, osds] : sets) (osds[0] == 0 ? with0 : without0).push_back(pg);
  {
    // A process learns osd.0 and writes it down.
    TestState first(HedgeOptions{}, [&]() -> Result<HedgeState::ActingSets> { return SixOsds(); });
    first.ShareSuspects(path);
    EXPECT_TRUE(ReadFile(path).empty());  // nothing known, nothing written
    for (uint32_t pg : without0) first.MarkOnTime(pg);
    for (size_t i = 0; i < 6; ++i) first.MarkSlow(with0[i * 3]);
    ASSERT_EQ(first.SuspectOsds(), std::vector<int>{0});
    EXPECT_EQ(ReadFile(path).rfind("osd 0 ", 0), 0u) << ReadFile(path);
  }
  {
    // The next one avoids osd.0's groups before any write of its own.
    int fetches = 0;
    TestState next(HedgeOptions{}, [&]() -> Result<HedgeState::ActingSets> {
      ++fetches;
      return SixOsds();
    });
    next.ShareSuspects(path);
    EXPECT_EQ(fetches, 1);
    EXPECT_EQ(next.SuspectOsds(), std::vector<int>{0});
    for (uint32_t pg : with0) EXPECT_TRUE(next.IsSlow(pg)) << pg;
    for (uint32_t pg : without0) EXPECT_FALSE(next.IsSlow(pg)) << pg;
    // osd.0 on time again: cleared, and written down so.
    next.MarkOnTime(with0[1]);
    next.MarkOnTime(with0[2]);
    EXPECT_TRUE(next.SuspectOsds().empty());
    EXPECT_TRUE(ReadFile(path).empty()) << ReadFile(path);
  }
  {
    // An entry past its time, or garbage, is no suspect.
    std::ofstream(path) << "osd 3 1000\nosd x 99999999999999\nnonsense\n";
    TestState later(HedgeOptions{}, [&]() -> Result<HedgeState::ActingSets> { return SixOsds(); });
    later.ShareSuspects(path);
    EXPECT_TRUE(later.SuspectOsds().empty());
    // No file at all: nothing either.
    TestState none(HedgeOptions{}, [&]() -> Result<HedgeState::ActingSets> { return SixOsds(); });
    none.ShareSuspects(std::string(dir) + "/absent");
    EXPECT_TRUE(none.SuspectOsds().empty());
  }
  std::string cmd = std::string("rm -rf '") + dir + "'";
  (void)std::system(cmd.c_str());
}

TEST(HedgeStateTest, WithoutTheMapOnlyLatePlacementGroupsAreAvoided) {
  int fetches = 0;
  TestState s(HedgeOptions{}, [&]() -> Result<HedgeState::ActingSets> {
    ++fetches;
    return Status::NotSupported("read the PG map: the client may not");
  });
  for (uint32_t pg = 0; pg < 8; ++pg) s.MarkSlow(pg * 2);
  EXPECT_EQ(fetches, 1);  // a refusal is not asked again
  EXPECT_TRUE(s.SuspectOsds().empty());
  EXPECT_TRUE(s.IsSlow(2));
  EXPECT_FALSE(s.IsSlow(3));
}

TEST(HedgeStateTest, AMapThatCouldNotBeReadIsAskedForAgainLater) {
  HedgeOptions o;
  o.avoid_ms = 100;
  int fetches = 0;
  TestState s(o, [&]() -> Result<HedgeState::ActingSets> {
    if (++fetches == 1) return Status::Unavailable("read the PG map: Connection timed out");
    return SixOsds();
  });
  s.MarkSlow(0);
  s.MarkSlow(2);
  EXPECT_EQ(fetches, 1);  // not again at once
  std::this_thread::sleep_for(milliseconds(150));
  s.MarkSlow(4);
  EXPECT_EQ(fetches, 2);
}

// What records (named, not relocated) are told: whether a name's placement
// group is avoided, and whether its primary is a suspect.
TEST(HedgeStateTest, NamesAreSlowWhereTheirPlacementGroupIs) {
  auto sets = SixOsds();
  sets[100] = {2, 0, 5};  // osd.0 a replica only
  TestState s(HedgeOptions{}, [&]() -> Result<HedgeState::ActingSets> { return sets; });
  EXPECT_FALSE(s.Slow("pg-1")) << "no placement function: never slow";
  s.SetPlacementOf([](const std::string& name) -> std::optional<uint32_t> {
    if (name.rfind("pg-", 0) != 0) return std::nullopt;
    return static_cast<uint32_t>(std::stoul(name.substr(3)));
  });
  std::vector<uint32_t> with0, without0;
  for (const auto& [pg, osds] : SixOsds()) (osds[0] == 0 ? with0 : without0).push_back(pg);
  for (uint32_t pg : with0) EXPECT_FALSE(s.Slow("pg-" + std::to_string(pg)));
  for (uint32_t pg : without0) s.MarkOnTime(pg);
  for (size_t i = 0; i < 6; ++i) s.MarkSlow(with0[i * 3]);
  ASSERT_EQ(s.SuspectOsds(), std::vector<int>{0});
  for (uint32_t pg : with0) {
    EXPECT_TRUE(s.Slow("pg-" + std::to_string(pg))) << pg;
    EXPECT_TRUE(s.PrimarySlow(pg)) << pg;
  }
  for (uint32_t pg : without0) {
    EXPECT_FALSE(s.Slow("pg-" + std::to_string(pg))) << pg;
    EXPECT_FALSE(s.PrimarySlow(pg)) << pg;
  }
  EXPECT_TRUE(s.Slow("pg-100"));
  EXPECT_FALSE(s.PrimarySlow(100)) << "osd.0 is no primary there";
  EXPECT_FALSE(s.Slow("elsewhere")) << "a name without a placement";
}

// A process that avoids a suspect from its first write seldom writes late
// enough to learn it anew: a late record write on one of its placement
// groups keeps the shared suspicion fresh instead.
TEST(HedgeStateTest, ALateWriteOnASuspectsGroupRenewsTheSharedSuspicion) {
  char dir[] = "/tmp/sluice-hedge-renew-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/slow-osds";
  std::vector<uint32_t> with0, without0;
  for (const auto& [pg, osds] : SixOsds()) (osds[0] == 0 ? with0 : without0).push_back(pg);
  const int64_t now_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto until_in_file = [&] {
    std::istringstream in(ReadFile(path));
    std::string word;
    int osd = -1;
    int64_t until = 0;
    in >> word >> osd >> until;
    return osd == 0 ? until : int64_t{0};
  };
  // Shared a while ago: a minute left.
  std::ofstream(path) << "osd 0 " << now_ms + 60'000 << "\n";
  {
    TestState s(HedgeOptions{}, [&]() -> Result<HedgeState::ActingSets> { return SixOsds(); });
    s.ShareSuspects(path);
    ASSERT_EQ(s.SuspectOsds(), std::vector<int>{0});
    s.MarkSlow(without0[0]);  // late, but no suspect there: nothing renewed
    EXPECT_EQ(until_in_file(), now_ms + 60'000);
    s.MarkSlow(with0[0]);
    EXPECT_GE(until_in_file(), now_ms + HedgeState::kSharedSuspectMs) << ReadFile(path);
  }
  // Shared just now: left as it is.
  const int64_t fresh = now_ms + HedgeState::kSharedSuspectMs - 1000;
  std::ofstream(path) << "osd 0 " << fresh << "\n";
  {
    TestState s(HedgeOptions{}, [&]() -> Result<HedgeState::ActingSets> { return SixOsds(); });
    s.ShareSuspects(path);
    s.MarkSlow(with0[0]);
    EXPECT_EQ(until_in_file(), fresh);
  }
  std::string cmd = std::string("rm -rf '") + dir + "'";
  (void)std::system(cmd.c_str());
}

// One PG written late again and again (a record with a fixed name) is one
// late PG, not eight: its other OSDs do not tie with the slow one.
TEST(HedgeStateTest, APlacementGroupLateAgainCountsOnce) {
  TestState s(HedgeOptions{}, [&]() -> Result<HedgeState::ActingSets> { return SixOsds(); });
  // PG 0 is osd.0, osd.1 and osd.3.
  for (int i = 0; i < 8; ++i) s.MarkSlow(0);
  EXPECT_TRUE(s.SuspectOsds().empty()) << "one late PG is too little to suspect an OSD";
  // Three more, all with osd.0 and without osd.3: osd.0 alone.
  s.MarkSlow(4);
  s.MarkSlow(6);
  s.MarkSlow(12);
  EXPECT_EQ(s.SuspectOsds(), std::vector<int>{0});
}

// Two OSDs found together in the first late PGs are both suspected. Only a
// late write that one of them alone explains renews a shared suspicion, so
// the one that is not slow expires instead of living on with the other.
TEST(HedgeStateTest, OnlyALateWriteASuspectAloneExplainsRenewsIt) {
  char dir[] = "/tmp/sluice-hedge-pair-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/slow-osds";
  // PGs 0, 2, 8 and 10 have osd.0 and osd.3; 4 and 6 have osd.0 only.
  {
    TestState s(HedgeOptions{}, [&]() -> Result<HedgeState::ActingSets> { return SixOsds(); });
    s.ShareSuspects(path);
    for (uint32_t pg : {0u, 2u, 8u, 10u}) s.MarkSlow(pg);
    EXPECT_EQ(s.SuspectOsds(), (std::vector<int>{0, 3}));
    EXPECT_NE(ReadFile(path).find("osd 3 "), std::string::npos) << ReadFile(path);
  }
  const int64_t now_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto until_of = [&](int wanted) {
    std::istringstream in(ReadFile(path));
    std::string word;
    int osd = -1;
    int64_t until = 0;
    while (in >> word >> osd >> until) {
      if (osd == wanted) return until;
    }
    return int64_t{0};
  };
  // Both shared a while ago: a minute left each.
  std::ofstream(path) << "osd 0 " << now_ms + 60'000 << "\nosd 3 " << now_ms + 60'000 << "\n";
  {
    TestState s(HedgeOptions{}, [&]() -> Result<HedgeState::ActingSets> { return SixOsds(); });
    s.ShareSuspects(path);
    ASSERT_EQ(s.SuspectOsds(), (std::vector<int>{0, 3}));
    s.MarkSlow(2);  // both serve it: it explains neither
    EXPECT_EQ(until_of(0), now_ms + 60'000);
    EXPECT_EQ(until_of(3), now_ms + 60'000);
    s.MarkSlow(4);  // osd.0 alone: osd.0 renewed, osd.3 left to expire
    EXPECT_GE(until_of(0), now_ms + HedgeState::kSharedSuspectMs) << ReadFile(path);
    EXPECT_EQ(until_of(3), now_ms + 60'000) << ReadFile(path);
  }
  std::string cmd = std::string("rm -rf '") + dir + "'";
  (void)std::system(cmd.c_str());
}

// The same within a process: of two OSDs suspected together, the one no
// late write alone explains expires, while the slow one is kept.
TEST(HedgeStateTest, ATiedSuspectNoLateWriteExplainsExpiresInTheProcess) {
  HedgeOptions o;
  o.avoid_ms = 1000;  // margins of 300 ms either side of each check
  TestState s(o, [&]() -> Result<HedgeState::ActingSets> { return SixOsds(); });
  for (uint32_t pg : {0u, 2u, 8u, 10u}) s.MarkSlow(pg);  // osd.0 and osd.3 in each
  ASSERT_EQ(s.SuspectOsds(), (std::vector<int>{0, 3}));
  std::this_thread::sleep_for(milliseconds(700));
  s.MarkSlow(4);   // osd.0 alone: renewed
  s.MarkSlow(16);  // osd.0 and osd.3 again: neither renewed, nor re-suspected
  std::this_thread::sleep_for(milliseconds(700));
  EXPECT_EQ(s.SuspectOsds(), std::vector<int>{0});
  // Still tied (no late PG told them apart): a late write elsewhere renews
  // neither.
  TestState tied(o, [&]() -> Result<HedgeState::ActingSets> { return SixOsds(); });
  for (uint32_t pg : {0u, 2u, 8u, 10u}) tied.MarkSlow(pg);
  ASSERT_EQ(tied.SuspectOsds(), (std::vector<int>{0, 3}));
  std::this_thread::sleep_for(milliseconds(700));
  tied.MarkSlow(5);  // osd.2, osd.1 and osd.5
  std::this_thread::sleep_for(milliseconds(700));
  EXPECT_TRUE(tied.SuspectOsds().empty());
}

TEST(HedgeStateTest, WriteSecondsCountTimeWithWritesInFlight) {
  TestState s(HedgeOptions{}, nullptr);
  EXPECT_EQ(s.Stats().write_seconds, 0);
  s.Count(HedgeEvent::kWriteStarted, 0);
  s.Count(HedgeEvent::kWriteStarted, 0);
  std::this_thread::sleep_for(milliseconds(30));
  s.Count(HedgeEvent::kWriteEnded, 0);
  std::this_thread::sleep_for(milliseconds(30));
  s.Count(HedgeEvent::kWriteEnded, 0);
  const double busy = s.Stats().write_seconds;
  EXPECT_GE(busy, 0.055);
  EXPECT_LT(busy, 5.0);
  // Idle time and the backend's own operations count for nothing.
  std::this_thread::sleep_for(milliseconds(20));
  s.OpStarted();
  std::this_thread::sleep_for(milliseconds(20));
  s.OpEnded();
  EXPECT_EQ(s.Stats().write_seconds, busy);
}

TEST(HedgeStateTest, WaitIdleWaitsForEveryOperation) {
  TestState s(HedgeOptions{}, nullptr);
  EXPECT_TRUE(s.WaitIdle(milliseconds(1)));
  s.OpStarted();
  EXPECT_FALSE(s.WaitIdle(milliseconds(20)));
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(30));
    s.OpEnded();
  });
  EXPECT_TRUE(s.WaitIdle(std::chrono::seconds(5)));
  t.join();
}

}  // namespace
}  // namespace sluice
