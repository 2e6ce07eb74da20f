// DrainScheduler: a pipeline's drains to its later tiers. One thread takes
// queued drains in turn (a per-host part's commit first, then the earliest
// due), copies each from the fastest tier holding the step committed
// (drain.h), retries failures with backoff, supersedes older steps on a
// coalescing tier, and hands finished names to retention. At its start it
// queues what earlier runs left undrained (resume_drains).
//
// Thread-safety: the queue shares the pipeline's mutex (Env::mu); methods
// named ...Locked are called with it held, the others without.
#ifndef SLUICE_PIPELINE_DRAIN_SCHEDULER_H_
#define SLUICE_PIPELINE_DRAIN_SCHEDULER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_writer.h"
#include "io/token_bucket.h"
#include "pipeline/pipeline_metrics.h"
#include "pipeline/retention.h"
#include "pipeline/save_handle.h"
#include "sluice/pipeline.h"
#include "sluice/store.h"

namespace sluice {

using DrainClock = std::chrono::steady_clock;

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

struct DrainJob {
  std::string name;
  uint64_t step = 0;
  size_t dst = 0;
  std::shared_ptr<HandleImpl> handle;  // null for drains resumed from an earlier run
  uint32_t attempts = 0;
  DrainClock::time_point not_before;
  uint64_t bytes = 0;  // what the drain copies (the checkpoint's own bytes), for the backlog
  std::optional<PartToCommit> part;  // this rank's part to copy and commit on tier 1 (dst 1)
};

class DrainScheduler {
 public:
  struct Env {
    const PipelineOptions* options = nullptr;  // tiers resolved (uris filled)
    std::vector<Store*> stores;
    std::vector<TokenBucket*> buckets;  // per tier
    PipelineMetrics* metrics = nullptr;
    Retention* retention = nullptr;
    std::mutex* mu = nullptr;  // the pipeline's: guards the queue and the backlog
    // Under *mu: the backlog changed (the pipeline tells handles and saves
    // waiting on its limit).
    std::function<void()> publish_backlog_locked;
    // Under *mu: whether (name, step) is one of this pipeline's own saves
    // (those drain through their handles, never resumed).
    std::function<bool(const std::string& name, uint64_t step)> own_save_locked;
    // A drain ended (background maintenance may run now).
    std::function<void()> drain_ended;
  };

  explicit DrainScheduler(Env env);
  ~DrainScheduler();  // Stop()
  DrainScheduler(const DrainScheduler&) = delete;
  DrainScheduler& operator=(const DrainScheduler&) = delete;

  void Start();
  // Stops the thread: a drain copying now stops at its next I/O, and is
  // queued again. What is queued then is left (LeftLocked).
  void Stop();
  bool stopping() const { return stop_; }
  // Wakes the thread (a job was queued).
  void Wake() { cv_.notify_all(); }

  // Queues a drain; on a coalescing tier it supersedes the older steps of
  // its name waiting there (not the one draining now), so the backlog shows
  // only what will drain.
  void QueueLocked(DrainJob job);
  // Queues a per-host part's commit on tier 1 as it is (never coalesced).
  void QueuePartLocked(DrainJob job) { drains_.push_back(std::move(job)); }
  // Adds the queued and running drains, and steps superseded, to `backlog`.
  void AddBacklogLocked(std::vector<TierBacklog>* backlog) const;
  // A drain running or due.
  bool BusyLocked() const;
  void AddLiveStateLocked(PipelineLiveState* live) const;
  // The tier a drain is copying into now, or -1.
  int draining_tier() const { return draining_ > 0 ? draining_dst_.load() : -1; }
  // The step of `name` draining now, per tier (it stays on its source).
  std::vector<std::set<uint64_t>> DrainingLocked(const std::string& name) const;
  // Pipeline::Drain: every step of `name` (all names if empty) due on a
  // later tier, drained once each, then retention.
  Result<DrainReport> DrainNow(std::string_view name);
  // After Stop(): fails the handle of every drain left queued (saying how
  // it can be finished), and tells the other ranks of a part left behind.
  void FailLeft();

  // What draining (name, step) from tier `from` copies: its own bytes
  // there, or `fallback` if they cannot be read.
  uint64_t BytesToDrain(const std::string& name, uint64_t step, uint64_t fallback, size_t from = 0);
  // One attempt at draining (name, step) into tier `dst` from the fastest
  // tier that has it committed.
  Status DrainOnce(const std::string& name, uint64_t step, size_t dst, std::atomic<uint64_t>* bytes);
  // Before a part save of `id` starts: refused where tier 1 holds the step
  // committed; part records tier 0 keeps of a commit tier 1 no longer has
  // go first.
  Status PreparePart(const CheckpointId& id);
  // A rank's part could not be written on tier 0: the other ranks learn it
  // from an abort note on tier 1 (for an attempt id this save alone uses).
  void TellPartFailed(const CheckpointId& id, const PartToCommit& part, const Status& why);

 private:
  struct RunningDrain {
    std::string name;
    uint64_t step = 0;
    size_t dst = 0;
    uint64_t bytes = 0;
  };
  void Loop();
  void Resume();
  // Waits for the next job (a part first, else the earliest due); false
  // when stopping.
  bool Next(DrainJob* job);
  void Finish(DrainJob job, const Status& st);
  void SupersedeLocked(const DrainJob& job, uint64_t newer);
  std::optional<uint64_t> NewerQueuedLocked(const DrainJob& job) const;
  Status CommitPartOnce(DrainJob& job, bool* committed);
  void CommitPart(DrainJob job);
  std::vector<Store*> Stores() const { return env_.stores; }

  const Env env_;
  const PipelineOptions& opts_;
  std::condition_variable cv_;
  std::deque<DrainJob> drains_;          // under *mu
  std::optional<RunningDrain> running_;  // under *mu
  std::vector<uint64_t> superseded_;     // under *mu, per tier
  std::atomic<bool> stop_{false};
  std::atomic<int> draining_{0};
  std::atomic<int> draining_dst_{0};
  std::thread thread_;
};

}  // namespace sluice

#endif  // SLUICE_PIPELINE_DRAIN_SCHEDULER_H_
