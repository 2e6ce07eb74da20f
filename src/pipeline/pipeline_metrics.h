// The series the pipeline layer records into (DefaultMetrics()), looked up
// once per pipeline, scrub or rebuild so that recording is an atomic add.
// doc/metrics.md lists every series and what it means.
#ifndef SLUICE_PIPELINE_PIPELINE_METRICS_H_
#define SLUICE_PIPELINE_PIPELINE_METRICS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sluice/metrics.h"
#include "sluice/pipeline.h"
#include "sluice/status.h"

namespace sluice {

// Bytes written into tier `tier` by `flow`: "save" (tier-0 writes of a
// snapshot), "drain", "rebuild" or "repair".
Counter& TierWrittenBytes(size_t tier, const char* flow);
// Bytes read and checked by scrub from tier `tier`.
Counter& ScrubbedBytes(size_t tier);
// Scrub verdicts per tier: ok, repaired, unrepairable, bad, failed.
Counter& ScrubVerdicts(size_t tier, const std::string& result);
// A failure of `op` ("save", "drain", "scrub", "rebuild"), by status code.
void CountError(const char* op, const Status& status);

// One pipeline's series, found once.
struct PipelineMetrics {
  explicit PipelineMetrics(size_t tiers);
  Counter& snapshots = DefaultMetrics().GetCounter("sluice_snapshots_total", "Saves snapshotted into staging");
  Counter& staged_bytes =
      DefaultMetrics().GetCounter("sluice_staged_bytes_total", "Bytes copied into the staging arena by snapshots");
  Histogram& stall = DefaultMetrics().GetHistogram(
      "sluice_stall_seconds", "Time a snapshot blocked its caller (the checkpoint stall)", SecondsBuckets());
  Counter& drain_retries = DefaultMetrics().GetCounter("sluice_drain_retries_total",
                                                       "Drain attempts that failed and were scheduled again");
  void Snapshotted(uint64_t bytes, double stall_seconds) {
    snapshots.Add();
    staged_bytes.Add(static_cast<double>(bytes));
    stall.Observe(stall_seconds);
  }
  Counter* save_written;                 // tier 0's "save" flow
  std::vector<Counter*> drain_written;   // per tier; null for tier 0
  std::vector<Histogram*> durable;       // per tier
};

// What a scrape reports of a pipeline's live state.
struct PipelineLiveState {
  struct Tier {
    std::string uri;
    uint64_t rate_bytes_per_sec = 0;
    double throttled_seconds = 0;
  };
  struct Drain {
    size_t tier = 0;
    bool retrying = false;  // failed before, backing off
  };
  std::vector<Tier> tiers;
  uint32_t saves_writing = 0;  // begun, not yet committed on tier 0
  std::vector<Drain> drains;   // waiting
  int draining_tier = -1;      // the drain running now, if any
  uint64_t staging_bytes = 0;
  std::vector<TierBacklog> backlog;  // per tier (Pipeline::Backlog)
};
void ReportPipelineState(const PipelineLiveState& live, MetricsSink& sink);

}  // namespace sluice

#endif  // SLUICE_PIPELINE_PIPELINE_METRICS_H_
