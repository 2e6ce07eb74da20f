// Pipeline: the staged, tiered save path (see include/sluice/pipeline.h).
//
// Threads: the caller's thread (and copy_threads - 1 pool threads) copy into
// staging during Snapshot(); one writer thread writes staged images to tier
// 0 and commits them, in order; one drainer thread drains committed
// checkpoints to later tiers, retrying failures with backoff; retention
// (retention.h) applies keep_last after commits and drains, on a thread of
// its own for superseded steps.
#include "sluice/pipeline.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_set>

#include "format/commit_record.h"
#include "format/layout.h"
#include "format/limits.h"
#include "io/aligned_buffer.h"
#include "io/token_bucket.h"
#include "checkpoint/catalog.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/parts.h"
#include "engine/object_copy.h"
#include "pipeline/drain.h"
#include "pipeline/save_handle.h"
#include "pipeline/staged_image.h"
#include "pipeline/staging_arena.h"
#include "pipeline/tier_listing.h"
#include "pipeline/maintenance.h"
#include "pipeline/pipeline_metrics.h"
#include "pipeline/retention.h"
#include "pipeline/tiered_reader.h"

namespace sluice {


namespace {

using Clock = std::chrono::steady_clock;

std::string Label(const CheckpointId& id) { return CheckpointLabel(id.name, id.step); }

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class PipelineImpl;

// A multi-rank save's part on a per-host tier 0 (tier0_per_host), once
// written there: to be copied to tier 1 and committed there with the other
// ranks (checkpoint/parts.h). The part writer holds tier 0's writer lock
// until the part is recorded.
struct PartToCommit {
  std::shared_ptr<RankWriter> writer;
  uint32_t rank = 0;
  uint32_t world = 1;
  SaveOptions save;
};

class PendingImpl final : public PendingCheckpoint {
 public:
  PendingImpl(PipelineImpl* p, std::unique_ptr<RankWriter> writer, CheckpointId id, uint32_t rank,
              std::optional<PartToCommit> part)
      : p_(p), writer_(std::move(writer)), id_(std::move(id)), rank_(rank), part_(std::move(part)) {}
  ~PendingImpl() override;

  Status AddItem(std::string_view key, std::string_view metadata, const void* data,
                 uint64_t size) override {
    if (data == nullptr && size > 0) return Status::InvalidArgument("item '" + std::string(key) + "': null data");
    return Add(key, metadata, size, [&](StagedItem& it) { it.data = static_cast<const uint8_t*>(data); });
  }
  Status AddItem(std::string_view key, std::string_view metadata, uint64_t size,
                 ItemSource& source) override {
    return Add(key, metadata, size, [&](StagedItem& it) { it.source = &source; });
  }
  Status AddItem(std::string_view key, std::string_view metadata, uint64_t size,
                 AsyncItemSource& source) override {
    return Add(key, metadata, size, [&](StagedItem& it) { it.async = &source; });
  }
  Result<std::shared_ptr<SaveHandle>> Snapshot() override;

 private:
  template <typename SetBytes>
  Status Add(std::string_view key, std::string_view metadata, uint64_t size, SetBytes set_bytes) {
    if (snapshotted_) return Status::InvalidArgument("AddItem after Snapshot");
    RETURN_IF_ERROR(ValidateItem(key, metadata));
    if (!keys_.insert(std::string(key)).second) {
      return Status::InvalidArgument("duplicate item key '" + std::string(key) + "'");
    }
    StagedItem it;
    it.key = std::string(key);
    it.metadata = std::string(metadata);
    it.size = size;
    set_bytes(it);
    items_.push_back(std::move(it));
    return Status::OK();
  }

  PipelineImpl* p_;
  std::unique_ptr<RankWriter> writer_;
  CheckpointId id_;
  uint32_t rank_;
  std::optional<PartToCommit> part_;  // rank, world and options of a part save (writer unset)
  std::vector<StagedItem> items_;
  std::unordered_set<std::string> keys_;
  bool snapshotted_ = false;
};

struct WriteJob {
  std::shared_ptr<StagedImage> image;
  std::unique_ptr<RankWriter> writer;
  std::shared_ptr<HandleImpl> handle;
  uint32_t rank = 0;
  std::optional<PartToCommit> part;  // set (writer empty) for a part save
};

struct DrainJob {
  std::string name;
  uint64_t step = 0;
  size_t dst = 0;
  std::shared_ptr<HandleImpl> handle;  // null for drains resumed from an earlier run
  uint32_t attempts = 0;
  Clock::time_point not_before;
  uint64_t bytes = 0;  // what the drain copies (the checkpoint's own bytes), for the backlog
  std::optional<PartToCommit> part;  // this rank's part to copy and commit on tier 1 (dst 1)
};

class PipelineImpl final : public Pipeline {
 public:
  PipelineImpl(const PipelineOptions& options, std::vector<std::unique_ptr<Store>> stores)
      : opts_(options), stores_(std::move(stores)) {}

