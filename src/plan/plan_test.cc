// The checkpoint-cycle model against figures worked out by hand (the same
// example as doc/planning.md), the bounds it names, and the inputs it refuses.
#include <gtest/gtest.h>

#include <cmath>

#include "sluice/plan.h"

namespace sluice {
namespace {

constexpr double GiB = 1024.0 * 1024 * 1024;

struct Example {
  PlanJob job;
  PlanHost host;
  PlanLayout layout;
  PlanFailures failures;
  Example() {
    job.state_bytes_per_rank = 10 * GiB;
    job.ranks_per_host = 8;
    job.hosts = 4;
    job.interval_s = 600;
    job.step_s = 2;
    job.gpu = true;
    host.memcpy_bytes_per_s = 20 * GiB;
    host.d2h_bytes_per_s = 10 * GiB;
    host.staging_bytes = 128 * GiB;
    host.nvme_write_bytes_per_s = 4 * GiB;
    host.nvme_read_bytes_per_s = 6 * GiB;
    host.nic_bytes_per_s = 10 * GiB;
    host.storage_link_share = 0.5;
    layout.name = "nvme+ceph";
    layout.durable.kind = PlanTierKind::kCeph;
    layout.durable.osds = 12;
    layout.durable.osd_write_bytes_per_s = 1 * GiB;
    layout.durable.osd_read_bytes_per_s = 2 * GiB;
    layout.durable.write_amplification = 3;
    failures.host_mtbf_hours = 1000;
    failures.restart_s = 60;
  }
  CyclePlan Plan() const {
    auto p = PlanCycle(job, host, layout, failures);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? *p : CyclePlan{};
  }
};

TEST(PlanTest, TheWorkedExampleMatchesTheHandFigures) {
  Example e;
  CyclePlan p = e.Plan();
  EXPECT_DOUBLE_EQ(p.host_bytes, 80 * GiB);
  EXPECT_DOUBLE_EQ(p.stall.value, 4.0);  // 80 GiB at memcpy's 20 GiB/s (8 GPUs x 10 would be 80)
  EXPECT_NE(p.stall.bound.find("memcpy"), std::string::npos) << p.stall.bound;
  EXPECT_DOUBLE_EQ(p.drain.value, 80.0);  // 320 GiB at 12 OSDs x 1 GiB/s / 3 copies
  EXPECT_NE(p.drain.bound.find("12 OSDs"), std::string::npos) << p.drain.bound;
  EXPECT_DOUBLE_EQ(p.tier0_durable.value, 24.0);  // 4 + 80 GiB / 4 GiB/s
  EXPECT_DOUBLE_EQ(p.durable.value, 104.0);
  EXPECT_DOUBLE_EQ(p.min_interval.value, 80.0);
  EXPECT_TRUE(p.backlog_bounded);
  EXPECT_DOUBLE_EQ(p.training_link_share_during_drain, 0.9);  // 1 GiB/s of a 10 GiB/s link
  EXPECT_NEAR(p.training_link_share_average, 1 - 0.1 * 80 / 600, 1e-12);
  EXPECT_NEAR(p.recovery.value, 80.0 / 6 + 60, 1e-9);  // survivors read NVMe at 6 GiB/s, then restart
  EXPECT_NE(p.recovery.bound.find("NVMe read"), std::string::npos) << p.recovery.bound;
  const double mtbf = 1000.0 * 3600 / 4;
  EXPECT_NEAR(p.best_interval.value, std::sqrt(2 * 4 * mtbf), 1e-6);
  const double waste = 4 / p.best_interval.value + (p.best_interval.value / 2 + 104 + 80.0 / 6 + 60) / mtbf;
  EXPECT_NEAR(p.gpu_hours_lost_per_day, 32 * 24 * waste, 1e-9);
}

TEST(PlanTest, ALazySnapshotHidesOneStepOfTheCopy) {
  Example e;
  e.job.lazy = true;
  EXPECT_DOUBLE_EQ(e.Plan().stall.value, 2.0);
  e.job.step_s = 10;
  EXPECT_DOUBLE_EQ(e.Plan().stall.value, 0.0);
}

TEST(PlanTest, StateLargerThanStagingStreamsAtTheSlowerOfCopyAndNvme) {
  Example e;
  e.host.staging_bytes = 40 * GiB;
  CyclePlan p = e.Plan();
  EXPECT_DOUBLE_EQ(p.stall.value, 2.0 + 10.0);  // 40 GiB at 20 GiB/s, then 40 GiB at NVMe's 4
  EXPECT_NE(p.stall.bound.find("NVMe write"), std::string::npos) << p.stall.bound;
}

TEST(PlanTest, ASlowOsdIsHedgedAround) {
  Example e;
  e.failures.slow_osd = true;
  EXPECT_NEAR(e.Plan().drain.value, 320.0 / (11.0 / 3), 1e-9);
}

TEST(PlanTest, WithoutLocalNvmeEveryHostRecoversFromTheDurableTier) {
  Example e;
  e.layout.name = "ceph";
  e.layout.local_tier0 = false;
  e.host.nvme_write_bytes_per_s = 0;
  e.host.nvme_read_bytes_per_s = 0;
  CyclePlan p = e.Plan();
  EXPECT_DOUBLE_EQ(p.tier0_durable.value, 0.0);
  EXPECT_DOUBLE_EQ(p.durable.value, 84.0);  // the copy, then straight to Ceph
  EXPECT_NEAR(p.recovery.value, 320.0 / 24 + 60, 1e-9);  // 4 hosts read 24 GiB/s of OSDs
}

TEST(PlanTest, TheLinkBoundsAnS3Tier) {
  Example e;
  e.layout.name = "nvme+s3";
  e.layout.durable = PlanTier{};
  e.layout.durable.kind = PlanTierKind::kS3;
  e.layout.durable.write_bytes_per_s = 100 * GiB;
  e.layout.durable.read_bytes_per_s = 100 * GiB;
  CyclePlan p = e.Plan();
  EXPECT_DOUBLE_EQ(p.drain.value, 320.0 / 20);  // 4 hosts x 10 GiB/s x 0.5
  EXPECT_NE(p.drain.bound.find("4 hosts x"), std::string::npos) << p.drain.bound;
  EXPECT_DOUBLE_EQ(p.training_link_share_during_drain, 0.5);
}

TEST(PlanTest, PeersMakeAStepSafeBeforeItIsDurableAndLostWorkCountsFromSafe) {
  Example e;
  e.host.peer_bytes_per_s = 2 * GiB;  // the peer cap, under the 10 GiB/s link
  auto base = PlanCycle(e.job, e.host, e.layout, e.failures);
  ASSERT_TRUE(base.ok());
  e.layout.name = "nvme+peer+ceph";
  e.layout.peer_replicas = 1;
  auto p = PlanCycle(e.job, e.host, e.layout, e.failures);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  // 80 GiB per host at the 2 GiB/s cap, once tier 0 holds it (20 s).
  EXPECT_NEAR(p->safe.value, p->tier0_durable.value + 40, 1e-6);
  EXPECT_NE(p->safe.bound.find("the peer cap"), std::string::npos) << p->safe.bound;
  EXPECT_LT(p->safe.value, p->durable.value);
  EXPECT_DOUBLE_EQ(p->durable.value, base->durable.value);
  // The replacement fetches its 80 GiB part through its 10 GiB/s link,
  // writes it at 4 GiB/s and reads it at 6 GiB/s; then the restart.
  EXPECT_NEAR(p->recovery.value, 8 + 20 + 80.0 / 6 + 60, 1e-6);
  EXPECT_NE(p->recovery.bound.find("fetches its part from a peer"), std::string::npos) << p->recovery.bound;
  // Lost work: half a replication (or interval) + safe + recovery per failure.
  const double mtbf = 1000.0 * 3600 / 4, gpus = 32;
  const double at_job = gpus * 24 * (p->stall.value / 600 + (600.0 / 2 + p->safe.value + p->recovery.value) / mtbf);
  EXPECT_NEAR(p->gpu_hours_lost_per_day_at_job_interval, at_job, 1e-9);

  e.layout.name = "nvme+peer";
  e.layout.durable_tier = false;
  auto alone = PlanCycle(e.job, e.host, e.layout, e.failures);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_DOUBLE_EQ(alone->safe.value, p->safe.value);
  EXPECT_EQ(alone->drain.value, 0);

  e.layout.peer_replicas = 4;  // as many as there are hosts
  EXPECT_EQ(PlanCycle(e.job, e.host, e.layout, e.failures).status().code(), StatusCode::kInvalidArgument);
}

TEST(PlanTest, ImpossibleInputsNameTheirField) {
  Example e;
  e.job.state_bytes_per_rank = -1;
  auto p = PlanCycle(e.job, e.host, e.layout, e.failures);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().ToString().find("job.state_bytes_per_rank must be a positive number"), std::string::npos);

