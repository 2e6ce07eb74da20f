// Pipeline: stall-free, tiered saves.
//
// A save has two phases. Snapshot() copies the caller's bytes into a staging
// arena in host memory (allocated and faulted once, reused by every save) and
// returns: from then on the caller may change its buffers, and the time
// Snapshot() blocked is the checkpoint stall. In the background the pipeline
// then writes the staged bytes straight to tier 0 (O_DIRECT from staging, no
// second copy), commits there, and drains the committed checkpoint to each
// later tier in turn, committing on each separately. A SaveHandle reports
// durability per tier. A synchronous save is the same path followed by Wait().
//
// Tiers are stores, fastest first (e.g. local NVMe, then Ceph). Every write
// into a tier by the background (tier-0 writes after a snapshot, drains)
// passes that tier's token bucket, so it never takes more than its cap.
// Restores read the fastest tier holding a committed copy and fall back to
// the next tier for a chunk that is missing or fails its checksum, then
// repair the bad copy from the good one.
//
// Retention: each tier keeps its newest keep_last committed steps of a name;
// older ones are removed, except that a step is never removed from a tier
// while no later tier holds a committed copy of it (the last tier's
// keep_last is final), unless the later tier's backlog policy superseded it.
//
// Backlog: a later tier slower than the checkpoint rate falls behind. Under
// BacklogPolicy::kCoalesce (the default) only the newest step waiting for a
// tier drains to it next; older waiting steps are superseded there (never
// copied), so they leave earlier tiers as those tiers' keep_last allows, and
// the backlog stays at most one step draining plus one waiting per name.
// Under kDrainEvery every step drains, oldest first, and earlier tiers keep
// each step until it has. SaveHandle::backlog() reports each tier's backlog
// as it stands; a save can be made to wait or fail past a limit.
//
// A checkpoint larger than the staging arena is streamed: Snapshot() copies
// in as the tier-0 writer frees staging, so the stall grows toward the
// write time, but memory stays bounded by the arena.
//
// Each rank of a multi-rank save uses its own Pipeline (normally its own
// process): one pipeline's tier-0 writes run in order, so two ranks of one
// checkpoint in one pipeline would wait on each other.
//
// Thread-safety: a Pipeline may be shared by threads; a PendingCheckpoint
// belongs to one thread; a SaveHandle may be waited on from any thread.
#ifndef SLUICE_PIPELINE_H_
#define SLUICE_PIPELINE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"
#include "sluice/store.h"

