// For tests: a backend whose placements are slow by name, as a RADOS
// pool's are by placement group when one OSD is slow
// (Placement::Slow); its data objects go under the names given, never hedged. Used by the checkpoint and pipeline tests.
#ifndef SLUICE_CHECKPOINT_SLOW_NAMES_FIXTURE_H_
#define SLUICE_CHECKPOINT_SLOW_NAMES_FIXTURE_H_

#include <chrono>
#include <functional>
#include <string>

#include "sluice/backend_wrapper.h"

namespace sluice {

class SlowNames final : public BackendWrapper, public Placement {
 public:
  SlowNames(Backend& target, std::function<bool(const std::string&)> slow)
      : BackendWrapper(target), slow_(std::move(slow)) {
    caps_ = target.caps();
    caps_.placement = this;
    policy_.enabled = false;
  }
  const BackendCaps& caps() const override { return caps_; }
  const HedgePolicy& policy() const override { return policy_; }
  bool Slow(const std::string& name) const override { return slow_(name); }
  std::string Place(const std::string& name, const std::vector<std::string>& taken, bool* avoided) override {
    *avoided = false;
    return taken.empty() ? name : std::string();
  }
  std::chrono::nanoseconds Deadline() const override { return std::chrono::seconds(1); }
  void Observe(const std::string&, std::chrono::nanoseconds, bool) override {}
  bool Reserve(uint64_t) override { return false; }
  void Count(HedgeEvent, uint64_t) override {}
  HedgeStats Stats() const override { return {}; }
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
    ++lists;
    return BackendWrapper::List(prefix);
  }
  int lists = 0;

 private:
  BackendCaps caps_;
  HedgePolicy policy_;
  std::function<bool(const std::string&)> slow_;
};

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_SLOW_NAMES_FIXTURE_H_
