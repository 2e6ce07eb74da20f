// The checkpoint-cycle model (include/sluice/plan.h). Each formula here is
// written out in doc/planning.md under the same name.
#include "sluice/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

namespace sluice {
namespace {

std::string Rate(double bytes_per_s) {
  char buf[64];
  if (bytes_per_s >= (1ull << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB/s", bytes_per_s / (1ull << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%.0f MiB/s", bytes_per_s / (1ull << 20));
  }
  return buf;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

Status Positive(double v, const char* field) {
  if (!(v > 0) || !std::isfinite(v)) {
    return Status::InvalidArgument(std::string(field) + " must be a positive number, not " + Num(v));
  }
  return Status::OK();
}

Status NonNegative(double v, const char* field) {
  if (!(v >= 0) || !std::isfinite(v)) {
    return Status::InvalidArgument(std::string(field) + " must not be negative, not " + Num(v));
  }
  return Status::OK();
}

// The smaller of two bounded rates.
Bounded Lesser(Bounded a, Bounded b) { return b.value < a.value ? b : a; }

// The durable tier's aggregate write rate, and what bounds it.
Bounded DurableWriteRate(const PlanJob& job, const PlanHost& host, const PlanTier& t, bool slow_osd) {
  const double hosts = job.hosts;
  Bounded links{hosts * host.nic_bytes_per_s * host.storage_link_share,
                Num(hosts) + " hosts x " + Rate(host.nic_bytes_per_s) + " link x " +
                    Num(host.storage_link_share) + " share"};
  if (t.kind != PlanTierKind::kCeph) {
    const char* what = t.kind == PlanTierKind::kS3 ? "S3, measured " : "the shared filesystem, measured ";
    return Lesser(links, {t.write_bytes_per_s, what + Rate(t.write_bytes_per_s)});
  }
  // Hedged writes place every object away from a slow OSD: the others take
  // the whole load.
  const double osds = t.osds - (slow_osd ? 1 : 0);
  Bounded osd{osds * t.osd_write_bytes_per_s / t.write_amplification,
              Num(osds) + " OSDs x " + Rate(t.osd_write_bytes_per_s) + " / " + Num(t.write_amplification) +
                  " copies"};
  Bounded out = Lesser(links, osd);
  if (t.network_bytes_per_s > 0) {
    out = Lesser(out, {t.network_bytes_per_s, "the cluster's network, " + Rate(t.network_bytes_per_s)});
  }
  return out;
}

// The durable tier's aggregate read rate.
Bounded DurableReadRate(const PlanTier& t) {
  if (t.kind != PlanTierKind::kCeph) {
    return {t.read_bytes_per_s, std::string(t.kind == PlanTierKind::kS3 ? "S3" : "the shared filesystem") +
                                    ", measured " + Rate(t.read_bytes_per_s)};
  }
  Bounded osd{t.osds * t.osd_read_bytes_per_s, Num(t.osds) + " OSDs x " + Rate(t.osd_read_bytes_per_s)};
  if (t.network_bytes_per_s > 0) {
    osd = Lesser(osd, {t.network_bytes_per_s, "the cluster's network, " + Rate(t.network_bytes_per_s)});
  }
  return osd;
}

}  // namespace

const char* PlanTierKindName(PlanTierKind kind) {
  switch (kind) {
    case PlanTierKind::kCeph: return "ceph";
    case PlanTierKind::kS3: return "s3";
    case PlanTierKind::kSharedFs: return "shared-fs";
  }
  return "?";
}

namespace {

Status ValidateDurableTier(const PlanTier& t, const PlanFailures& failures) {
  const std::string tier = std::string("tiers.") + PlanTierKindName(t.kind);
  if (t.kind == PlanTierKind::kCeph) {
    if (t.osds == 0 || (failures.slow_osd && t.osds < 2)) {
      return Status::InvalidArgument(tier + ".osds must be at least " + (failures.slow_osd ? "2 with a slow OSD" : "1"));
    }
    RETURN_IF_ERROR(Positive(t.osd_write_bytes_per_s, (tier + ".osd_write_bytes_per_s").c_str()));
    RETURN_IF_ERROR(Positive(t.osd_read_bytes_per_s, (tier + ".osd_read_bytes_per_s").c_str()));
    if (!(t.write_amplification >= 1)) {
      return Status::InvalidArgument(tier + ".write_amplification must be at least 1, not " + Num(t.write_amplification));
    }
    RETURN_IF_ERROR(NonNegative(t.network_bytes_per_s, (tier + ".network_bytes_per_s").c_str()));
  } else {
    RETURN_IF_ERROR(Positive(t.write_bytes_per_s, (tier + ".write_bytes_per_s").c_str()));
    RETURN_IF_ERROR(Positive(t.read_bytes_per_s, (tier + ".read_bytes_per_s").c_str()));
  }
  return Status::OK();
}

}  // namespace

Status ValidatePlanInputs(const PlanJob& job, const PlanHost& host, const PlanLayout& layout,
                          const PlanFailures& failures) {
  RETURN_IF_ERROR(Positive(job.state_bytes_per_rank, "job.state_bytes_per_rank"));
  RETURN_IF_ERROR(Positive(job.ranks_per_host, "job.ranks_per_host"));
  RETURN_IF_ERROR(Positive(job.hosts, "job.hosts"));
  RETURN_IF_ERROR(Positive(job.interval_s, "job.interval_s"));
  RETURN_IF_ERROR(Positive(job.step_s, "job.step_s"));
  RETURN_IF_ERROR(Positive(host.memcpy_bytes_per_s, "host.memcpy_bytes_per_s"));
  if (job.gpu) RETURN_IF_ERROR(Positive(host.d2h_bytes_per_s, "host.d2h_bytes_per_s (a GPU job)"));
  RETURN_IF_ERROR(Positive(host.staging_bytes, "host.staging_bytes"));
  RETURN_IF_ERROR(Positive(host.nic_bytes_per_s, "host.nic_bytes_per_s"));
  if (!(host.storage_link_share > 0 && host.storage_link_share <= 1)) {
    return Status::InvalidArgument("host.storage_link_share must be in (0, 1], not " + Num(host.storage_link_share));
  }
  if (layout.local_tier0) {
    RETURN_IF_ERROR(Positive(host.nvme_write_bytes_per_s, "host.nvme_write_bytes_per_s (a local tier 0)"));
    RETURN_IF_ERROR(Positive(host.nvme_read_bytes_per_s, "host.nvme_read_bytes_per_s (a local tier 0)"));
  }
  RETURN_IF_ERROR(NonNegative(host.peer_bytes_per_s, "host.peer_bytes_per_s"));
  if (layout.peer_replicas > 0 && !layout.local_tier0) {
    return Status::InvalidArgument("layout " + layout.name + ": peer replicas need a local tier 0");
  }
  if (layout.peer_replicas >= job.hosts && layout.peer_replicas > 0) {
    return Status::InvalidArgument("job.hosts (" + Num(job.hosts) + ") must be more than the layout's " +
                                   Num(layout.peer_replicas) + " peer replica(s)");
  }
  if (!layout.durable_tier && layout.peer_replicas == 0) {
    return Status::InvalidArgument("layout " + layout.name + ": no durable tier and no peers");
  }
  if (layout.durable_tier) RETURN_IF_ERROR(ValidateDurableTier(layout.durable, failures));
  RETURN_IF_ERROR(NonNegative(failures.host_mtbf_hours, "failures.host_mtbf_hours"));
  RETURN_IF_ERROR(NonNegative(failures.drive_bytes, "failures.drive_bytes"));
  RETURN_IF_ERROR(NonNegative(failures.rebuild_cap_bytes_per_s, "failures.rebuild_cap_bytes_per_s"));
  RETURN_IF_ERROR(NonNegative(failures.restart_s, "failures.restart_s"));
  if (failures.drive_bytes > 0 && failures.rebuild_cap_bytes_per_s == 0) {
    return Status::InvalidArgument("failures.rebuild_cap_bytes_per_s is needed with failures.drive_bytes");
  }
  return Status::OK();
}

namespace {

// The rebuild and the expected lost work of plan `p` (its copy, durable
// or safe times and recovery set). `replicate`: a peer layout's
// replication time (0: none).
CyclePlan FinishPlan(const PlanJob& job, const PlanLayout& layout, const PlanFailures& failures, double replicate,
                     CyclePlan p) {
  const double ranks = job.ranks_per_host, hosts = job.hosts;
  if (failures.drive_bytes > 0) {
    p.rebuild = {failures.drive_bytes / failures.rebuild_cap_bytes_per_s,
                 "rebuild cap " + Rate(failures.rebuild_cap_bytes_per_s)};
  }
  // Expected lost work (Young): a checkpoint costs its stall C; a failure
  // every M seconds (the job's MTBF) loses half an interval on average, the
  // time until the newest checkpoint was durable, and the recovery.
  const double gpus = ranks * hosts;
  const double floor_interval = std::max(p.min_interval.value, job.step_s);
  if (failures.host_mtbf_hours > 0) {
    const double mtbf = failures.host_mtbf_hours * 3600 / hosts;
    const double c = p.stall.value;
    const double young = std::sqrt(2 * c * mtbf);
    p.best_interval = young >= floor_interval
                          ? Bounded{young, "Young: sqrt(2 x stall x job MTBF " + Num(mtbf / 3600) + " h)"}
                          : Bounded{floor_interval, "the shortest interval whose backlog stays bounded (" +
                                                        p.min_interval.bound + ")"};
    auto lost_per_day = [&](double interval) {
      // A step becomes durable at most once per drain: checkpointing more
      // often adds stalls, not durable steps to roll back to.
      // With peers a step is safe (the rollback target) once per
      // replication, and safe after p.safe instead of durable after p.durable.
      const bool peers = layout.peer_replicas > 0;
      const double durable_every = std::max(interval, peers ? replicate : p.drain.value);
      const double until = peers ? p.safe.value : p.durable.value;
      const double waste = c / interval + (durable_every / 2 + until + p.recovery.value) / mtbf;
      return gpus * 24 * std::min(1.0, waste);
    };
    p.gpu_hours_lost_per_day = lost_per_day(p.best_interval.value);
    p.gpu_hours_lost_per_day_at_job_interval = lost_per_day(job.interval_s);
  } else {
    p.best_interval = {floor_interval, "no MTBF given: the shortest interval whose backlog stays bounded"};
    p.gpu_hours_lost_per_day = gpus * 24 * p.stall.value / p.best_interval.value;
    p.gpu_hours_lost_per_day_at_job_interval = gpus * 24 * p.stall.value / job.interval_s;
  }
  return p;
}

}  // namespace

Result<CyclePlan> PlanCycle(const PlanJob& job, const PlanHost& host, const PlanLayout& layout,
                            const PlanFailures& failures) {
  RETURN_IF_ERROR(ValidatePlanInputs(job, host, layout, failures));
  CyclePlan p;
  p.layout = layout.name;
  const double ranks = job.ranks_per_host, hosts = job.hosts;
  p.host_bytes = job.state_bytes_per_rank * ranks;
  p.job_bytes = p.host_bytes * hosts;

  // Copy: every rank of a host at once, into the host's staging.
  Bounded copy_rate{host.memcpy_bytes_per_s, "memcpy, " + Rate(host.memcpy_bytes_per_s) + " per host"};
  if (job.gpu) {
    copy_rate = Lesser({ranks * host.d2h_bytes_per_s, Num(ranks) + " GPUs x " + Rate(host.d2h_bytes_per_s) +
                                                          " device-to-host"}, copy_rate);
  }
  const Bounded write_rate = layout.durable_tier ? DurableWriteRate(job, host, layout.durable, failures.slow_osd)
                                                : Bounded{0, "no durable tier"};
  // Where staged bytes go first: the host's NVMe, or its share of the
  // durable tier.
  const Bounded sink = layout.local_tier0
                           ? Bounded{host.nvme_write_bytes_per_s, "NVMe write, " + Rate(host.nvme_write_bytes_per_s)}
                           : Bounded{write_rate.value / hosts, write_rate.bound + ", per host"};
  const double staged = std::min(p.host_bytes, host.staging_bytes);
  p.copy = {staged / copy_rate.value, copy_rate.bound};
  if (p.host_bytes > host.staging_bytes) {
    // Larger than staging: the rest streams through it as the first tier frees it.
    const Bounded through = Lesser(copy_rate, sink);
    p.copy = {p.copy.value + (p.host_bytes - staged) / through.value,
              "staging (" + Num(host.staging_bytes / (1ull << 30)) + " GiB) smaller than the state: " + through.bound};
  }
  p.stall = p.copy;
  if (job.lazy) {
    p.stall = {std::max(0.0, p.copy.value - job.step_s),
               "lazy: what of the copy (" + p.copy.bound + ") one step of " + Num(job.step_s) + " s does not hide"};
  }
  if (job.interval_s < p.copy.value) {
    return Status::InvalidArgument("job.interval_s (" + Num(job.interval_s) + " s) is shorter than the save's copy (" +
                                   Num(p.copy.value) + " s, " + p.copy.bound + ")");
  }

  // Durability: tier 0 after the copy; the durable tier after tier 0 (a
  // drain) or straight from staging.
  double start_of_drain = p.copy.value;
  if (layout.local_tier0) {
    p.tier0_durable = {p.copy.value + staged / host.nvme_write_bytes_per_s, sink.bound};
    start_of_drain = p.tier0_durable.value;
  }
  if (layout.durable_tier) {
    p.drain = {p.job_bytes / write_rate.value, write_rate.bound};
    p.durable = {start_of_drain + p.drain.value, p.drain.bound};
  } else {
    p.drain = p.durable = {0, "no durable tier"};
  }
  p.min_interval = p.drain;
  // Peers: once tier 0 holds the part, each host sends it to its peers
  // and takes as many parts from others, at once (a full-duplex link).
  double replicate = 0, peer_busy = 0;
  if (layout.peer_replicas > 0) {
    const Bounded peer = host.peer_bytes_per_s > 0 && host.peer_bytes_per_s < host.nic_bytes_per_s
                             ? Bounded{host.peer_bytes_per_s, "the peer cap, " + Rate(host.peer_bytes_per_s)}
                             : Bounded{host.nic_bytes_per_s, "the host's link, " + Rate(host.nic_bytes_per_s)};
    replicate = layout.peer_replicas * p.host_bytes / peer.value;
    p.safe = {p.tier0_durable.value + replicate,
              Num(layout.peer_replicas) + " replica(s) of the host's part at " + peer.bound};
    peer_busy = peer.value / host.nic_bytes_per_s;
    // Every step is safe if the interval outlasts its replication; the
    // durable tier coalesces (drains the newest waiting step).
    p.min_interval = {replicate, "the replication, " + p.safe.bound + " (the durable tier coalesces)"};
  }
  p.backlog_bounded = job.interval_s >= p.min_interval.value;

  // The link: a drain takes its host's share of the durable rate, peer
  // traffic its own rate while it runs.
  const double per_host_drain = write_rate.value / hosts;
  const double busy = std::min(1.0, per_host_drain / host.nic_bytes_per_s);
  p.training_link_share_during_drain = std::max(0.0, 1 - busy - peer_busy);
  p.training_link_share_average = std::max(0.0, 1 - busy * std::min(1.0, p.drain.value / job.interval_s) -
                                                    peer_busy * std::min(1.0, replicate / job.interval_s));

  // Recovery after a host loss: the replacement host reads its ranks' state
  // from the durable tier; the others from their NVMe (or the durable tier
  // too, without one); then the job restarts. With peers the job rolls
  // back to the newest safe step: the replacement host takes its ranks'
  // part from the peer holding it, through its link, writes it into its
  // tier 0 and reads it from there (one after the other, as the restore
  // does); the survivors read their own NVMe.
  if (layout.peer_replicas > 0) {
    const double fetch = p.host_bytes / host.nic_bytes_per_s;
    const double write = p.host_bytes / host.nvme_write_bytes_per_s;
    const double read = p.host_bytes / host.nvme_read_bytes_per_s;
    p.recovery = {fetch + write + read + failures.restart_s,
                  "the replacement host fetches its part from a peer through its link (" +
                      Rate(host.nic_bytes_per_s) + "), writes it to NVMe and reads it back"};
    return FinishPlan(job, layout, failures, replicate, p);
  }
  const Bounded read_rate = DurableReadRate(layout.durable);
  const Bounded one_host = Lesser({host.nic_bytes_per_s, "the host's link, " + Rate(host.nic_bytes_per_s)}, read_rate);
  Bounded replacement{p.host_bytes / one_host.value, "the replacement host reads the durable tier: " + one_host.bound};
  Bounded survivors;
  if (layout.local_tier0) {
    survivors = {p.host_bytes / host.nvme_read_bytes_per_s, "NVMe read, " + Rate(host.nvme_read_bytes_per_s)};
  } else {
    const Bounded all = Lesser({hosts * host.nic_bytes_per_s, Num(hosts) + " hosts x " + Rate(host.nic_bytes_per_s)},
                               read_rate);
    survivors = {p.job_bytes / all.value, "every host reads the durable tier: " + all.bound};
  }
  p.recovery = survivors.value > replacement.value ? survivors : replacement;
  p.recovery.value += failures.restart_s;
  return FinishPlan(job, layout, failures, 0, p);
}

PlanComparison ComparePlans(const std::vector<CyclePlan>& plans) {
  PlanComparison out;
  if (plans.empty()) return out;
  for (size_t i = 1; i < plans.size(); ++i) {
    if (plans[i].gpu_hours_lost_per_day < plans[out.best].gpu_hours_lost_per_day) out.best = i;
  }
  const CyclePlan& b = plans[out.best];
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s loses the fewest GPU-hours a day (%.2f at an interval of %.0f s).",
                b.layout.c_str(), b.gpu_hours_lost_per_day, b.best_interval.value);
  out.reason = buf;
  if (plans.size() < 2) return out;
  size_t runner = out.best == 0 ? 1 : 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (i != out.best && plans[i].gpu_hours_lost_per_day < plans[runner].gpu_hours_lost_per_day) runner = i;
  }
  const CyclePlan& r = plans[runner];
  // The figure that differs most, as a ratio, is the assumption to check.
  struct Figure {
    const char* what;
    const Bounded& mine;
    const Bounded& theirs;
  };
  const Figure figures[] = {{"stall", b.stall, r.stall},
                            {"time to durable", b.durable, r.durable},
                            {"recovery after a host loss", b.recovery, r.recovery},
                            {"shortest bounded interval", b.min_interval, r.min_interval}};
  const Figure* widest = nullptr;
  double widest_ratio = 0;
  for (const Figure& f : figures) {
    const double lo = std::min(f.mine.value, f.theirs.value), hi = std::max(f.mine.value, f.theirs.value);
    const double ratio = lo > 0 ? hi / lo : (hi > 0 ? INFINITY : 1);
    if (ratio > widest_ratio) {
      widest_ratio = ratio;
      widest = &f;
    }
  }
  char ratio_text[160];
  std::snprintf(ratio_text, sizeof ratio_text, " The runner-up, %s, loses %.2f. They differ most in ",
                r.layout.c_str(), r.gpu_hours_lost_per_day);
  auto seconds = [](double v) {
    char t[32];
    std::snprintf(t, sizeof t, "%.3g s", v);
    return std::string(t);
  };
  out.reason += ratio_text + std::string(widest->what) + ": " + seconds(widest->mine.value) + " (" +
                widest->mine.bound + ") against " + seconds(widest->theirs.value) + " (" + widest->theirs.bound +
                "); if that input is wrong, so is the choice.";
  return out;
}

