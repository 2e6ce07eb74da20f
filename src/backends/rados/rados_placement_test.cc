// The names the RADOS placement gives a hedged object's copies
// (rados_placement.h), without a cluster. Where they fall is tested
// against a cluster by rados_backend_test and backend_conformance_test
// (tests/ceph_test.sh), and past a slow OSD by tests/testbed_test.sh.
#include "backends/rados/rados_placement.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(HedgeNameTest, GoesBesideTheNameBeforeItsExtension) {
  EXPECT_EQ(HedgeName("ckpt/a/1/data/r000000-ab-000003.dat", 0), "ckpt/a/1/data/r000000-ab-000003.dat");
  EXPECT_EQ(HedgeName("ckpt/a/1/data/r000000-ab-000003.dat", 2), "ckpt/a/1/data/r000000-ab-000003-h2.dat");
  EXPECT_EQ(HedgeName("dir.v2/object", 1), "dir.v2/object-h1");
  EXPECT_EQ(HedgeName("plain", 12), "plain-h12");
}

}  // namespace
}  // namespace sluice
