// Pipeline: the staged, tiered save path (see include/sluice/pipeline.h).
//
// Threads: the caller's thread (and copy_threads - 1 pool threads) copy into
// staging during Snapshot(); a stager thread (and lazy_copy_threads - 1) copies lazy snapshots,
// started at the first; one writer thread writes staged images to tier 0 and commits them, in
// order; one drainer thread drains committed
// checkpoints to later tiers, retrying failures with backoff; retention
// (retention.h) applies keep_last after commits and drains, on a thread of
// its own for superseded steps.
#include "sluice/pipeline.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_set>

#include "format/layout.h"
#include "sluice/aligned_buffer.h"
#include "io/token_bucket.h"
#include "checkpoint/catalog.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "pipeline/drain_scheduler.h"
#include "pipeline/held_parts.h"
#include "pipeline/lazy_snapshot.h"
#include "pipeline/stager.h"
#include "pipeline/save_handle.h"
#include "pipeline/staged_image.h"
#include "pipeline/staging_arena.h"
#include "pipeline/staging_pool.h"
#include "pipeline/tier_listing.h"
#include "pipeline/maintenance.h"
#include "pipeline/pipeline_metrics.h"
#include "pipeline/retention.h"
#include "pipeline/tiered_reader.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

std::string Label(const CheckpointId& id) { return CheckpointLabel(id.name, id.step); }

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class PipelineImpl;

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
  Result<std::shared_ptr<LazySnapshot>> SnapshotLazily() override;

 private:
  // Lays the image out and queues it for the writer, in the order saves
  // snapshot, with its turn to copy (`ticket`); a lazy one's copy is queued
  // for the stager then too. Returns the image, with `handle` set.
  std::shared_ptr<StagedImage> PlanAndQueue(std::shared_ptr<HandleImpl>* handle, bool lazy, uint64_t* ticket);

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
    if (opts_.staging_pool) opts_.staging_bytes = opts_.staging_pool->bytes();
    RETURN_IF_ERROR(StagingArena::CheckBudget(opts_.staging_bytes, slab_bytes_));
    if (opts_.staging_at_open) RETURN_IF_ERROR(EnsureArena());
    pool_ = std::make_unique<CopyPool>(opts_.copy_threads);
    stager_ = std::make_unique<Stager>(opts_.lazy_copy_threads, copy_turns_);
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
          std::lock_guard<std::mutex> lock(mu_);
          return drainer_->DrainingLocked(name);
        },
        [this](const std::string& name) {
          std::lock_guard<std::mutex> lock(mu_);
          return saved_names_.count(name) > 0 && coordinated_names_.count(name) == 0;
        }});
    DrainScheduler::Env env;
    env.options = &opts_;
    env.stores = Stores();
    for (auto& b : buckets_) env.buckets.push_back(b.get());
    env.metrics = metrics_.get();
    env.retention = retention_.get();
    env.mu = &mu_;
    env.publish_backlog_locked = [this] { PublishBacklogLocked(); };
    env.own_save_locked = [this](const std::string& name, uint64_t step) {
      return own_saves_.count({name, step}) > 0;
    };
    env.drain_ended = [this] { maintenance_->Wake(); };
    drainer_ = std::make_unique<DrainScheduler>(std::move(env));
    {
      std::lock_guard<std::mutex> lock(mu_);
      PublishBacklogLocked();
    }
    metrics_registration_ = DefaultMetrics().AddCollector([this](MetricsSink& sink) { Collect(sink); });
    writer_thread_ = std::thread([this] { WriterLoop(); });
    drainer_->Start();
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
    // Lazy copies finish first (the writer waits for their bytes), and a
    // snapshot its caller never finished fails rather than hold the writer.
    if (stager_) stager_->Close();
    work_cv_.notify_all();
    if (writer_thread_.joinable()) writer_thread_.join();  // finishes queued tier-0 writes first
    if (drainer_) drainer_->Stop();
    if (retention_) retention_->Stop();
    if (drainer_) drainer_->FailLeft();
    held_parts_->Close();
    // Every thread that touched the arena is gone: its owner may unpin it.
    if (arena_ && !opts_.staging_pool && opts_.on_staging_freeing) {
      opts_.on_staging_freeing(arena_->base(), arena_->bytes());
    }
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
      if (Status st = drainer_->PreparePart(id); !st.ok()) {
        SaveEnded();
        return st;
      }
    }
    auto w = part ? NewPartWriter(stores_[0]->backend(), stores_.back()->backend(), opts_.store, id, rank, world,
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
    return drainer_->DrainNow(name);
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

  Result<std::unique_ptr<CheckpointReader>> OpenCheckpoint(std::string_view name, std::optional<uint64_t> step,
                                                           ReadRecovery* recovery,
                                                           const ManifestsElsewhere& elsewhere = {}) override;
  Result<uint64_t> LatestGoodStep(std::string_view name) override;

  // --- used by PendingImpl
  StagingArena& arena() { return *arena_; }  // set by Begin() at the latest

  Status EnsureArena() {
    std::lock_guard<std::mutex> lock(arena_mu_);
    if (arena_) return Status::OK();
    ASSIGN_OR_RETURN(arena_, ArenaForPipeline(opts_, slab_bytes_));
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
  CopyTurns& copy_turns() { return copy_turns_; }
  CopyPool& pool() { return *pool_; }
  Stager& stager() { return *stager_; }

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
    }
    out[0].steps = tier0_steps_;
    out[0].bytes = tier0_bytes_;
    drainer_->AddBacklogLocked(&out);
    return out;
  }

  // Tells handles and a Begin() waiting on the backlog limit (under mu_).
  void PublishBacklogLocked() {
    backlog_board_->Set(BacklogLocked());
    slot_cv_.notify_all();
  }

  // Why a new save may not start now, empty if it may (under mu_).
  std::string BacklogOverLimitLocked() const {
    return BacklogOverLimit(BacklogLocked(), opts_.max_backlog_steps, opts_.max_backlog_bytes);
  }

  std::vector<Store*> Stores() const {
    std::vector<Store*> out;
    for (const auto& st : stores_) out.push_back(st.get());
    return out;
  }
  // Live state for a scrape: memory only, never a store listing.
  void Collect(MetricsSink& sink) {
    PipelineLiveState live;
    {
      std::lock_guard<std::mutex> lock(mu_);
      live.saves_writing = active_;
      drainer_->AddLiveStateLocked(&live);
    }
    live.draining_tier = drainer_->draining_tier();
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
        // Tier 0's lock stays until tier 1, or else the job's peer commit, records the part.
        const std::string manifest = job.writer->published().object;
        if (stores_.size() > 1) {
          job.part->writer = std::move(job.writer);
        } else {
          held_parts_->Hold(manifest, std::move(job.writer));
          job.handle->SetReleasePart([held = std::weak_ptr<HeldParts>(held_parts_), manifest] {
            if (auto h = held.lock()) h->Release(manifest);
          });
        }
        job.handle->SetWritten(manifest);  // peer replicas may start
      }
      job.writer.reset();  // retires the writer: its lock goes, failed data is removed
      const uint64_t staged = job.image->bytes();
      job.image.reset();
      if (job.part && stats.ok() && stores_.size() > 1) {
        // Tier 0 holds the part; it commits once tier 1 has the checkpoint.
        job.handle->SetStats(*stats);
        {
          std::lock_guard<std::mutex> lock(mu_);
          --tier0_steps_;
          tier0_bytes_ -= staged;
          drainer_->QueuePartLocked(DrainJob{id.name, id.step, 1, job.handle, 0, Clock::now(), stats->bytes,
                                     std::move(job.part)});
          PublishBacklogLocked();
        }
        SaveEnded();
        drainer_->Wake();
        continue;
      }
      const bool drains = stats.ok() && job.rank == 0 && stores_.size() > 1;
      const uint64_t bytes =
          drains ? drainer_->BytesToDrain(id.name, id.step, stats->bytes - std::min(stats->bytes, stats->referenced_bytes)) : 0;
      {
        // The step leaves tier 0's backlog and joins the later tiers' in one
        // step, before the handle says committed: a Begin() checking the
        // backlog limit, or a caller back from WaitTier(0), sees it.
        std::lock_guard<std::mutex> lock(mu_);
        --tier0_steps_;
        tier0_bytes_ -= staged;
        for (size_t k = 1; drains && k < stores_.size(); ++k) {
          drainer_->QueueLocked(DrainJob{id.name, id.step, k, job.handle, 0, Clock::now(), bytes, std::nullopt});
        }
        PublishBacklogLocked();
      }
      // Staging is free again: the next save may start. Drains to later
      // tiers read tier 0, not staging, so a slow or absent later tier never
      // holds up training (retention keeps tier 0's copies meanwhile).
      SaveEnded();
      if (!stats.ok()) {
        Status why = stats.status().WithContext("tier 0 (" + opts_.tiers[0].uri + ")");
        if (job.part) drainer_->TellPartFailed(id, *job.part, why);
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
      drainer_->Wake();
    }
  }

  // Saves in flight (not yet committed on tier 0) or a drain running or due:
  // the background scrub waits (Maintenance).
  bool BusyLocked() const {
    return active_ > 0 || drainer_->BusyLocked();
  }

  PipelineOptions opts_;
  std::vector<std::unique_ptr<Store>> stores_;
  std::vector<std::unique_ptr<TokenBucket>> buckets_;
  std::mutex arena_mu_;
  uint64_t slab_bytes_ = 0;
  std::shared_ptr<StagingArena> arena_;  // its own, or its pool's
  std::unique_ptr<CopyPool> pool_;
  std::unique_ptr<CopyPool> hash_pool_;
  size_t align_ = 1;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, slot_cv_;
  // Tier 0's part of the backlog (under mu_): saves not yet committed there.
  // The drain scheduler holds the later tiers' part.
  uint64_t tier0_steps_ = 0;
  uint64_t tier0_bytes_ = 0;
  const std::shared_ptr<BacklogBoard> backlog_board_ = std::make_shared<BacklogBoard>();
  const std::shared_ptr<HeldParts> held_parts_ = std::make_shared<HeldParts>();  // tier 0 alone: parts until peer commit
  std::deque<WriteJob> writes_;
  uint32_t active_ = 0;
  std::set<std::pair<std::string, uint64_t>> own_saves_;
  // Names this pipeline saved a rank of, and rank 0 of (under mu_).
  std::set<std::string> saved_names_, coordinated_names_;
  bool closing_ = false;
  std::mutex snapshot_mu_;  // saves plan and queue their images in order
  CopyTurns copy_turns_;    // and copy them into staging in that order, one at a time
  std::unique_ptr<Stager> stager_;
  std::thread writer_thread_;
  std::unique_ptr<DrainScheduler> drainer_;
  std::unique_ptr<Retention> retention_;
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

