#include "pipeline/drain_scheduler.h"

#include <algorithm>
#include <map>

#include "checkpoint/catalog.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/parts.h"
#include "checkpoint/step_commit.h"
#include "checkpoint/step_copy.h"
#include "engine/object_copy.h"
#include "format/commit_record.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "pipeline/drain.h"
#include "pipeline/tier_listing.h"

namespace sluice {
namespace {

using Clock = DrainClock;

std::string Label(const CheckpointId& id) { return CheckpointLabel(id.name, id.step); }

}  // namespace

DrainScheduler::DrainScheduler(Env env) : env_(std::move(env)), opts_(*env_.options) {
  superseded_.assign(env_.stores.size(), 0);
}

DrainScheduler::~DrainScheduler() { Stop(); }

void DrainScheduler::Start() { thread_ = std::thread([this] { Loop(); }); }

void DrainScheduler::Stop() {
  stop_ = true;
  {
    std::lock_guard<std::mutex> lock(*env_.mu);  // a drainer between check and wait sees the flag
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DrainScheduler::AddBacklogLocked(std::vector<TierBacklog>* out) const {
  for (size_t k = 0; k < out->size(); ++k) (*out)[k].superseded = k < superseded_.size() ? superseded_[k] : 0;
  for (const auto& j : drains_) {
    ++(*out)[j.dst].steps;
    (*out)[j.dst].bytes += j.bytes;
  }
  if (running_) {
    ++(*out)[running_->dst].steps;
    (*out)[running_->dst].bytes += running_->bytes;
  }
}

bool DrainScheduler::BusyLocked() const {
  if (draining_ > 0) return true;
  const auto now = Clock::now();
  for (const auto& j : drains_) {
    if (j.not_before <= now) return true;
  }
  return false;
}

void DrainScheduler::AddLiveStateLocked(PipelineLiveState* live) const {
  for (const auto& j : drains_) live->drains.push_back({j.dst, j.attempts > 0});
}

std::vector<std::set<uint64_t>> DrainScheduler::DrainingLocked(const std::string& name) const {
  std::vector<std::set<uint64_t>> draining(env_.stores.size());
  if (running_ && running_->name == name) draining[running_->dst].insert(running_->step);
  return draining;
}

Result<DrainReport> DrainScheduler::DrainNow(std::string_view name) {
  DrainReport report;
  ASSIGN_OR_RETURN(auto names, NamesOnAnyTier(env_.stores, name));
  for (const auto& n : names) {
    auto plans = env_.retention->Plan(n);
    for (size_t k = 1; k < env_.stores.size(); ++k) {
      report.checkpoints_superseded += plans[k].superseded.size();
      for (uint64_t step : plans[k].to_drain) {
        std::atomic<uint64_t> bytes{0};
        Status st = DrainOnce(n, step, k, &bytes);
        if (st.ok()) {
          ++report.checkpoints_drained;
          report.bytes += bytes.load();
        } else {
          report.failures.push_back(st.message());
        }
      }
    }
    report.checkpoints_removed += env_.retention->Apply(n);
  }
  return report;
}

void DrainScheduler::FailLeft() {
  std::deque<DrainJob> left;
  {
    std::lock_guard<std::mutex> lock(*env_.mu);
    left.swap(drains_);
  }
  const auto& tiers = env_.options->tiers;
  for (auto& j : left) {
    const std::string label = Label({j.name, j.step});
    if (j.part) TellPartFailed({j.name, j.step}, *j.part, Status::Unavailable("its pipeline closed first"));
    if (j.handle && j.part) {
      j.handle->FailForGood(Status::Unavailable(
          label + ": the pipeline closed before rank " + std::to_string(j.part->rank) +
          "'s part was committed on tier 1 (" + tiers[1].uri + "); the step stays uncommitted"));
    } else if (j.handle) {
      j.handle->FailForGood(Status::Unavailable(
          label + ": the pipeline closed before tier " + std::to_string(j.dst) + " (" + tiers[j.dst].uri +
          ") committed it; `sluice drain` finishes it"));
    }
  }
}

uint64_t DrainScheduler::BytesToDrain(const std::string& name, uint64_t step, uint64_t fallback, size_t from) {
  auto loaded = LoadCommittedOrSafe(env_.stores[from]->backend(), name, step);
  if (!loaded.ok()) return fallback;
  uint64_t bytes = 0;
  for (const auto& m : loaded->manifests) bytes += m.OwnBytes();
  return bytes;
}

// Marks a queued drain superseded by `newer` (under mu).
void DrainScheduler::SupersedeLocked(const DrainJob& job, uint64_t newer) {
  ++superseded_[job.dst];
  env_.retention->Due(job.name);
  if (!job.handle) return;
  job.handle->SetState(job.dst, TierState::kSuperseded,
                       Status::Unavailable(Label({job.name, job.step}) + ": superseded on tier " +
                                           std::to_string(job.dst) + " (" + opts_.tiers[job.dst].uri +
                                           ") by step " + std::to_string(newer) +
                                           ": backlog policy coalesce drains only the newest waiting step"));
}

void DrainScheduler::QueueLocked(DrainJob job) {
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
// and the tier coalesces (under mu).
std::optional<uint64_t> DrainScheduler::NewerQueuedLocked(const DrainJob& job) const {
  if (opts_.tiers[job.dst].backlog != BacklogPolicy::kCoalesce || job.part) return std::nullopt;
  std::optional<uint64_t> newer;
  for (const auto& j : drains_) {
    if (j.dst == job.dst && j.name == job.name && j.step > job.step) newer = std::max(newer.value_or(0), j.step);
  }
  return newer;
}

Status DrainScheduler::DrainOnce(const std::string& name, uint64_t step, size_t dst, std::atomic<uint64_t>* bytes) {
  const std::string label = Label({name, step});
  int src = -1;
  Status why;
  for (size_t j = 0; j < dst; ++j) {
    auto loaded = LoadCommittedOrSafe(env_.stores[j]->backend(), name, step);
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
  control.bucket = env_.buckets[dst];
  control.stop = &stop_;
  control.written = bytes;
  control.written_total = env_.metrics->drain_written[dst];
  control.io_bytes = opts_.store.io_bytes;
  Backend& s = env_.stores[src]->backend();
  Status st = CopyCommittedStep(s, env_.stores[dst]->backend(), name, step, control);
  if (st.ok()) {
    ClearDrainNote(s, name, step, opts_.tiers[dst].uri);
  } else if (!stop_) {
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
Status DrainScheduler::CommitPartOnce(DrainJob& job, bool* committed) {
  const CheckpointId id{job.name, job.step};
  PartToCommit& part = *job.part;
  Backend& local = env_.stores[0]->backend();
  Backend& shared = env_.stores[1]->backend();
  const RankWriter::Published& published = part.writer->published();
  ASSIGN_OR_RETURN(Manifest m, DecodeManifest(published.bytes, "manifest " + published.object));
  ASSIGN_OR_RETURN(auto relay, NewRelayWriter(shared, opts_.store, id, part.rank, part.world, part.save,
                                              part.writer->writer_id()));
  CopyControl control;
  control.bucket = env_.buckets[1];
  control.stop = &stop_;
  control.written = job.handle->written(1);
  control.written_total = env_.metrics->drain_written[1];
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

void DrainScheduler::CommitPart(DrainJob job) {
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
    for (size_t k = 2; k < env_.stores.size(); ++k) job.handle->SetState(k, TierState::kSkipped);
  } else if (env_.stores.size() > 2) {
    // Rank 0 drains the whole checkpoint on from tier 1.
    const uint64_t bytes = BytesToDrain(job.name, job.step, job.bytes, /*from=*/1);
    std::lock_guard<std::mutex> lock(*env_.mu);
    for (size_t k = 2; k < env_.stores.size(); ++k) {
      QueueLocked(DrainJob{job.name, job.step, k, job.handle, 0, Clock::now(), bytes, std::nullopt});
    }
    env_.publish_backlog_locked();
  }
  env_.retention->Apply(job.name);
}

// The rank's part could not be written on tier 0: the other ranks learn
// it from an abort note on tier 1, where they wait (only for an attempt id
// this save alone uses, as a rank writer does).
void DrainScheduler::TellPartFailed(const CheckpointId& id, const PartToCommit& part, const Status& why) {
  if (part.save.attempt.empty() || !part.save.attempt_is_unique) return;
  PublishAbortNote(env_.stores[1]->backend(), id, part.save.attempt, part.rank, why.ToString());
}

void DrainScheduler::Resume() {
  auto names = NamesOnAnyTier(Stores(), "");
  if (!names.ok()) return;
  for (const auto& n : *names) {
    if (stop_) return;
    auto plans = env_.retention->Plan(n);
    std::map<uint64_t, uint64_t> bytes;
    for (size_t k = 1; k < env_.stores.size(); ++k) {
      for (uint64_t step : plans[k].to_drain) {
        if (!bytes.count(step)) bytes[step] = BytesToDrain(n, step, 0);
      }
    }
    std::lock_guard<std::mutex> lock(*env_.mu);
    for (size_t k = 1; k < env_.stores.size(); ++k) {
      for (uint64_t step : plans[k].to_drain) {
        // This pipeline's own saves drain through their handles.
        if (env_.own_save_locked(n, step)) continue;
        bool queued = false;
        for (const auto& j : drains_) queued = queued || (j.name == n && j.step == step && j.dst == k);
        if (!queued) QueueLocked(DrainJob{n, step, k, nullptr, 0, Clock::now(), bytes[step], std::nullopt});
      }
    }
    env_.publish_backlog_locked();
  }
}

void DrainScheduler::Loop() {
  if (opts_.resume_drains && env_.stores.size() > 1) Resume();
  DrainJob job;
  while (Next(&job)) {
    if (job.handle) job.handle->SetState(job.dst, TierState::kWriting);
    draining_dst_ = static_cast<int>(job.dst);
    ++draining_;
    if (job.part) {
      CommitPart(std::move(job));
      std::lock_guard<std::mutex> lock(*env_.mu);
      running_.reset();
      env_.publish_backlog_locked();
    } else {
      Status st = DrainOnce(job.name, job.step, job.dst, job.handle ? job.handle->written(job.dst) : nullptr);
      {
        std::lock_guard<std::mutex> lock(*env_.mu);
        running_.reset();
        if (st.ok() || !stop_) env_.publish_backlog_locked();
      }
      Finish(std::move(job), st);
    }
    --draining_;
    if (env_.drain_ended) env_.drain_ended();
    job = DrainJob{};
  }
}

bool DrainScheduler::Next(DrainJob* job) {
  std::unique_lock<std::mutex> lock(*env_.mu);
  for (;;) {
    if (stop_) return false;
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
      *job = std::move(*ready);
      drains_.erase(ready);
      running_ = RunningDrain{job->name, job->step, job->dst, job->bytes};
      env_.publish_backlog_locked();
      return true;
    }
    if (dropped) env_.publish_backlog_locked();
    if (earliest == Clock::time_point::max()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, earliest);
    }
  }
}

// After one attempt at a drain: committed, superseded, left for the
// pipeline's close, or queued again after a backoff.
void DrainScheduler::Finish(DrainJob job, const Status& st) {
  if (st.ok()) {
    if (job.handle) job.handle->SetState(job.dst, TierState::kCommitted);
    env_.retention->Apply(job.name);
    return;
  }
  if (stop_) {
    std::lock_guard<std::mutex> lock(*env_.mu);
    drains_.push_back(std::move(job));  // reported as unfinished by the pipeline's close
    return;
  }
  if (st.code() == StatusCode::kNotFound) {
    // Gone meanwhile: removed, or superseded by a newer step committed
    // there by another process and then removed by retention.
    if (!job.handle) return;
    auto plans = env_.retention->Plan(job.name);
    if (plans[job.dst].superseded.count(job.step)) {
      uint64_t newer = job.step;
      for (uint64_t s : plans[job.dst].to_drain) newer = std::max(newer, s);
      for (uint64_t s : plans[job.dst].keep) newer = std::max(newer, s);
      std::lock_guard<std::mutex> lock(*env_.mu);
      SupersedeLocked(job, newer);
      env_.publish_backlog_locked();
      return;
    }
  }
  ++job.attempts;
  env_.metrics->drain_retries.Add();
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
  std::lock_guard<std::mutex> lock(*env_.mu);
  drains_.push_back(std::move(job));
  env_.publish_backlog_locked();
}

// A part save may not start where tier 1 already holds the step; part
// records tier 0 keeps of a commit tier 1 no longer has (the step was
// removed there, then is saved again) are stale, and go first, so that
// this save's record can take their place (gc takes their data). With no
// shared tier, the step saved again replaces its peer-committed parts.
Status DrainScheduler::PreparePart(const CheckpointId& id) {
  if (env_.stores.size() > 1) {
    auto there = ReadCommitRecord(env_.stores[1]->backend(), id.name, id.step);
    if (there.ok()) {
      return Status::AlreadyExists(Label(id) + " is already committed on tier 1 (" + opts_.tiers[1].uri + ")");
    }
    if (!there.status().IsNotFound()) return Status::OK();  // tier 1 is asked again at the commit
  }
  auto stale = env_.stores[0]->backend().List(PartPrefix(id.name, id.step));
  if (!stale.ok()) return stale.status().WithContext(Label(id));
  for (const auto& o : *stale) {
    Status st = env_.stores[0]->backend().Remove(o.name);
    if (!st.ok() && !st.IsNotFound()) return st.WithContext(Label(id) + ": remove a stale part record");
  }
  return Status::OK();
}

}  // namespace sluice