namespace sluice {

enum class BacklogPolicy {
  // Only the newest step waiting for a tier drains to it next; older waiting
  // steps are superseded there. Same as kDrainEvery while the tier keeps up.
  kCoalesce,
  // Every step drains, oldest first (an archive tier: every step on it).
  kDrainEvery,
};

const char* BacklogPolicyName(BacklogPolicy policy);

struct TierOptions {
  std::string uri;
  // Cap for background writes into this tier, in bytes per second; 0 means
  // no cap. Realized over any 10 s window within a few percent.
  uint64_t rate_bytes_per_sec = 0;
  // At most this many background writes in flight into this tier; 0 means
  // the backend's queue depth.
  uint32_t max_concurrent_io = 0;
  // Committed steps of each name kept on this tier; 0 keeps all.
  uint32_t keep_last = 0;
  // What drains into this tier do when it falls behind (tier 0: ignored).
  BacklogPolicy backlog = BacklogPolicy::kCoalesce;
};

enum class BusyPolicy {
  kWait,    // a new save waits until an earlier one is committed on tier 0
  kRefuse,  // a new save fails with Unavailable
};

// The smallest staging arena PipelineOptions::huge_pages applies to.
constexpr uint64_t kHugePageStagingBytes = 1ull << 30;

// Staging memory that the pipelines of one process share, so that a process
// saving into many stores holds one arena, allocated and faulted in once
// (sluice's Python package opens one per process). The arena is made at the
// first save of any pipeline using the pool (or when one opens with
// staging_at_open), with the slab size of that pipeline's store; a pipeline
// whose I/O size gives another slab size is refused at open
// (InvalidArgument). Saves of all its pipelines queue for its slabs in the
// order they begin. Memory no save has used for idle_release_seconds (0:
// never) is given back to the kernel (the mapping stays; the next save
// faults its pages in again, paying that in its stall), except when the
// arena is locked or KeepResident() was called: memory registered with a
// device driver (CUDA pinning) must never be given back.
//
// Thread-safety: thread-safe.
struct StagingPoolOptions {
  uint64_t bytes = 1ull << 30;  // at least one slab; at most 80% of physical memory
  bool lock = false;            // mlock (PipelineOptions::lock_staging)
  bool huge_pages = true;       // as PipelineOptions::huge_pages
  double idle_release_seconds = 0;
  // As PipelineOptions::on_staging_allocated / on_staging_freeing, once per
  // pool: when its arena is made, and when the pool goes.
  std::function<void(void* base, uint64_t bytes)> on_allocated;
  std::function<void(void* base, uint64_t bytes)> on_freeing;
};

class StagingPool {
 public:
  // InvalidArgument for a budget over 80% of physical memory; nothing is
  // allocated until a save needs it.
  static Result<std::shared_ptr<StagingPool>> Open(const StagingPoolOptions& options);
  virtual ~StagingPool() = default;
  virtual uint64_t bytes() const = 0;
  // Bytes of the arena now backed by memory: bytes() once made and faulted
  // in, 0 before that and after an idle release.
  virtual uint64_t resident_bytes() const = 0;
  // From now on the memory is never given back (it is about to be pinned).
  virtual void KeepResident() = 0;
  // Gives the memory back now if no save holds a slab (what the idle timer
  // does); returns whether it did.
  virtual bool ReleaseIfIdle() = 0;
};

struct PipelineOptions {
  std::vector<TierOptions> tiers;  // fastest first; at least one
  // Layout of data written to tier 0 (and copied verbatim to later tiers).
  // object_bytes is clamped to the smallest max_object_bytes of all tiers, so
  // any tier can hold a copy.
  StoreOptions store;
  // Staging arena in bytes: allocated once when the pipeline opens and kept.
  // At least one I/O buffer (store.io_bytes); at most 80% of physical memory.
  uint64_t staging_bytes = 1ull << 30;
  // When set, the pipeline stages into this shared pool instead of an arena
  // of its own: staging_bytes, lock_staging, huge_pages and the
  // on_staging_* hooks are then the pool's (StagingPoolOptions).
  std::shared_ptr<StagingPool> staging_pool;
  // Allocate and fault in the arena when the pipeline opens, so that even
  // the first save's stall is a plain memory copy. Off: at the first
  // Begin(), so that a pipeline used only to read (a job resuming) costs
  // neither the memory nor the time. The budget is checked at open either way.
  bool staging_at_open = true;
  // mlock the arena (needs CAP_IPC_LOCK or a large enough RLIMIT_MEMLOCK).
  bool lock_staging = false;
  // Ask for transparent huge pages (fewer page faults and TLB misses) for an
  // arena of kHugePageStagingBytes or more. A smaller one is not asked for
  // them (under THP "madvise", the usual setting, it gets 4 KiB pages):
  // where memory is fragmented, the kernel compacts it to find huge pages
  // while the arena is faulted in (up to 0.4 s for 256 MiB measured,
  // against a steady 0.09 s in 4 KiB pages), which a one-shot save would
  // pay every time and a small arena never earns back.
  // StagingHugePages() applies the rule.
  bool huge_pages = true;
  // Told about the arena once it is allocated and faulted in, and again just
  // before it is freed: e.g. to register it with a GPU driver as pinned memory,
  // so device-to-host copies (AsyncItemSource) land in it by DMA. Paid once per
  // arena, never per save. Neither may call back into the pipeline.
  std::function<void(void* base, uint64_t bytes)> on_staging_allocated;
  std::function<void(void* base, uint64_t bytes)> on_staging_freeing;
  // Threads copying into staging during Snapshot(), the caller's included.
  uint32_t copy_threads = 2;
  // Threads copying a lazy snapshot (SnapshotLazily) in the background. One
  // by default: the copy is off the caller's path, and the cores are the
  // trainer's meanwhile.
  uint32_t lazy_copy_threads = 1;
  // Saves begun but not yet committed on tier 0 (holding staging), at most.
  // Drains to later tiers do not count: they read tier 0, so a slow or
  // absent later tier never blocks the next save.
  uint32_t max_in_flight = 2;
  BusyPolicy when_busy = BusyPolicy::kWait;
  // Backlog limit (off when both are 0): Begin() finds some later tier with
  // at least max_backlog_steps steps, or max_backlog_bytes bytes, committed
  // on an earlier tier and due to drain to it (draining, waiting or retrying
  // after a failure; superseded steps do not count), and waits until that
  // falls below the limit (kWait) or fails with Unavailable (kRefuse).
  uint32_t max_backlog_steps = 0;
  uint64_t max_backlog_bytes = 0;
  BusyPolicy when_backlogged = BusyPolicy::kWait;
  // Drain checkpoints that earlier runs left un-drained (committed on a tier
  // but missing on a later one) in the background once the pipeline opens.
  bool resume_drains = true;
  // Tier 0 is this host's own: the ranks of a multi-rank save on other
  // hosts each have theirs, and tier 1 is the first store they share
  // (checkpoint/parts.h). A save with world > 1 then writes this rank's
  // items to tier 0, copies them to tier 1 at once (through tier 1's cap),
  // and rank 0 commits the checkpoint there; each rank's tier 0 then
  // records the part it holds, which restores of its ranks read first.
  // With two tiers or more: tier 1's backlog policy kDrainEvery (every
  // rank must copy every step), and no background rebuild (it would copy
  // every rank onto one host). World-1 saves are unchanged.
  // With tier 0 alone (a job with no shared tier), each host's part stays
  // on its host, and a save's handle completes once tier 0 holds the part:
  // only peer commits (include/sluice/peer.h, sluice.torch with
  // peer_replicas; doc/peer.md) make a whole step of the hosts' parts.
  bool tier0_per_host = false;
  // Background scrub (off when 0): committed checkpoints on every tier are
  // read and checked continuously, newest first, at most this many bytes/s
  // per tier, and a bad copy is rewritten from a good one on another tier
  // (sluice scrub does the same once). It waits while a save is in flight or
  // a drain runs, so it never delays a snapshot or a drain; results show in
  // `sluice ls --json` (last_scrub per tier). Passes start every
  // scrub_interval_ms; a tier another scrub holds is left to that one.
  uint64_t scrub_rate_bytes_per_sec = 0;
  uint64_t scrub_interval_ms = 3'600'000;
  // Background rebuild (off when 0): a pipeline that opens to find tier 0
  // holding no checkpoint while a later tier holds some (a lost or replaced
  // device) copies the newest rebuild_keep_last steps of each name back to
  // tier 0, newest first, writing at most this many bytes/s (sluice rebuild
  // does the same once). Restores meanwhile read whichever tier has a copy.
  uint64_t rebuild_rate_bytes_per_sec = 0;
  uint32_t rebuild_keep_last = 1;
  // First retry of a failed drain after this long, doubling up to the max.
  uint64_t retry_initial_ms = 1000;
  uint64_t retry_max_ms = 60'000;