std::shared_ptr<StagedImage> PendingImpl::PlanAndQueue(std::shared_ptr<HandleImpl>* handle, bool lazy,
                                                       uint64_t* ticket) {
  PipelineImpl* p = p_;
  *handle = std::make_shared<HandleImpl>(id_, p->Uris(), p->metrics().durable, p->backlog_board());
  std::lock_guard<std::mutex> in_snapshot_order(p->snapshot_mu());
  std::shared_ptr<StagedImage> image =
      StagedImage::Plan(std::move(items_), p->options().store.chunk_bytes,
                        p->options().store.object_bytes, p->align(), p->arena());
  *ticket = p->copy_turns().Take();
  // The writer starts at once: an image larger than the arena streams.
  p->Enqueue(WriteJob{image, std::move(writer_), *handle, rank_, part_});
  if (lazy) {
    image->TrackItems();
    CheckpointId id = id_;
    p->stager().Copy(*ticket, [image, id](CopyPool& pool) {
      Status copied = image->CopyIn(pool);
      if (!copied.ok()) CountError("save", copied.WithContext(Label(id)));
    }, image);
  }
  return image;
}

Result<std::shared_ptr<SaveHandle>> PendingImpl::Snapshot() {
  if (snapshotted_) return Status::InvalidArgument("Snapshot called twice");
  snapshotted_ = true;
  PipelineImpl* p = p_;
  std::shared_ptr<HandleImpl> handle;
  uint64_t ticket = 0;
  std::shared_ptr<StagedImage> image = PlanAndQueue(&handle, false, &ticket);
  p->copy_turns().Wait(ticket);
  Status copied = image->CopyIn(p->pool());
  p->copy_turns().End(ticket);
  const double stall = SecondsSince(handle->start());
  handle->SetStall(stall);
  if (!copied.ok()) {
    CountError("save", copied);
    return copied.WithContext(Label(id_));
  }
  p->metrics().Snapshotted(image->bytes(), stall);
  return std::shared_ptr<SaveHandle>(handle);
}

Result<std::shared_ptr<LazySnapshot>> PendingImpl::SnapshotLazily() {
  if (snapshotted_) return Status::InvalidArgument("Snapshot called twice");
  snapshotted_ = true;
  PipelineImpl* p = p_;
  std::shared_ptr<HandleImpl> handle;
  uint64_t ticket = 0;
  std::shared_ptr<StagedImage> image = PlanAndQueue(&handle, true, &ticket);
  auto lazy = std::make_shared<LazySnapshotImpl>(handle, image);
  const double stall = SecondsSince(handle->start());
  handle->SetStall(stall);
  p->metrics().Snapshotted(image->bytes(), stall);
  return std::shared_ptr<LazySnapshot>(lazy);
}

Result<std::unique_ptr<CheckpointReader>> PipelineImpl::OpenCheckpoint(std::string_view name, std::optional<uint64_t> step,
                                                                       ReadRecovery* recovery,
                                                                       const ManifestsElsewhere& elsewhere) {
  return OpenOnTiers(Stores(), name, step, opts_.store, recovery, elsewhere);
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
