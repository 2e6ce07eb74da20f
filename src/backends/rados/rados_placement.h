// The Placement of the rados:// backend (sluice/backend.h). A RADOS object
// lives in the placement group its name hashes to, and the OSDs of a group
// apply its writes in order: one slow OSD holds up every write to every
// group it serves. So the write queue places each data object under a name
// whose group is not found slow, and hedges a late one under a name beside
// it in another group (HedgeName). Which groups are slow is learned from
// late writes, from the OSDs those share (one round trip to the mgr's PG
// map), from a probe of every OSD when the store opens, and from the other
// processes of the user, through a small file (HedgeState); none of it is
// seen above the backend.
//
// Internal to src/backends/rados.
#ifndef SLUICE_BACKENDS_RADOS_RADOS_PLACEMENT_H_
#define SLUICE_BACKENDS_RADOS_RADOS_PLACEMENT_H_

#include <memory>
#include <string>
#include <vector>

#include "backends/hedge_state.h"
#include "backends/rados/rados_object.h"

namespace sluice {

// `name` as the hedged object `k` beside it: "a/b-000003.dat" -> "a/b-000003-h<k>.dat"
// (other names get "-h<k>" appended). k = 0 is `name` itself.
std::string HedgeName(const std::string& name, unsigned k);

class RadosPlacement final : public HedgeState, public std::enable_shared_from_this<RadosPlacement> {
 public:
  // The placement of `pool` in `cluster` (held weakly: the cluster holds
  // this until it shuts down), names under `object_prefix`. Reads the
  // suspects other processes shared (fetching the PG map if there are any).
  static std::shared_ptr<RadosPlacement> Open(const std::shared_ptr<Cluster>& cluster, const std::string& pool,
                                              const std::string& object_prefix, HedgeOptions options);

  // The first of HedgeName(name, 0, 1, ...) whose group is none of
  // `taken`'s and not slow; where every candidate's group is slow, the
  // first in a group of its own.
  std::string Place(const std::string& name, const std::vector<std::string>& taken, bool* avoided) override;

  // Which OSDs are slow now, before anything is placed: each OSD is asked,
  // as primary, for a few names that do not exist, all at once, and one
  // that leaves most unanswered after the floor is suspected. See the
  // .cc; best effort.
  void Probe();

  RadosPlacement(std::weak_ptr<Cluster> cluster, std::string object_prefix, HedgeOptions options,
                 FetchActing fetch_acting);

 private:
  std::weak_ptr<Cluster> cluster_;
  std::string object_prefix_;
};

}  // namespace sluice

#endif  // SLUICE_BACKENDS_RADOS_RADOS_PLACEMENT_H_