  Status Init() {
    if (stores_.empty()) return Status::InvalidArgument("a pipeline needs at least one tier");
    if (stores_.size() > 16) return Status::InvalidArgument("at most 16 tiers");
    opts_.tiers.resize(stores_.size());
    for (size_t k = 0; k < stores_.size(); ++k) {
      Backend& b = stores_[k]->backend();
      opts_.tiers[k].uri = b.uri();
      opts_.store.object_bytes = std::min(opts_.store.object_bytes, b.caps().max_object_bytes);
      // A burst of one I/O, or 50 ms at the cap, whichever is larger: small
      // enough that a 10 s window stays within ~1% of the cap.
      const auto& t = opts_.tiers[k];
      uint64_t burst = std::max<uint64_t>(opts_.store.io_bytes, t.rate_bytes_per_sec / 20);
      buckets_.push_back(std::make_unique<TokenBucket>(t.rate_bytes_per_sec, burst, t.max_concurrent_io));
    }
    for (size_t i = 0; i < opts_.tiers.size(); ++i) {
      for (size_t j = i + 1; j < opts_.tiers.size(); ++j) {
        if (opts_.tiers[i].uri == opts_.tiers[j].uri) {
          return Status::InvalidArgument("tier " + std::to_string(j) + " (" + opts_.tiers[j].uri +
                                         ") is the same store as tier " + std::to_string(i));
        }
      }
    }
    RETURN_IF_ERROR(opts_.Validate());
    align_ = std::max<size_t>(stores_[0]->backend().caps().io_alignment, 1);
    slab_bytes_ = AlignUp(opts_.store.io_bytes, std::max<uint64_t>(4096, align_));
    RETURN_IF_ERROR(StagingArena::CheckBudget(opts_.staging_bytes, slab_bytes_));
    if (opts_.staging_at_open) RETURN_IF_ERROR(EnsureArena());
    pool_ = std::make_unique<CopyPool>(opts_.copy_threads);
    // The tier-0 writer's own: it hashes while the next snapshot copies.
    hash_pool_ = std::make_unique<CopyPool>(opts_.copy_threads);
    // Made before the threads that Wake() it, started after them.
    std::vector<Backend*> backends;
    for (auto& s : stores_) backends.push_back(&s->backend());
    maintenance_ = std::make_unique<Maintenance>(std::move(backends), opts_, [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return BusyLocked();
    });
    metrics_ = std::make_unique<PipelineMetrics>(stores_.size());
    retention_ = std::make_unique<Retention>(Stores(), opts_.tiers, opts_.tier0_per_host, Retention::Hooks{
        [this](const std::string& name) {  // the step being drained now stays on its source
          std::vector<std::set<uint64_t>> draining(stores_.size());
          std::lock_guard<std::mutex> lock(mu_);
          if (running_ && running_->name == name) draining[running_->dst].insert(running_->step);
          return draining;
        },
        [this](const std::string& name) {
          std::lock_guard<std::mutex> lock(mu_);
          return saved_names_.count(name) > 0 && coordinated_names_.count(name) == 0;
        }});
    superseded_.assign(stores_.size(), 0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      PublishBacklogLocked();
    }
    metrics_registration_ = DefaultMetrics().AddCollector([this](MetricsSink& sink) { Collect(sink); });
    writer_thread_ = std::thread([this] { WriterLoop(); });
    drainer_thread_ = std::thread([this] { DrainerLoop(); });
    retention_->Start();
    maintenance_->Start();
    return Status::OK();
  }

  ~PipelineImpl() override {
    metrics_registration_.reset();  // a scrape running now ends first
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    // Background scrub and rebuild stop at once. The object itself stays
    // until the writer and drainer threads are gone: they Wake() it.
    if (maintenance_) maintenance_->Stop();
    work_cv_.notify_all();
    if (writer_thread_.joinable()) writer_thread_.join();  // finishes queued tier-0 writes first
    stop_drains_ = true;
    {
      std::lock_guard<std::mutex> lock(mu_);  // a drainer between check and wait sees the flag
    }
    drain_cv_.notify_all();
    if (drainer_thread_.joinable()) drainer_thread_.join();
    if (retention_) retention_->Stop();
    std::deque<DrainJob> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      left.swap(drains_);
    }
    for (auto& j : left) {
      if (j.part) TellPartFailed({j.name, j.step}, *j.part, Status::Unavailable("its pipeline closed first"));
      if (j.handle && j.part) {
        j.handle->FailForGood(Status::Unavailable(
            Label({j.name, j.step}) + ": the pipeline closed before rank " + std::to_string(j.part->rank) +
            "'s part was committed on tier 1 (" + opts_.tiers[1].uri + "); the step stays uncommitted"));
      } else if (j.handle) {
        j.handle->FailForGood(Status::Unavailable(
            Label({j.name, j.step}) + ": the pipeline closed before tier " + std::to_string(j.dst) +
            " (" + opts_.tiers[j.dst].uri + ") committed it; `sluice drain` finishes it"));
      }
    }
    // Every thread that touched the arena is gone: its owner may unpin it.
    if (arena_ && opts_.on_staging_freeing) opts_.on_staging_freeing(arena_->base(), arena_->bytes());
  }

