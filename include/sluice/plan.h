// Planning: what one checkpoint cycle of a training job costs on a cluster
// described by measured rates, for one storage layout. The model and its
// formulas are in doc/planning.md; every figure comes with the input that
// bounds it ("memcpy, 9.6 GiB/s per host"), so a reader can check it by hand.
//
// Units: bytes, seconds, bytes per second. The model is pure arithmetic:
// nothing here touches a store or the clock.
//
// Thread-safety: stateless functions.
#ifndef SLUICE_PLAN_H_
#define SLUICE_PLAN_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice {

// The training job.
struct PlanJob {
  double state_bytes_per_rank = 0;  // weights + optimizer state one rank saves
  uint32_t ranks_per_host = 1;      // = GPUs per host for a GPU job
  uint32_t hosts = 1;
  double interval_s = 0;            // between checkpoint starts
  double step_s = 0;                // one training step (forward, backward, optimizer)
  bool gpu = false;                 // state in GPU memory (copied device-to-host)
  bool lazy = false;                // snapshot="lazy": the copy overlaps the next step's compute
};

// One host, as calibrated (every host of the job alike).
struct PlanHost {
  double memcpy_bytes_per_s = 0;    // host memory copy into staging, all ranks of the host together
  double d2h_bytes_per_s = 0;       // device-to-host per GPU (gpu jobs)
  double staging_bytes = 0;         // the host's staging memory
  double nvme_write_bytes_per_s = 0;  // local tier 0 (0: no local NVMe)
  double nvme_read_bytes_per_s = 0;
  double nic_bytes_per_s = 0;       // the host's link to storage
  double storage_link_share = 1;    // the part of that link drains may take (their rate cap), in (0, 1]
  // What a host sends its peers at (peer layouts): its link, or the peer
  // cap (peer_rate_limit) where one is set; 0: the link.
  double peer_bytes_per_s = 0;
};

// The durable, shared tier.
enum class PlanTierKind { kCeph, kS3, kSharedFs };

struct PlanTier {
  PlanTierKind kind = PlanTierKind::kCeph;
  // Ceph: OSDs, each one's write and read rate, and the write
  // amplification (replicas, or (k+m)/k for erasure coding).
  uint32_t osds = 0;
  double osd_write_bytes_per_s = 0;
  double osd_read_bytes_per_s = 0;
  double write_amplification = 1;
  // Ceph: the clients' network into the cluster, aggregate (0: no limit
  // beyond the hosts' own links). S3 and shared filesystems: their
  // measured aggregate rates.
  double network_bytes_per_s = 0;
  double write_bytes_per_s = 0;
  double read_bytes_per_s = 0;
};

struct PlanFailures {
  double host_mtbf_hours = 0;       // per host (0: no failure figures)
  bool slow_osd = false;            // one OSD slow: hedged writes place around it
  double drive_bytes = 0;           // a durable-tier drive to rebuild
  double rebuild_cap_bytes_per_s = 0;
  double restart_s = 0;             // a job restart besides loading the state
};

// Where checkpoints go: a local tier 0 (the host's NVMe) before the durable
// tier, or the durable tier alone (staging writes straight to it); with
// peer replicas (doc/peer.md), each host's part also goes to peers in
// other domains, and a step is safe before the durable tier has it.
struct PlanLayout {
  std::string name;                 // "nvme+ceph", "ceph", "shared-fs", "nvme+s3", "nvme+peer+ceph", ...
  bool local_tier0 = true;
  uint32_t peer_replicas = 0;       // > 0: a peer layout (needs local_tier0)
  bool durable_tier = true;         // false: per-host NVMe and peers alone ("nvme+peer")
  PlanTier durable;
};

// A figure and the input that bounds it.
struct Bounded {
  double value = 0;
  std::string bound;
};

struct CyclePlan {
  std::string layout;
  double host_bytes = 0;            // state per host
  double job_bytes = 0;             // state of the job
  Bounded stall;                    // the trainer waits this long per checkpoint
  Bounded copy;                     // the copy into staging (eager: the stall)
  Bounded tier0_durable;            // from the checkpoint's start; 0 without a local tier 0
  Bounded durable;                  // committed on the durable tier, from the checkpoint's start
  Bounded safe;                     // peer layouts: the peer commit, from the checkpoint's start (0 without peers)
  Bounded drain;                    // moving one checkpoint to the durable tier
  Bounded min_interval;             // shorter intervals grow the backlog (or the stall, without tier 0)
  bool backlog_bounded = true;      // at the job's interval
  double training_link_share_during_drain = 1;  // of the host's link, while a drain runs
  double training_link_share_average = 1;       // over the interval
  Bounded recovery;                 // a host lost: the job loads its state again and restarts
  Bounded rebuild;                  // a durable-tier drive, under the cap (0: not given)
  Bounded best_interval;            // least expected lost work (Young), kept >= min_interval
  double gpu_hours_lost_per_day = 0;          // at best_interval
  double gpu_hours_lost_per_day_at_job_interval = 0;
};

// InvalidArgument naming the first field that is missing or impossible
// (a negative size, zero hosts, an interval shorter than the save, a rate of
// 0 where the layout needs it).
Status ValidatePlanInputs(const PlanJob& job, const PlanHost& host, const PlanLayout& layout,
                          const PlanFailures& failures);

// The checkpoint cycle of `job` on `layout`; the inputs are validated first.
Result<CyclePlan> PlanCycle(const PlanJob& job, const PlanHost& host, const PlanLayout& layout,
                            const PlanFailures& failures);

// Which of several plans (one per layout, same job) loses the fewest
// GPU-hours a day, and the figure that separates it most from the runner-up
// (the assumption that would change the recommendation).
struct PlanComparison {
  size_t best = 0;       // index into the plans
  std::string reason;    // one or two sentences
};
PlanComparison ComparePlans(const std::vector<CyclePlan>& plans);

const char* PlanTierKindName(PlanTierKind kind);

// A cluster as the planner sees it (a profile: doc/planning.md): a host's
// rates, the durable tiers by kind ("ceph", "s3", "shared-fs"), failures.
struct PlanCluster {
  PlanHost host;
  std::map<std::string, PlanTier> tiers;
  PlanFailures failures;
};

// Another host's profile joins `cluster`: the cluster is as fast as its
// slowest host, so each rate becomes the least of the two (each tier's
// too; a tier only `other` has is taken as it is).
void AddSlowerHost(PlanCluster* cluster, const PlanCluster& other);

// The layouts `sluice plan compare` sets side by side, in this order.
const std::vector<std::string>& PlanLayoutNames();

// The layout `name` over `cluster`'s tiers; InvalidArgument naming the
// missing tier (e.g. "tiers.ceph") where the cluster lacks what it needs,
// or the layouts there are for an unknown name.
Result<PlanLayout> LayoutOf(const PlanCluster& cluster, const std::string& name);

}  // namespace sluice

#endif  // SLUICE_PLAN_H_
