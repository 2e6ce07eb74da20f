// HandleImpl: the SaveHandle of one save, shared by the caller (waiting,
// polling progress) and the pipeline's writer and drainer threads (setting
// states as tiers commit or fail).
//
// Thread-safety: thread-safe.
#ifndef SLUICE_PIPELINE_SAVE_HANDLE_H_
#define SLUICE_PIPELINE_SAVE_HANDLE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sluice/metrics.h"
#include "sluice/pipeline.h"

namespace sluice {

// The pipeline's backlog figures, published by the pipeline whenever they
// change and read by its save handles, which may outlive it.
class BacklogBoard {
 public:
  void Set(std::vector<TierBacklog> now) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ = std::move(now);
  }
  std::vector<TierBacklog> Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<TierBacklog> now_;
};

class HandleImpl final : public SaveHandle {
 public:
  // `durable` (optional, per tier): where each tier's commit time is observed.
  // `backlog` (optional): the pipeline's board.
  HandleImpl(CheckpointId id, const std::vector<std::string>& uris, std::vector<Histogram*> durable = {},
             std::shared_ptr<const BacklogBoard> backlog = nullptr)
      : id_(std::move(id)), durable_(std::move(durable)), backlog_(std::move(backlog)) {
    for (const auto& u : uris) {
      TierProgress p;
      p.uri = u;
      tiers_.push_back(std::move(p));
    }
    start_ = std::chrono::steady_clock::now();
  }

  double stall_seconds() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stall_;
  }
  bool done() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return DoneLocked();
  }
  Status WaitTier(size_t tier) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (tier >= tiers_.size()) {
      return Status::InvalidArgument("no tier " + std::to_string(tier) + " (there are " +
                                     std::to_string(tiers_.size()) + ")");
    }
    cv_.wait(lock, [&] { return Settled(tier) || !final_.ok(); });
    if (tiers_[tier].state == TierState::kSuperseded) return tiers_[tier].error;
    if (Settled(tier)) return Status::OK();
    return final_;
  }
  // Every tier settles first (a superseded tier does not cut short the wait
  // for a later one); then the first error, if any.
  Status Wait() override {
    Status first;
    for (size_t k = 0; k < tiers_.size(); ++k) {
      Status st = WaitTier(k);
      if (!st.ok() && first.ok()) first = st;
      if (!st.ok() && !Superseded(k)) return st;  // failed for good: nothing more to wait for
    }
    return first;
  }
  std::vector<TierProgress> progress() const override {
    std::lock_guard<std::mutex> lock(mu_);
    auto out = tiers_;
    for (size_t k = 0; k < out.size(); ++k) out[k].bytes_written = written_[k].load();
    return out;
  }
  const CheckpointId& id() const override { return id_; }
  SaveStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  std::vector<TierBacklog> backlog() const override {
    return backlog_ ? backlog_->Get() : std::vector<TierBacklog>{};
  }

  Result<std::string> WaitWritten() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !written_manifest_.empty() || !final_.ok() || Settled(0) ||
                                tiers_[0].state == TierState::kFailed; });
    if (!written_manifest_.empty()) return written_manifest_;
    if (!final_.ok()) return final_;
    if (!tiers_[0].error.ok()) return tiers_[0].error;
    return Status::NotFound("tier 0 holds no manifest of this save");
  }

  void ReleasePart() override {
    std::function<void()> release;
    {
      std::lock_guard<std::mutex> lock(mu_);
      release.swap(release_part_);
    }
    if (release) release();
  }
  ~HandleImpl() override { ReleasePart(); }

  // --- used by the pipeline
  // What ReleasePart() runs (once).
  void SetReleasePart(std::function<void()> release) {
    std::lock_guard<std::mutex> lock(mu_);
    release_part_ = std::move(release);
  }
  // Tier 0 holds this rank's objects and manifest `object` (WaitWritten).
  void SetWritten(std::string object) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      written_manifest_ = std::move(object);
    }
    cv_.notify_all();
  }
  void SetStats(const SaveStats& s) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_ = s;
  }
  std::chrono::steady_clock::time_point start() const { return start_; }
  std::atomic<uint64_t>* written(size_t k) { return &written_[k]; }
  void SetStall(double s) {
    std::lock_guard<std::mutex> lock(mu_);
    stall_ = s;
  }
  void SetState(size_t k, TierState state, Status error = Status::OK()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      TierProgress& t = tiers_[k];
      t.state = state;
      if (state == TierState::kWriting) ++t.attempts;
      if (state == TierState::kCommitted) {
        t.durable_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
        if (k < durable_.size() && durable_[k] != nullptr) durable_[k]->Observe(t.durable_seconds);
      }
      if (!error.ok()) t.error = error;
      if (state == TierState::kCommitted) t.error = Status::OK();
    }
    cv_.notify_all();
  }
  // The save cannot go on (its tier-0 write failed, or the pipeline closed).
  void FailForGood(const Status& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (final_.ok()) final_ = why;
    }
    cv_.notify_all();
  }

 private:
  bool Superseded(size_t k) const {
    std::lock_guard<std::mutex> lock(mu_);
    return tiers_[k].state == TierState::kSuperseded;
  }
  bool Settled(size_t k) const {
    return tiers_[k].state == TierState::kCommitted || tiers_[k].state == TierState::kSkipped ||
           tiers_[k].state == TierState::kSuperseded;
  }
  bool DoneLocked() const {
    if (!final_.ok()) return true;
    for (size_t k = 0; k < tiers_.size(); ++k) {
      if (!Settled(k)) return false;
    }
    return true;
  }
  const CheckpointId id_;
  const std::vector<Histogram*> durable_;
  const std::shared_ptr<const BacklogBoard> backlog_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TierProgress> tiers_;
  std::atomic<uint64_t> written_[16] = {};
  double stall_ = 0;
  SaveStats stats_;
  std::string written_manifest_;
  std::function<void()> release_part_;  // SetReleasePart
  Status final_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace sluice

#endif  // SLUICE_PIPELINE_SAVE_HANDLE_H_