  // InvalidArgument naming the first bad field: no tier, a bad store
  // layout (StoreOptions::Validate), a staging budget under one I/O buffer
  // or over 80% of physical memory, copy_threads outside 1..256,
  // max_in_flight 0, retry_initial_ms over retry_max_ms, or
  // tier0_per_host with tier 1 coalescing, or with a rebuild rate.
  Status Validate() const;
};

// Whether the staging arena of `o` asks for transparent huge pages
// (PipelineOptions::huge_pages).
inline bool StagingHugePages(bool huge_pages, uint64_t staging_bytes) {
  return huge_pages && staging_bytes >= kHugePageStagingBytes;
}
inline bool StagingHugePages(const PipelineOptions& o) { return StagingHugePages(o.huge_pages, o.staging_bytes); }

enum class TierState {
  kPending,    // not started yet (waiting for an earlier tier, or queued)
  kWriting,    // being written or drained right now
  kCommitted,  // committed: durable and visible on this tier
  kFailed,     // the last attempt failed; it will be retried (see error)
  kSkipped,    // this rank does not write this tier (a later tier of rank != 0)
  kSuperseded, // backlog policy kCoalesce: a newer step drained to this tier instead
};

const char* TierStateName(TierState state);

struct TierProgress {
  std::string uri;
  TierState state = TierState::kPending;
  // Seconds from the start of Snapshot() to the commit on this tier.
  double durable_seconds = 0;
  uint64_t bytes_written = 0;
  uint32_t attempts = 0;
  Status error;  // why the last attempt failed
};

// A tier's backlog: steps committed on an earlier tier and due to drain to
// this one (draining, waiting, or retrying after a failure), with their
// bytes. For tier 0: saves snapshotted but not yet committed there.
struct TierBacklog {
  std::string uri;
  uint64_t steps = 0;
  uint64_t bytes = 0;
  // Steps superseded on this tier (kCoalesce) since the pipeline opened.
  uint64_t superseded = 0;
};

class SaveHandle {
 public:
  virtual ~SaveHandle() = default;
  // Seconds Snapshot() blocked.
  virtual double stall_seconds() const = 0;
  // True once every tier is committed, or the save failed for good.
  virtual bool done() const = 0;
  // Waits until tier `tier` is committed (or the save failed for good: the
  // tier-0 write failed, or the pipeline closed). Failed drains are retried
  // with backoff meanwhile, so this may wait for long if a tier is down.
  // Unavailable if the step was superseded on that tier (kCoalesce): it
  // will not be drained there, a newer step was.
  virtual Status WaitTier(size_t tier) = 0;
  // Waits for every tier.
  virtual Status Wait() = 0;
  virtual std::vector<TierProgress> progress() const = 0;
  virtual const CheckpointId& id() const = 0;
  // What this rank saved (bytes, items, chunks, objects; committed says
  // whether this rank published the commit record): set once tier 0 has
  // committed, zero before.
  virtual SaveStats stats() const = 0;
  // The pipeline's backlog per tier now (its last figures once it closed).
  virtual std::vector<TierBacklog> backlog() const = 0;
  // Waits until tier 0 holds this rank's data objects and manifest, and
  // returns the manifest's object name. With tier0_per_host that is before
  // the save commits anywhere (the part commits on tier 1 later): peer
  // replicas start from it (doc/peer.md). The tier-0 write's error if it
  // failed.
  virtual Result<std::string> WaitWritten() = 0;
  // With tier0_per_host and tier 0 alone (no shared tier), the part's
  // writer lock stays after tier 0 holds the part, so that gc leaves the
  // part alone until the job's peer commit records it (sluice/peer.h).
  // Call this once that commit is published or has failed; the handle's
  // end and the pipeline's close do it too. A no-op for any other save.
  virtual void ReleasePart() = 0;
};

// A snapshot whose copy into staging runs in the background
// (PendingCheckpoint::SnapshotLazily). The caller's buffers must stay valid
// and unchanged until their items are copied (WaitItems / WaitAll).
//
// Thread-safety: thread-safe.
class LazySnapshot {
 public:
  // Dropped before Finish(): finished with Unavailable (the save does not
  // commit). Waits for the copy to stop: the caller's buffers may go then.
  // Finish every LazySnapshot before its pipeline closes: one still unfinished
  // then fails with Unavailable.
  virtual ~LazySnapshot() = default;
  // The save, as Snapshot() returns it; stall_seconds() is the time
  // SnapshotLazily() blocked.
  virtual std::shared_ptr<SaveHandle> handle() const = 0;
  // Waits until the items with these indexes (the order AddItem added them,
  // from 0) are in staging: their buffers are free again. The copy's error
  // if it failed before they were (after the copy stopped reading). Device
  // items (AsyncItemSource) are copied and waited for piece by piece, so
  // each is marked as it lands.
  virtual Status WaitItems(const std::vector<uint32_t>& items) = 0;
  // Waits until every item is in staging (or the copy failed).
  virtual Status WaitAll() = 0;
  // Whether the copy has ended, all copied or failed.
  virtual bool copy_done() const = 0;
  // Seconds from SnapshotLazily() to the end of the copy (0 before).
  virtual double copy_seconds() const = 0;
  // The caller's verdict on the copy, e.g. after checking that no buffer
  // changed before its item was copied. Tier 0 commits only after Finish(OK);
  // an error fails the save with it, and nothing is committed. The first
  // verdict counts.
  virtual void Finish(const Status& verdict) = 0;
};

// One rank's save being assembled.
class PendingCheckpoint {
 public:
  virtual ~PendingCheckpoint() = default;
  // A view of the caller's bytes: they are read during Snapshot() and must
  // not change until it returns. InvalidArgument on a bad or duplicate key.
  virtual Status AddItem(std::string_view key, std::string_view metadata, const void* data,
                         uint64_t size) = 0;
  // Bytes pulled from `source` during Snapshot(); `source` must live until
  // Snapshot() returns.
  virtual Status AddItem(std::string_view key, std::string_view metadata, uint64_t size,
                         ItemSource& source) = 0;
  // Bytes the source copies into staging itself (device memory, e.g. by DMA),
  // all in flight at once when the image fits in the free arena; Snapshot()
  // returns once they have landed. `source` must live until Snapshot() returns.
  virtual Status AddItem(std::string_view key, std::string_view metadata, uint64_t size,
                         AsyncItemSource& source) = 0;
  // Copies every item into staging and hands the checkpoint to the
  // background. Once it returns OK the caller's buffers are free again.
  virtual Result<std::shared_ptr<SaveHandle>> Snapshot() = 0;
  // Snapshot() that returns before copying: the copy runs on a pipeline
  // thread (PipelineOptions::lazy_copy_threads), items in the order they
  // were added, so add first what the caller will change first. Nothing is
  // committed until the LazySnapshot is finished. Copies into staging run
  // one at a time in the order saves snapshot: a Snapshot() after a lazy
  // one waits (in its stall) for the rest of that copy.
  virtual Result<std::shared_ptr<LazySnapshot>> SnapshotLazily() = 0;
};

// A checkpoint's state on one tier, as `sluice ls` shows it.
struct TierCopy {
  std::string uri;
  // "committed", "draining" (a drain is running), "pending" (an earlier tier
  // has it, this one not yet), "failed" (the last drain failed: reason),
  // "superseded" (backlog policy kCoalesce: a newer step drains or drained
  // there instead, so this one never will), "absent" (no earlier tier has it, or retention removed it), "damaged"
  // (a commit record is there but the copy does not verify: reason).
  std::string state;
  std::string reason;
  // The last scrub of this copy (sluice scrub, or a pipeline's background
  // scrub): when it ended (0: never scrubbed) and what it found ("ok",
  // "repaired", "unrepairable", "bad"), with why for anything but ok.
  int64_t scrubbed_unix_ms = 0;
  std::string scrub_result;
  std::string scrub_detail;
  // A "part" whose step a peer commit here makes safe: the hosts holding
  // that record (doc/peer.md); empty otherwise.
  std::vector<std::string> safe_hosts;
};

struct TieredCheckpointInfo {
  CheckpointInfo info;  // from the fastest tier holding a committed copy
  std::vector<TierCopy> tiers;
};

// Creates, at zero, every metric family that a pipeline of `tiers` tiers
// records or reports (sluice/metrics.h, DefaultMetrics()), so that a scrape
// made before the pipeline opens, or before its first save, sees each
// family instead of an empty body. Safe to call more than once.
void DeclarePipelineMetrics(size_t tiers);

// Each tier's backlog as a listing shows it: checkpoints "pending",
// "draining" or "failed" there, with their own bytes (what a drain copies).
// `superseded` counts the listing's superseded steps. Tier 0 shows none: a
// listing holds only committed checkpoints.
std::vector<TierBacklog> BacklogOf(const std::vector<TieredCheckpointInfo>& listing,
                                   const std::vector<std::string>& uris);

struct DrainReport {
  uint64_t checkpoints_drained = 0;
  uint64_t bytes = 0;
  uint64_t checkpoints_removed = 0;  // by retention
  // Steps waiting for a tier that its backlog policy (kCoalesce) skipped for
  // a newer step: counted per tier, so a step skipped on two tiers counts 2.
  uint64_t checkpoints_superseded = 0;
  std::vector<std::string> failures;  // one line per checkpoint that did not drain
};

// What a tiered read had to do besides reading the fastest tier.
struct ReadRecovery {
  // One line per chunk served from a later tier: item, chunk, bad tier, why.
  std::vector<std::string> fallbacks;
  // One line per object rewritten on a faster tier from a good copy.
  std::vector<std::string> repairs;
};

// Manifests of ranks of a step that no store of this pipeline holds, by
// rank, as hosts that hold them sent them (a step that is safe on peer
// hosts, doc/peer.md). Raw manifest bytes, checked against the step's
// commit before use.
using ManifestsElsewhere = std::map<uint32_t, std::string>;

class Pipeline {
 public:
  static Result<std::unique_ptr<Pipeline>> Open(const PipelineOptions& options);
  // The same over stores the caller opened (options.tiers[i].uri is then
  // ignored; its other fields still apply), e.g. wrapped for fault injection.
  static Result<std::unique_ptr<Pipeline>> Open(const PipelineOptions& options,
                                                std::vector<std::unique_ptr<Store>> tiers);
  // Waits for the tier-0 writes of snapshotted saves; drains not finished
  // are left for the next pipeline or `sluice drain` (nothing committed is
  // lost: the earlier tier keeps its copy).
  virtual ~Pipeline() = default;

