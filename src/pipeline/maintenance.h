// The pipeline's background maintenance: a rebuild of tier 0 when it is
// found empty while later tiers hold checkpoints, and a scrub of every tier
// every scrub_interval_ms (PipelineOptions). One thread of its own; the scrub
// waits before each checkpoint while `busy` says the pipeline is saving or
// draining, so it never delays a snapshot or a drain. Destruction stops both
// at once: reads and writes waiting on their caps give up, and nothing half
// done is recorded or committed.
//
// Thread-safety: Wake() from any thread.
#ifndef SLUICE_PIPELINE_MAINTENANCE_H_
#define SLUICE_PIPELINE_MAINTENANCE_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "sluice/backend.h"
#include "sluice/pipeline.h"

namespace sluice {

class Maintenance {
 public:
  // `tiers` must outlive this object; `busy` is called from its thread.
  Maintenance(std::vector<Backend*> tiers, const PipelineOptions& options, std::function<bool()> busy);
  ~Maintenance();

  // Starts the thread if the options ask for a background scrub or rebuild.
  void Start();

  // The pipeline went idle (a save or drain ended): a waiting scrub looks again.
  void Wake();

  // Stops the thread (a scrub or rebuild in progress ends at once) and waits
  // for it. Idempotent; Wake() stays safe to call afterwards.
  void Stop();

 private:
  void Run();
  void WaitWhileBusy();

  const std::vector<Backend*> tiers_;
  const PipelineOptions options_;
  const std::function<bool()> busy_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace sluice

#endif  // SLUICE_PIPELINE_MAINTENANCE_H_