namespace {

// The slower of two hosts (or tiers): the least of each rate.
void TakeSlower(PlanHost* a, const PlanHost& b) {
  a->memcpy_bytes_per_s = std::min(a->memcpy_bytes_per_s, b.memcpy_bytes_per_s);
  a->d2h_bytes_per_s = std::min(a->d2h_bytes_per_s, b.d2h_bytes_per_s);
  a->staging_bytes = std::min(a->staging_bytes, b.staging_bytes);
  a->nvme_write_bytes_per_s = std::min(a->nvme_write_bytes_per_s, b.nvme_write_bytes_per_s);
  a->nvme_read_bytes_per_s = std::min(a->nvme_read_bytes_per_s, b.nvme_read_bytes_per_s);
  a->nic_bytes_per_s = std::min(a->nic_bytes_per_s, b.nic_bytes_per_s);
  a->storage_link_share = std::min(a->storage_link_share, b.storage_link_share);
  // 0: the link (no peer cap), the faster of any two.
  if (a->peer_bytes_per_s == 0 || (b.peer_bytes_per_s > 0 && b.peer_bytes_per_s < a->peer_bytes_per_s)) {
    a->peer_bytes_per_s = b.peer_bytes_per_s;
  }
}

void TakeSlower(PlanTier* a, const PlanTier& b) {
  a->osds = std::min(a->osds, b.osds);
  a->osd_write_bytes_per_s = std::min(a->osd_write_bytes_per_s, b.osd_write_bytes_per_s);
  a->osd_read_bytes_per_s = std::min(a->osd_read_bytes_per_s, b.osd_read_bytes_per_s);
  a->write_amplification = std::max(a->write_amplification, b.write_amplification);
  a->write_bytes_per_s = std::min(a->write_bytes_per_s, b.write_bytes_per_s);
  a->read_bytes_per_s = std::min(a->read_bytes_per_s, b.read_bytes_per_s);
  if (a->network_bytes_per_s == 0 || (b.network_bytes_per_s > 0 && b.network_bytes_per_s < a->network_bytes_per_s)) {
    a->network_bytes_per_s = b.network_bytes_per_s;
  }
}

}  // namespace

