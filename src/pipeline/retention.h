// Retention: which steps each tier of a pipeline keeps (its keep_last, and
// steps superseded on a later tier), and the removal of the rest. A
// pipeline applies it after each commit or drain, on the caller's thread
// (Apply), or queues a name for retention's own thread (Due), so that
// neither a long drain nor a slow listing of a later tier holds up a save.
// With a per-host tier 0 it also prunes this host's parts (parts.h).
//
// Thread-safety: every method may be called from any thread; Apply calls
// are serialized.
#ifndef SLUICE_PIPELINE_RETENTION_H_
#define SLUICE_PIPELINE_RETENTION_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/drain.h"
#include "sluice/pipeline.h"
#include "sluice/store.h"

namespace sluice {

class Retention {
 public:
  // What the pipeline tells retention. Both are called without any lock of
  // retention's held.
  struct Hooks {
    // Per tier, the steps of the name being drained into it right now:
    // they stay on their source whatever the policy.
    std::function<std::vector<std::set<uint64_t>>(const std::string& name)> draining;
    // With a per-host tier 0: whether this pipeline leaves the shared tiers
    // of the name alone (it saved ranks of it, but not rank 0: they are
    // rank 0's pipeline's to prune).
    std::function<bool(const std::string& name)> leaves_shared_tiers;
  };

  // `stores` outlive this object. `tiers` are the pipeline's tier options.
  Retention(std::vector<Store*> stores, std::vector<TierOptions> tiers, bool tier0_per_host, Hooks hooks);
  ~Retention();  // Stop()
  Retention(const Retention&) = delete;
  Retention& operator=(const Retention&) = delete;

  // Starts the thread that applies what is Due.
  void Start();
  // Stops that thread; what is still due is left (the next pipeline of the
  // name, or `sluice drain`, applies it).
  void Stop();
  // Queues `name` for the thread. Never waits for I/O.
  void Due(const std::string& name);

  // Applies retention to `name` now; the number of steps removed. While
  // any tier cannot be listed, nothing is removed anywhere.
  uint64_t Apply(const std::string& name);
  // What each tier holds, keeps, drains and removes of `name`
  // (`*unreachable`, where given, is set when a tier cannot be listed).
  std::vector<TierPlan> Plan(const std::string& name, bool* unreachable = nullptr);

 private:
  void Loop();
  uint64_t PruneParts(const std::string& name);
  bool PartRecordsIn(const std::string& name, uint64_t step);

  const std::vector<Store*> stores_;
  const std::vector<TierOptions> tiers_;
  const bool tier0_per_host_;
  const Hooks hooks_;
  std::mutex apply_mu_;  // one Apply at a time
  std::mutex mu_;        // guards due_ and stop_
  std::condition_variable cv_;
  std::set<std::string> due_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace sluice

#endif  // SLUICE_PIPELINE_RETENTION_H_