  virtual size_t tier_count() const = 0;
  virtual Store& tier(size_t index) = 0;

  // Starts rank `rank` of `world` of (name, step). Waits or fails
  // (when_busy) while max_in_flight saves are not yet committed on tier 0.
  virtual Result<std::unique_ptr<PendingCheckpoint>> Begin(const CheckpointId& id, uint32_t rank,
                                                           uint32_t world,
                                                           const SaveOptions& save = {}) = 0;

  // Drains every checkpoint committed on a tier but missing on a later one,
  // and applies retention; returns when done (or each failed once).
  virtual Result<DrainReport> Drain(std::string_view name) = 0;

  // Every checkpoint found on any tier, with its state on each tier.
  virtual Result<std::vector<TieredCheckpointInfo>> List(std::string_view name) = 0;

  // This pipeline's backlog per tier now (see TierBacklog): what it queued,
  // not a listing of the stores (BacklogOf counts that from List()).
  virtual std::vector<TierBacklog> Backlog() const = 0;

  // Opens the fastest committed copy. Reads through the returned reader fall
  // back to later tiers chunk by chunk, and repair the faster copy;
  // `recovery` (optional, must outlive the reader) records what happened.
  // `step` nullopt: the newest step committed on any tier. Corruption naming
  // the step if no tier holds an intact copy of it (records that verify,
  // every data object there): never an older step instead.
  // `elsewhere`: where tier 0 holds only some ranks of a safe step and no
  // later tier holds it, the other ranks' manifests: their items are
  // listed, and reading them fails (Unavailable) until their parts are here.
  virtual Result<std::unique_ptr<CheckpointReader>> OpenCheckpoint(std::string_view name,
                                                                   std::optional<uint64_t> step,
                                                                   ReadRecovery* recovery,
                                                                   const ManifestsElsewhere& elsewhere = {}) = 0;

  // The newest step of `name` some tier holds intact, for a restore asked
  // to skip a damaged newest step (`--step latest-good`). NotFound if none.
  virtual Result<uint64_t> LatestGoodStep(std::string_view name) = 0;
};

}  // namespace sluice

#endif  // SLUICE_PIPELINE_H_