void AddSlowerHost(PlanCluster* cluster, const PlanCluster& other) {
  TakeSlower(&cluster->host, other.host);
  for (const auto& [kind, tier] : other.tiers) {
    auto found = cluster->tiers.find(kind);
    if (found == cluster->tiers.end()) {
      cluster->tiers[kind] = tier;
    } else {
      TakeSlower(&found->second, tier);
    }
  }
}

const std::vector<std::string>& PlanLayoutNames() {
  static const std::vector<std::string> names = {"nvme+ceph",      "ceph",          "shared-fs", "nvme+s3",
                                                 "nvme+peer+ceph", "nvme+peer+s3", "nvme+peer"};
  return names;
}

Result<PlanLayout> LayoutOf(const PlanCluster& cluster, const std::string& name) {
  struct Shape {
    bool local_tier0;
    uint32_t peer_replicas;
    std::string tier;  // "": no durable tier
  };
  static const std::map<std::string, Shape> kLayouts = {
      {"nvme+ceph", {true, 0, "ceph"}},     {"ceph", {false, 0, "ceph"}},
      {"shared-fs", {false, 0, "shared-fs"}}, {"nvme+s3", {true, 0, "s3"}},
      {"nvme+peer+ceph", {true, 1, "ceph"}}, {"nvme+peer+s3", {true, 1, "s3"}},
      {"nvme+peer", {true, 1, ""}}};
  auto found = kLayouts.find(name);
  if (found == kLayouts.end()) {
    std::string all;
    for (const auto& n : PlanLayoutNames()) all += (all.empty() ? "" : ", ") + n;
    return Status::InvalidArgument("layout '" + name + "' is not one of " + all);
  }
  PlanLayout layout;
  layout.name = name;
  layout.local_tier0 = found->second.local_tier0;
  layout.peer_replicas = found->second.peer_replicas;
  layout.durable_tier = !found->second.tier.empty();
  if (!layout.durable_tier) return layout;
  auto tier = cluster.tiers.find(found->second.tier);
  if (tier == cluster.tiers.end()) {
    return Status::InvalidArgument("the profile has no tiers." + found->second.tier + " (layout " + name +
                                   " needs it: calibrate with such a --tier, or add it by hand)");
  }
  layout.durable = tier->second;
  return layout;
}

}  // namespace sluice
