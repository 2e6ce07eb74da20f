// For tests: a backend whose first placement of every data object is slow
// (its writes complete `slow` late) and whose siblings ("d/o.dat" ->
// "d/o-h1.dat") are on time, or fail, with a 50 ms deadline: what the
// write queue's hedging (engine/write_queue.h) is for. Used by the engine's
// and the drain's tests.
#ifndef SLUICE_ENGINE_SLOW_PLACEMENT_FIXTURE_H_
#define SLUICE_ENGINE_SLOW_PLACEMENT_FIXTURE_H_

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sluice/backend_wrapper.h"

namespace sluice {

// Names of copy k beside `name`: "d/o.dat" -> "d/o-h1.dat".
inline std::string Sibling(const std::string& name, unsigned k) {
  if (k == 0) return name;
  const size_t dot = name.rfind('.');
  return name.substr(0, dot) + "-h" + std::to_string(k) + name.substr(dot);
}
inline bool IsSibling(const std::string& name) { return name.find("-h") != std::string::npos; }

// Holds back each completion until `delay` after its write started; with
// `fail`, completes every write with an error.
class DelayedObject final : public WritableObjectWrapper {
 public:
  DelayedObject(std::unique_ptr<WritableObject> inner, std::chrono::milliseconds delay, bool fail)
      : WritableObjectWrapper(std::move(inner)), delay_(delay), fail_(fail) {}
  Status StartWrite(uint64_t offset, const void* data, size_t len, uint64_t tag) override {
    started_[tag] = std::chrono::steady_clock::now();
    return WritableObjectWrapper::StartWrite(offset, data, len, tag);
  }
  Result<IoCompletion> Reap() override {
    ASSIGN_OR_RETURN(auto c, ReapUntil(std::chrono::steady_clock::time_point::max()));
    return std::move(c).value();
  }
  Result<std::optional<IoCompletion>> ReapUntil(std::chrono::steady_clock::time_point deadline) override {
    if (held_.empty()) {
      ASSIGN_OR_RETURN(IoCompletion c, WritableObjectWrapper::Reap());
      if (fail_) c.status = Status::IOError("injected: write failed");
      held_.push_back(std::move(c));
    }
    const std::chrono::steady_clock::time_point release = started_[held_.front().tag] + delay_;
    if (release > deadline) {
      std::this_thread::sleep_until(deadline);
      return std::optional<IoCompletion>();
    }
    std::this_thread::sleep_until(release);
    IoCompletion c = std::move(held_.front());
    held_.pop_front();
    return std::optional<IoCompletion>(std::move(c));
  }
  size_t in_flight() const override { return WritableObjectWrapper::in_flight() + held_.size(); }

 private:
  std::chrono::milliseconds delay_;
  bool fail_;
  std::map<uint64_t, std::chrono::steady_clock::time_point> started_;
  std::deque<IoCompletion> held_;
};

// A store whose first placement of every object is slow (its writes
// complete `slow` late) and whose siblings are on time (or fail, with
// `fail_siblings`); the placement's deadline is 50 ms.
class SlowFirstPlacement final : public BackendWrapper, public Placement {
 public:
  explicit SlowFirstPlacement(std::unique_ptr<Backend> target) : BackendWrapper(std::move(target)) {
    caps_ = BackendWrapper::caps();
    caps_.placement = this;
  }
  const BackendCaps& caps() const override { return caps_; }
  Result<std::unique_ptr<WritableObject>> Create(const std::string& name, const CreateOptions& o) override {
    ++creates;
    ASSIGN_OR_RETURN(auto w, BackendWrapper::Create(name, o));
    if (IsSibling(name)) {
      if (!fail_siblings) return w;
      return std::unique_ptr<WritableObject>(new DelayedObject(std::move(w), std::chrono::milliseconds(0), true));
    }
    return std::unique_ptr<WritableObject>(new DelayedObject(std::move(w), slow, false));
  }

  const HedgePolicy& policy() const override { return policy_; }
  bool Slow(const std::string&) const override { return false; }
  std::string Place(const std::string& name, const std::vector<std::string>& taken, bool* avoided) override {
    *avoided = false;
    for (unsigned k = 0; k < 8; ++k) {
      if (std::find(taken.begin(), taken.end(), Sibling(name, k)) == taken.end()) return Sibling(name, k);
    }
    return "";
  }
  std::chrono::nanoseconds Deadline() const override { return std::chrono::milliseconds(50); }
  void Observe(const std::string& name, std::chrono::nanoseconds latency, bool) override {
    if (latency >= Deadline()) late.insert(name);
  }
  bool Reserve(uint64_t bytes) override {
    if (stats_.extra_bytes + bytes > budget_bytes) return false;
    stats_.extra_bytes += bytes;
    return true;
  }
  void Count(HedgeEvent event, uint64_t bytes) override {
    switch (event) {
      case HedgeEvent::kSubmitted: stats_.bytes_submitted += bytes; break;
      case HedgeEvent::kHedged: ++stats_.objects_hedged; break;
      case HedgeEvent::kWon: ++stats_.hedges_won; break;
      case HedgeEvent::kRefused: ++stats_.hedges_refused; break;
      default: break;
    }
  }
  HedgeStats Stats() const override { return stats_; }

  HedgePolicy policy_;
  std::chrono::milliseconds slow{1500};
  bool fail_siblings = false;
  uint64_t budget_bytes = 1ull << 30;
  int creates = 0;
  std::set<std::string> late;

 private:
  BackendCaps caps_;
  HedgeStats stats_;
};

}  // namespace sluice

#endif  // SLUICE_ENGINE_SLOW_PLACEMENT_FIXTURE_H_
