// For tests: a backend whose placements are slow by name, as a RADOS
// pool's are by placement group when one OSD is slow
// (HedgedWrites::PlacementSlow). Used by the checkpoint and pipeline tests.
#ifndef SLUICE_CHECKPOINT_SLOW_NAMES_FIXTURE_H_
#define SLUICE_CHECKPOINT_SLOW_NAMES_FIXTURE_H_

#include <functional>
#include <string>

#include "sluice/backend_wrapper.h"

namespace sluice {

class SlowNames final : public BackendWrapper, public HedgedWrites {
 public:
  SlowNames(Backend& target, std::function<bool(const std::string&)> slow)
      : BackendWrapper(target), slow_(std::move(slow)) {
    caps_ = target.caps();
    caps_.hedged_writes = this;
  }
  const BackendCaps& caps() const override { return caps_; }
  HedgeStats Stats() const override { return {}; }
  bool PlacementSlow(const std::string& name) const override { return slow_(name); }
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
    ++lists;
    return BackendWrapper::List(prefix);
  }
  int lists = 0;

 private:
  BackendCaps caps_;
  std::function<bool(const std::string&)> slow_;
};

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_SLOW_NAMES_FIXTURE_H_
