// The series the pipeline layer records into (DefaultMetrics()), looked up
// once per pipeline, scrub or rebuild so that recording is an atomic add.
// doc/metrics.md lists every series and what it means.
#ifndef SLUICE_PIPELINE_PIPELINE_METRICS_H_
#define SLUICE_PIPELINE_PIPELINE_METRICS_H_

#include <cstddef>
#include <string>

#include "sluice/metrics.h"
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

struct PipelineMetrics {
  Counter& snapshots = DefaultMetrics().GetCounter("sluice_snapshots_total", "Saves snapshotted into staging");
  Counter& staged_bytes =
      DefaultMetrics().GetCounter("sluice_staged_bytes_total", "Bytes copied into the staging arena by snapshots");
  Histogram& stall = DefaultMetrics().GetHistogram(
      "sluice_stall_seconds", "Time a snapshot blocked its caller (the checkpoint stall)", SecondsBuckets());
  Counter& drain_retries = DefaultMetrics().GetCounter("sluice_drain_retries_total",
                                                       "Drain attempts that failed and were scheduled again");
  Histogram& Durable(size_t tier);
};

}  // namespace sluice

#endif  // SLUICE_PIPELINE_PIPELINE_METRICS_H_