  size_t tier_count() const override { return stores_.size(); }
  Store& tier(size_t index) override { return *stores_.at(index); }

  Result<std::unique_ptr<PendingCheckpoint>> Begin(const CheckpointId& id, uint32_t rank,
                                                   uint32_t world, const SaveOptions& save) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        if (active_ >= opts_.max_in_flight) {
          if (opts_.when_busy == BusyPolicy::kRefuse) {
            return Status::Unavailable(Label(id) + ": " + std::to_string(active_) +
                                       " earlier save(s) are not yet committed on tier 0 "
                                       "(max in flight " + std::to_string(opts_.max_in_flight) + ")");
          }
          slot_cv_.wait(lock);
          continue;
        }
        // Checked before every save, so a tier that cannot keep up holds
        // back (or fails) the next save instead of growing without bound.
        const std::string over = BacklogOverLimitLocked();
        if (!over.empty()) {
          if (opts_.when_backlogged == BusyPolicy::kRefuse || closing_) {
            return Status::Unavailable(Label(id) + ": " + over);
          }
          slot_cv_.wait(lock);
          continue;
        }
        break;
      }
      ++active_;
      own_saves_.insert({id.name, id.step});
    }
    Status arena = EnsureArena();
    if (!arena.ok()) {
      SaveEnded();
      return arena.WithContext(Label(id));
    }
    // A per-host tier 0 holds only this host's ranks: the save commits on
    // tier 1. Written in full: a base on tier 0 may be one tier 1 lacks.
    std::optional<PartToCommit> part;
    if (opts_.tier0_per_host && world > 1) {
      part = PartToCommit{nullptr, rank, world, save};
      part->save.incremental = false;
      if (Status st = PreparePartSave(id); !st.ok()) {
        SaveEnded();
        return st;
      }
    }
    auto w = part ? NewPartWriter(stores_[0]->backend(), stores_[1]->backend(), opts_.store, id, rank, world,
                                  part->save)
                  : NewRankWriter(stores_[0]->backend(), opts_.store, id, rank, world, save);
    if (!w.ok()) {
      SaveEnded();
      return w.status();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      saved_names_.insert(id.name);
      if (rank == 0) coordinated_names_.insert(id.name);
    }
    return std::unique_ptr<PendingCheckpoint>(
        new PendingImpl(this, std::move(w).value(), id, rank, std::move(part)));
  }

  Result<DrainReport> Drain(std::string_view name) override {
    if (!name.empty()) RETURN_IF_ERROR(ValidateCheckpointName(name));
    DrainReport report;
    ASSIGN_OR_RETURN(auto names, NamesOnAnyTier(Stores(), name));
    for (const auto& n : names) {
      auto plans = retention_->Plan(n);
      for (size_t k = 1; k < stores_.size(); ++k) {
        report.checkpoints_superseded += plans[k].superseded.size();
        for (uint64_t step : plans[k].to_drain) {
          std::atomic<uint64_t> bytes{0};
          Status st = DrainOnce(n, step, k, &bytes);
          if (st.ok()) {
            ++report.checkpoints_drained;
            report.bytes += bytes.load();
          } else {
            report.failures.push_back(st.ToString());
          }
        }
      }
      report.checkpoints_removed += retention_->Apply(n);
    }
    return report;
  }

  Result<std::vector<TieredCheckpointInfo>> List(std::string_view name) override {
    if (!name.empty()) RETURN_IF_ERROR(ValidateCheckpointName(name));
    return ListTiered(Stores(), opts_.tiers, name);
  }

  std::vector<TierBacklog> Backlog() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return BacklogLocked();
  }
  std::shared_ptr<const BacklogBoard> backlog_board() const { return backlog_board_; }

  Result<std::unique_ptr<CheckpointReader>> OpenCheckpoint(std::string_view name,
                                                           std::optional<uint64_t> step,
                                                           ReadRecovery* recovery) override;
  Result<uint64_t> LatestGoodStep(std::string_view name) override;

  // --- used by PendingImpl
  StagingArena& arena() { return *arena_; }  // set by Begin() at the latest

  Status EnsureArena() {
    std::lock_guard<std::mutex> lock(arena_mu_);
    if (arena_) return Status::OK();
    ASSIGN_OR_RETURN(arena_, StagingArena::Create(opts_.staging_bytes, slab_bytes_, opts_.lock_staging,
                                                  StagingHugePages(opts_)));
    if (opts_.on_staging_allocated) opts_.on_staging_allocated(arena_->base(), arena_->bytes());
    return Status::OK();
  }
  const PipelineOptions& options() const { return opts_; }
  size_t align() const { return align_; }
  std::vector<std::string> Uris() const {
    std::vector<std::string> u;
    for (const auto& t : opts_.tiers) u.push_back(t.uri);
    return u;
  }
  PipelineMetrics& metrics() { return *metrics_; }
  std::mutex& snapshot_mu() { return snapshot_mu_; }
  CopyPool& pool() { return *pool_; }

  void SaveEnded() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --active_;
    }
    slot_cv_.notify_all();
    if (maintenance_) maintenance_->Wake();
  }

  void Enqueue(WriteJob job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++tier0_steps_;
      tier0_bytes_ += job.image->bytes();
      writes_.push_back(std::move(job));
      PublishBacklogLocked();
    }
    work_cv_.notify_all();
  }

 private:
  // Each tier's backlog from what this pipeline queued (under mu_).
  std::vector<TierBacklog> BacklogLocked() const {
    std::vector<TierBacklog> out(stores_.size());
    for (size_t k = 0; k < out.size(); ++k) {
      out[k].uri = opts_.tiers[k].uri;
      out[k].superseded = k < superseded_.size() ? superseded_[k] : 0;
    }
    out[0].steps = tier0_steps_;
    out[0].bytes = tier0_bytes_;
    for (const auto& j : drains_) {
      ++out[j.dst].steps;
      out[j.dst].bytes += j.bytes;
    }
    if (running_) {
      ++out[running_->dst].steps;
      out[running_->dst].bytes += running_->bytes;
    }
    return out;
  }

  // Tells handles and a Begin() waiting on the backlog limit (under mu_).
  void PublishBacklogLocked() {
    backlog_board_->Set(BacklogLocked());
    slot_cv_.notify_all();
  }

  // Why a new save may not start now, empty if it may (under mu_).
  std::string BacklogOverLimitLocked() const {
    if (opts_.max_backlog_steps == 0 && opts_.max_backlog_bytes == 0) return "";
    const auto now = BacklogLocked();
    for (size_t k = 1; k < now.size(); ++k) {
      const bool steps = opts_.max_backlog_steps != 0 && now[k].steps >= opts_.max_backlog_steps;
      const bool bytes = opts_.max_backlog_bytes != 0 && now[k].bytes >= opts_.max_backlog_bytes;
      if (!steps && !bytes) continue;
      std::string limit = steps ? std::to_string(opts_.max_backlog_steps) + " steps"
                                : std::to_string(opts_.max_backlog_bytes) + " bytes";
      return "tier " + std::to_string(k) + " (" + now[k].uri + ") has a backlog of " +
             std::to_string(now[k].steps) + " step(s), " + std::to_string(now[k].bytes) +
             " bytes, not yet drained there (limit " + limit + ")";
    }
    return "";
  }

  // What draining (name, step) from tier `from` copies: its own bytes
  // there, or `fallback` if they cannot be read (a multi-rank commit not
  // there yet).
  uint64_t BytesToDrain(const std::string& name, uint64_t step, uint64_t fallback, size_t from = 0) {
    auto loaded = LoadCheckpoint(stores_[from]->backend(), name, step);
    if (!loaded.ok()) return fallback;
    uint64_t bytes = 0;
    for (const auto& m : loaded->manifests) bytes += m.OwnBytes();
    return bytes;
  }

  // Marks a queued drain superseded by `newer` (under mu_).
  void SupersedeLocked(const DrainJob& job, uint64_t newer) {
    ++superseded_[job.dst];
    retention_->Due(job.name);
    if (!job.handle) return;
    job.handle->SetState(job.dst, TierState::kSuperseded,
                         Status::Unavailable(Label({job.name, job.step}) + ": superseded on tier " +
                                             std::to_string(job.dst) + " (" + opts_.tiers[job.dst].uri +
                                             ") by step " + std::to_string(newer) +
                                             ": backlog policy coalesce drains only the newest waiting step"));
  }

  // Queues a drain; on a coalescing tier it supersedes the older steps of
  // its name waiting there (not the one draining now), so the backlog shows
  // only what will drain (under mu_).
  void QueueDrainLocked(DrainJob job) {
    if (opts_.tiers[job.dst].backlog == BacklogPolicy::kCoalesce) {
      for (auto it = drains_.begin(); it != drains_.end();) {
        if (it->dst == job.dst && it->name == job.name && it->step < job.step) {
          SupersedeLocked(*it, job.step);
          it = drains_.erase(it);
        } else {
          ++it;
        }
      }
    }
    drains_.push_back(std::move(job));
  }

  // The newest step of `job`'s name queued for its tier, if newer than it
  // and the tier coalesces (under mu_).
  std::optional<uint64_t> NewerQueuedLocked(const DrainJob& job) const {
    if (opts_.tiers[job.dst].backlog != BacklogPolicy::kCoalesce || job.part) return std::nullopt;
    std::optional<uint64_t> newer;
    for (const auto& j : drains_) {
      if (j.dst == job.dst && j.name == job.name && j.step > job.step) newer = std::max(newer.value_or(0), j.step);
    }
    return newer;
  }

  std::vector<Store*> Stores() const {
    std::vector<Store*> out;
    for (const auto& st : stores_) out.push_back(st.get());
    return out;
  }
  // One attempt at draining (name, step) into tier `dst` from the fastest
  // tier that has it committed.
  Status DrainOnce(const std::string& name, uint64_t step, size_t dst, std::atomic<uint64_t>* bytes) {
    const std::string label = Label({name, step});
    int src = -1;
    Status why;
    for (size_t j = 0; j < dst; ++j) {
      auto loaded = LoadCheckpoint(stores_[j]->backend(), name, step);
      if (loaded.ok()) {
        src = static_cast<int>(j);
        break;
      }
      if (why.ok()) why = loaded.status();
    }
    if (src < 0) {
      return Status::NotFound(label + ": no earlier tier holds a committed copy to drain to tier " +
                              std::to_string(dst) + (why.ok() ? "" : ": " + why.message()));
    }
    CopyControl control;
    control.bucket = buckets_[dst].get();
    control.stop = &stop_drains_;
    control.written = bytes;
    control.written_total = metrics_->drain_written[dst];
    control.io_bytes = opts_.store.io_bytes;
    Backend& s = stores_[src]->backend();
    Status st = DrainCheckpoint(s, stores_[dst]->backend(), name, step, control);
    if (st.ok()) {
      ClearDrainNote(s, name, step, opts_.tiers[dst].uri);
    } else if (!stop_drains_) {
      WriteDrainNote(s, name, step, opts_.tiers[dst].uri, st.ToString());
    }
    return st;
  }

  // Copies this rank's part from tier 0 to tier 1 and commits there with
  // the other ranks (a relay writer under the part's writer id: rank 0
  // gathers, the others wait), then records the part on tier 0. Not
  // retried: the other ranks' commit protocol does not wait for a retry.
  // Failing before the commit leaves the step uncommitted on every tier
  // (gc takes what it left), as a multi-rank save on a shared tier 0 whose
  // commit fails; failing after it (`*committed` set) leaves the checkpoint
  // on tier 1 without this host's part.
  Status CommitPartOnce(DrainJob& job, bool* committed) {
    const CheckpointId id{job.name, job.step};
    PartToCommit& part = *job.part;
    Backend& local = stores_[0]->backend();
    Backend& shared = stores_[1]->backend();
    const RankWriter::Published& published = part.writer->published();
    ASSIGN_OR_RETURN(Manifest m, DecodeManifest(published.bytes, "manifest " + published.object));
    ASSIGN_OR_RETURN(auto relay, NewRelayWriter(shared, opts_.store, id, part.rank, part.world, part.save,
                                                part.writer->writer_id()));
    CopyControl control;
    control.bucket = buckets_[1].get();
    control.stop = &stop_drains_;
    control.written = job.handle->written(1);
    control.written_total = metrics_->drain_written[1];
    control.io_bytes = opts_.store.io_bytes;
    Status copied = CopyObjects(local, shared, ObjectsToCopy(m), control);
    if (!copied.ok()) {
      relay->Abandon(copied);
      return copied;
    }
    RETURN_IF_ERROR(relay->CommitPublished(published).status());
    relay.reset();
    *committed = true;
    ASSIGN_OR_RETURN(CommitRecordBytes published_record, ReadCommitRecord(shared, id.name, id.step));
    const std::string& record = published_record.bytes;
    ASSIGN_OR_RETURN(CommitRecord commit, DecodeCommitRecord(record, "commit record on tier 1"));
    if (part.rank >= commit.ranks.size() || commit.ranks[part.rank].manifest != published.object) {
      return Status::AlreadyExists("tier 1's commit record no longer names this rank's manifest");
    }
    return PublishPart(local, record, part.rank);
  }

  void CommitPart(DrainJob job) {
    bool committed = false;
    Status st = CommitPartOnce(job, &committed);
    job.part->writer.reset();  // tier 0's lock goes: the part record (or gc) takes over
    const std::string label = Label({job.name, job.step}) + ": rank " + std::to_string(job.part->rank) + "'s part";
    if (!committed) {
      Status why = st.WithContext(label + ", tier 0 (" + opts_.tiers[0].uri + ") to tier 1 (" +
                                  opts_.tiers[1].uri + ")");
      job.handle->SetState(0, TierState::kFailed, why);
      job.handle->SetState(1, TierState::kFailed, why);
      job.handle->FailForGood(why);
      CountError("save", why);
      return;
    }
    job.handle->SetState(1, TierState::kCommitted);
    if (st.ok()) {
      job.handle->SetState(0, TierState::kCommitted);
    } else {
      // Committed on tier 1, which restores of this rank then read.
      Status why = st.WithContext(label + " is committed on tier 1 (" + opts_.tiers[1].uri +
                                  ") but could not be recorded on tier 0 (" + opts_.tiers[0].uri + ")");
      job.handle->SetState(0, TierState::kFailed, why);
      job.handle->FailForGood(why);
      CountError("save", why);
    }
    if (job.part->rank != 0) {
      for (size_t k = 2; k < stores_.size(); ++k) job.handle->SetState(k, TierState::kSkipped);
    } else if (stores_.size() > 2) {
      // Rank 0 drains the whole checkpoint on from tier 1.
      const uint64_t bytes = BytesToDrain(job.name, job.step, job.bytes, /*from=*/1);
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t k = 2; k < stores_.size(); ++k) {
        QueueDrainLocked(DrainJob{job.name, job.step, k, job.handle, 0, Clock::now(), bytes, std::nullopt});
      }
      PublishBacklogLocked();
    }
    retention_->Apply(job.name);
  }

  // A part save may not start where tier 1 already holds the step; part
  // records tier 0 keeps of a commit tier 1 no longer has (the step was
  // removed there, then is saved again) are stale, and go first, so that
  // this save's record can take their place (gc takes their data).
  Status PreparePartSave(const CheckpointId& id) {
    auto there = ReadCommitRecord(stores_[1]->backend(), id.name, id.step);
    if (there.ok()) {
      return Status::AlreadyExists(Label(id) + " is already committed on tier 1 (" + opts_.tiers[1].uri + ")");
    }
    if (!there.status().IsNotFound()) return Status::OK();  // tier 1 is asked again at the commit
    auto stale = stores_[0]->backend().List(PartPrefix(id.name, id.step));
    if (!stale.ok()) return stale.status().WithContext(Label(id));
    for (const auto& o : *stale) {
      Status st = stores_[0]->backend().Remove(o.name);
      if (!st.ok() && !st.IsNotFound()) return st.WithContext(Label(id) + ": remove a stale part record");
    }
    return Status::OK();
  }

  // The rank's part could not be written on tier 0: the other ranks learn
  // it from an abort note on tier 1, where they wait (only for an attempt id
  // this save alone uses, as a rank writer does).
  void TellPartFailed(const CheckpointId& id, const PartToCommit& part, const Status& why) {
    if (part.save.attempt.empty() || !part.save.attempt_is_unique) return;
    PublishAbortNote(stores_[1]->backend(), id, part.save.attempt, part.rank, why.ToString());
  }

  // Live state for a scrape: memory only, never a store listing.
  void Collect(MetricsSink& sink) {
    PipelineLiveState live;
    {
      std::lock_guard<std::mutex> lock(mu_);
      live.saves_writing = active_;
      for (const auto& j : drains_) live.drains.push_back({j.dst, j.attempts > 0});
    }
    live.draining_tier = draining_ > 0 ? draining_dst_.load() : -1;
    live.backlog = backlog_board_->Get();
    live.staging_bytes = opts_.staging_bytes;
    for (size_t k = 0; k < stores_.size(); ++k) {
      live.tiers.push_back({opts_.tiers[k].uri, opts_.tiers[k].rate_bytes_per_sec, buckets_[k]->waited_seconds()});
    }
    ReportPipelineState(live, sink);
  }

  void WriterLoop() {
    for (;;) {
      WriteJob job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return closing_ || !writes_.empty(); });
        if (writes_.empty()) return;  // closing, nothing left
        job = std::move(writes_.front());
        writes_.pop_front();
      }
      const CheckpointId id = job.handle->id();
      job.handle->SetState(0, TierState::kWriting);
      auto stats = job.image->WriteAndCommit(*job.writer, stores_[0]->backend(), buckets_[0].get(),
                                             job.handle->written(0), metrics_->save_written, hash_pool_.get());
      if (job.part && stats.ok()) {
        job.part->writer = std::move(job.writer);  // keeps tier 0's lock until the part is recorded
      }
      job.writer.reset();  // retires the writer: its lock goes, failed data is removed
      const uint64_t staged = job.image->bytes();
      job.image.reset();
      if (job.part && stats.ok()) {
        // Tier 0 holds the part; it commits once tier 1 has the checkpoint.
        job.handle->SetStats(*stats);
        {
          std::lock_guard<std::mutex> lock(mu_);
          --tier0_steps_;
          tier0_bytes_ -= staged;
          drains_.push_back(DrainJob{id.name, id.step, 1, job.handle, 0, Clock::now(), stats->bytes,
                                     std::move(job.part)});
          PublishBacklogLocked();
        }
        SaveEnded();
        drain_cv_.notify_all();
        continue;
      }
      const bool drains = stats.ok() && job.rank == 0 && stores_.size() > 1;
      const uint64_t bytes =
          drains ? BytesToDrain(id.name, id.step, stats->bytes - std::min(stats->bytes, stats->referenced_bytes)) : 0;
      {
        // The step leaves tier 0's backlog and joins the later tiers' in one
        // step, before the handle says committed: a Begin() checking the
        // backlog limit, or a caller back from WaitTier(0), sees it.
        std::lock_guard<std::mutex> lock(mu_);
        --tier0_steps_;
        tier0_bytes_ -= staged;
        for (size_t k = 1; drains && k < stores_.size(); ++k) {
          QueueDrainLocked(DrainJob{id.name, id.step, k, job.handle, 0, Clock::now(), bytes, std::nullopt});
        }
        PublishBacklogLocked();
      }
      // Staging is free again: the next save may start. Drains to later
      // tiers read tier 0, not staging, so a slow or absent later tier never
      // holds up training (retention keeps tier 0's copies meanwhile).
      SaveEnded();
      if (!stats.ok()) {
        Status why = stats.status().WithContext("tier 0 (" + opts_.tiers[0].uri + ")");
        if (job.part) TellPartFailed(id, *job.part, why);
        job.handle->SetState(0, TierState::kFailed, why);
        job.handle->FailForGood(why);
        CountError("save", why);
        continue;
      }
      job.handle->SetStats(*stats);
      job.handle->SetState(0, TierState::kCommitted);
      if (job.rank != 0) {
        // Rank 0 drains the whole checkpoint; other ranks are done.
        for (size_t k = 1; k < stores_.size(); ++k) job.handle->SetState(k, TierState::kSkipped);
        continue;
      }
      if (stores_.size() == 1) {
        retention_->Apply(id.name);
        continue;
      }
      drain_cv_.notify_all();
    }
  }

  void ResumeDrains() {
    auto names = NamesOnAnyTier(Stores(), "");
    if (!names.ok()) return;
    for (const auto& n : *names) {
      if (stop_drains_) return;
      auto plans = retention_->Plan(n);
      std::map<uint64_t, uint64_t> bytes;
      for (size_t k = 1; k < stores_.size(); ++k) {
        for (uint64_t step : plans[k].to_drain) {
          if (!bytes.count(step)) bytes[step] = BytesToDrain(n, step, 0);
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t k = 1; k < stores_.size(); ++k) {
        for (uint64_t step : plans[k].to_drain) {
          // This pipeline's own saves drain through their handles.
          if (own_saves_.count({n, step})) continue;
          bool queued = false;
          for (const auto& j : drains_) queued = queued || (j.name == n && j.step == step && j.dst == k);
          if (!queued) QueueDrainLocked(DrainJob{n, step, k, nullptr, 0, Clock::now(), bytes[step], std::nullopt});
        }
      }
      PublishBacklogLocked();
    }
  }

  // Saves in flight (not yet committed on tier 0) or a drain running or due:
  // the background scrub waits (Maintenance).
  bool BusyLocked() const {
    if (active_ > 0 || draining_ > 0) return true;
    const auto now = Clock::now();
    for (const auto& j : drains_) {
      if (j.not_before <= now) return true;
    }
    return false;
  }

  void DrainerLoop() {
    if (opts_.resume_drains && stores_.size() > 1) ResumeDrains();
    for (;;) {
      DrainJob job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
          if (stop_drains_) return;
          auto ready = drains_.end();
          auto earliest = Clock::time_point::max();
          bool dropped = false;
          // A part commit first: the other ranks wait for it (rank timeout),
          // while drains to later tiers can wait.
          for (auto it = drains_.begin(); it != drains_.end() && ready == drains_.end(); ++it) {
            if (it->part) ready = it;
          }
          for (auto it = drains_.begin(); it != drains_.end() && ready == drains_.end();) {
            // Coalesce: a newer step of the name waits for the same tier.
            if (auto newer = NewerQueuedLocked(*it)) {
              SupersedeLocked(*it, *newer);
              it = drains_.erase(it);
              dropped = true;
              continue;
            }
            if (it->not_before <= Clock::now()) {
              ready = it;
              break;
            }
            earliest = std::min(earliest, it->not_before);
            ++it;
          }
          if (ready != drains_.end()) {
            job = std::move(*ready);
            drains_.erase(ready);
            running_ = RunningDrain{job.name, job.step, job.dst, job.bytes};
            PublishBacklogLocked();
            break;
          }
          if (dropped) PublishBacklogLocked();
          if (earliest == Clock::time_point::max()) {
            drain_cv_.wait(lock);
          } else {
            drain_cv_.wait_until(lock, earliest);
          }
        }
      }
      if (job.handle) job.handle->SetState(job.dst, TierState::kWriting);
      struct Running {
        PipelineImpl* p;
        Running(PipelineImpl* pp, size_t dst) : p(pp) {
          p->draining_dst_ = static_cast<int>(dst);
          ++p->draining_;
        }
        ~Running() {
          --p->draining_;
          if (p->maintenance_) p->maintenance_->Wake();
        }
      } running(this, job.dst);
      if (job.part) {
        CommitPart(std::move(job));
        std::lock_guard<std::mutex> lock(mu_);
        running_.reset();
        PublishBacklogLocked();
        continue;
      }
      Status st = DrainOnce(job.name, job.step, job.dst, job.handle ? job.handle->written(job.dst) : nullptr);
      {
        std::lock_guard<std::mutex> lock(mu_);
        running_.reset();
        if (st.ok() || !stop_drains_) PublishBacklogLocked();
      }
      if (st.ok()) {
        if (job.handle) job.handle->SetState(job.dst, TierState::kCommitted);
        retention_->Apply(job.name);
        continue;
      }
      if (stop_drains_) {
        std::lock_guard<std::mutex> lock(mu_);
        drains_.push_back(std::move(job));  // reported as unfinished by the destructor
        return;
      }
      if (st.code() == StatusCode::kNotFound) {
        // Gone meanwhile: removed, or superseded by a newer step committed
        // there by another process and then removed by retention.
        if (!job.handle) continue;
        auto plans = retention_->Plan(job.name);
        if (plans[job.dst].superseded.count(job.step)) {
          uint64_t newer = job.step;
          for (uint64_t s : plans[job.dst].to_drain) newer = std::max(newer, s);
          for (uint64_t s : plans[job.dst].keep) newer = std::max(newer, s);
          std::lock_guard<std::mutex> lock(mu_);
          SupersedeLocked(job, newer);
          PublishBacklogLocked();
          continue;
        }
      }
      ++job.attempts;
      metrics_->drain_retries.Add();
      CountError("drain", st);
      uint64_t backoff = opts_.retry_initial_ms;
      for (uint32_t i = 1; i < job.attempts && backoff < opts_.retry_max_ms; ++i) backoff *= 2;
      backoff = std::min(backoff, opts_.retry_max_ms);
      if (job.handle) {
        job.handle->SetState(job.dst, TierState::kFailed,
                             st.WithContext("attempt " + std::to_string(job.attempts) + ", retrying in " +
                                            std::to_string(backoff / 1000.0).substr(0, 4) + " s"));
      }
      job.not_before = Clock::now() + std::chrono::milliseconds(backoff);
      std::lock_guard<std::mutex> lock(mu_);
      drains_.push_back(std::move(job));
      PublishBacklogLocked();
    }
  }

  PipelineOptions opts_;
  std::vector<std::unique_ptr<Store>> stores_;
  std::vector<std::unique_ptr<TokenBucket>> buckets_;
  std::mutex arena_mu_;
  uint64_t slab_bytes_ = 0;
  std::unique_ptr<StagingArena> arena_;
  std::unique_ptr<CopyPool> pool_;
  std::unique_ptr<CopyPool> hash_pool_;
  size_t align_ = 1;

  struct RunningDrain {
    std::string name;
    uint64_t step = 0;
    size_t dst = 0;
    uint64_t bytes = 0;
  };
  mutable std::mutex mu_;
  std::condition_variable work_cv_, drain_cv_, slot_cv_;
  // The backlog's parts (under mu_): saves not yet committed on tier 0, the
  // drain running now, and steps superseded per tier. drains_ holds the rest.
  uint64_t tier0_steps_ = 0;
  uint64_t tier0_bytes_ = 0;
  std::optional<RunningDrain> running_;
  std::vector<uint64_t> superseded_;
  const std::shared_ptr<BacklogBoard> backlog_board_ = std::make_shared<BacklogBoard>();
  std::deque<WriteJob> writes_;
  std::deque<DrainJob> drains_;
  uint32_t active_ = 0;
  std::set<std::pair<std::string, uint64_t>> own_saves_;
  // Names this pipeline saved a rank of, and rank 0 of (under mu_).
  std::set<std::string> saved_names_, coordinated_names_;
  bool closing_ = false;
  std::atomic<bool> stop_drains_{false};
  std::mutex snapshot_mu_;
  std::thread writer_thread_, drainer_thread_;
  std::unique_ptr<Retention> retention_;
  std::atomic<int> draining_{0};
  std::atomic<int> draining_dst_{0};
  std::unique_ptr<PipelineMetrics> metrics_;
  std::unique_ptr<Maintenance> maintenance_;  // stopped first
  std::unique_ptr<MetricsRegistry::Registration> metrics_registration_;
};

