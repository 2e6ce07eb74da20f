// PickAwayFromSlow (away_from_slow.h): the first candidate whose records
// are all away from slow placements, else the one with the fewest slow
// records; nothing asked of a store without a Placement.
#include "checkpoint/away_from_slow.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/slow_names_fixture.h"

namespace sluice {
namespace {

class PickAwayFromSlowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-away-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto b = OpenBackend(dir_, true);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    store_ = std::move(b).value();
  }
  void TearDown() override {
    store_.reset();
    (void)std::system(("rm -rf " + dir_).c_str());
  }
  std::string dir_;
  std::unique_ptr<Backend> store_;
};

TEST_F(PickAwayFromSlowTest, WithoutAPlacementNothingIsAskedAndTheFirstIsTaken) {
  Backend* store = store_.get();
  int asked = 0;
  EXPECT_EQ(PickAwayFromSlow(*store, 16, [&](uint32_t) {
              ++asked;
              return std::vector<std::string>{"x"};
            }),
            0u);
  EXPECT_EQ(asked, 0);
}

TEST_F(PickAwayFromSlowTest, TheFirstWithNoSlowRecordElseTheFewestLowestFirst) {
  Backend& store = *store_;
  std::set<std::string> slow = {"a0", "b0", "a1", "a2", "b2", "c2", "a3", "b3"};
  SlowNames names(store, [&](const std::string& n) { return slow.count(n) > 0; });
  auto records = [](uint32_t k) {
    const std::string i = std::to_string(k);
    return std::vector<std::string>{"a" + i, "b" + i, "c" + i};
  };
  // 0: two slow, 1: one, 2: three, 3: two, 4: none.
  std::vector<uint32_t> asked;
  EXPECT_EQ(PickAwayFromSlow(names, 8, [&](uint32_t k) {
              asked.push_back(k);
              return records(k);
            }),
            4u);
  EXPECT_EQ(asked, (std::vector<uint32_t>{0, 1, 2, 3, 4})) << "candidates after one with none slow are not asked";
  // Every candidate has a slow record: the fewest (1), the lowest of ties.
  EXPECT_EQ(PickAwayFromSlow(names, 4, records), 1u);
  slow.insert("b1");
  EXPECT_EQ(PickAwayFromSlow(names, 4, records), 0u) << "0 and 1 and 3 tie at two";
}

}  // namespace
}  // namespace sluice