  Example short_interval;
  short_interval.job.interval_s = 3;  // the copy takes 4 s
  p = PlanCycle(short_interval.job, short_interval.host, short_interval.layout, short_interval.failures);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().ToString().find("job.interval_s (3 s) is shorter than the save's copy (4 s"),
            std::string::npos) << p.status().ToString();

  Example no_nvme;
  no_nvme.host.nvme_write_bytes_per_s = 0;
  p = PlanCycle(no_nvme.job, no_nvme.host, no_nvme.layout, no_nvme.failures);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().ToString().find("host.nvme_write_bytes_per_s (a local tier 0)"), std::string::npos);

  Example share;
  share.host.storage_link_share = 1.5;
  EXPECT_FALSE(PlanCycle(share.job, share.host, share.layout, share.failures).ok());
}

TEST(PlanTest, ComparisonPicksTheFewestLostGpuHoursAndNamesWhatSeparatesThem) {
  Example local, alone;
  alone.layout.name = "ceph";
  alone.layout.local_tier0 = false;
  auto a = PlanCycle(local.job, local.host, local.layout, local.failures);
  auto b = PlanCycle(alone.job, alone.host, alone.layout, alone.failures);
  ASSERT_TRUE(a.ok() && b.ok());
  PlanComparison c = ComparePlans({*a, *b});
  const size_t expect = a->gpu_hours_lost_per_day <= b->gpu_hours_lost_per_day ? 0 : 1;
  EXPECT_EQ(c.best, expect);
  EXPECT_NE(c.reason.find("loses the fewest GPU-hours"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("differ most in"), std::string::npos) << c.reason;
}

TEST(PlanTest, AClusterIsAsFastAsItsSlowestHostAndLayoutsNeedTheirTier) {
  PlanCluster a, b;
  a.host.memcpy_bytes_per_s = 10e9;
  a.host.nic_bytes_per_s = 5e9;
  b.host.memcpy_bytes_per_s = 8e9;
  b.host.nic_bytes_per_s = 6e9;
  PlanTier ceph;
  ceph.osds = 6;
  ceph.osd_write_bytes_per_s = 200e6;
  ceph.write_amplification = 3;
  a.tiers["ceph"] = ceph;
  ceph.osds = 4;
  ceph.write_amplification = 2;
  b.tiers["ceph"] = ceph;
  PlanTier s3;
  s3.kind = PlanTierKind::kS3;
  s3.write_bytes_per_s = 1e9;
  b.tiers["s3"] = s3;
  AddSlowerHost(&a, b);
  EXPECT_EQ(a.host.memcpy_bytes_per_s, 8e9);
  EXPECT_EQ(a.host.nic_bytes_per_s, 5e9);
  EXPECT_EQ(a.tiers["ceph"].osds, 4u);
  EXPECT_EQ(a.tiers["ceph"].write_amplification, 3);  // the worse amplification
  ASSERT_EQ(a.tiers.count("s3"), 1u);                 // a tier one host alone has
  auto layout = LayoutOf(a, "nvme+s3");
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_TRUE(layout->local_tier0);
  EXPECT_EQ(layout->durable.kind, PlanTierKind::kS3);
  auto missing = LayoutOf(a, "shared-fs");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("tiers.shared-fs"), std::string::npos) << missing.status().ToString();
  EXPECT_FALSE(LayoutOf(a, "tape").ok());
  EXPECT_EQ(PlanLayoutNames().front(), "nvme+ceph");
}

}  // namespace
}  // namespace sluice