PendingImpl::~PendingImpl() {
  // Dropped without a snapshot: the save never started.
  if (!snapshotted_) {
    writer_.reset();
    p_->SaveEnded();
  }
}

Result<std::shared_ptr<SaveHandle>> PendingImpl::Snapshot() {
  if (snapshotted_) return Status::InvalidArgument("Snapshot called twice");
  snapshotted_ = true;
  PipelineImpl* p = p_;
  auto handle = std::make_shared<HandleImpl>(id_, p->Uris(), p->metrics().durable, p->backlog_board());
  std::lock_guard<std::mutex> one_snapshot_at_a_time(p->snapshot_mu());
  std::shared_ptr<StagedImage> image =
      StagedImage::Plan(std::move(items_), p->options().store.chunk_bytes,
                        p->options().store.object_bytes, p->align(), p->arena());
  // The writer starts at once: an image larger than the arena streams.
  p->Enqueue(WriteJob{image, std::move(writer_), handle, rank_, part_});
  Status copied = image->CopyIn(p->pool());
  const double stall = SecondsSince(handle->start());
  handle->SetStall(stall);
  if (!copied.ok()) {
    CountError("save", copied);
    return copied.WithContext(Label(id_));
  }
  p->metrics().Snapshotted(image->bytes(), stall);
  return std::shared_ptr<SaveHandle>(handle);
}

Result<std::unique_ptr<CheckpointReader>> PipelineImpl::OpenCheckpoint(std::string_view name,
                                                                       std::optional<uint64_t> step,
                                                                       ReadRecovery* recovery) {
  return OpenOnTiers(Stores(), name, step, opts_.store, recovery);
}

Result<uint64_t> PipelineImpl::LatestGoodStep(std::string_view name) { return LatestGoodStepOnTiers(Stores(), name); }

}  // namespace

Result<std::unique_ptr<Pipeline>> Pipeline::Open(const PipelineOptions& options,
                                                 std::vector<std::unique_ptr<Store>> tiers) {
  auto p = std::make_unique<PipelineImpl>(options, std::move(tiers));
  RETURN_IF_ERROR(p->Init());
  return std::unique_ptr<Pipeline>(std::move(p));
}

}  // namespace sluice
