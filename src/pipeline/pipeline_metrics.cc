#include "pipeline/pipeline_metrics.h"

namespace sluice {

Counter& TierWrittenBytes(size_t tier, const char* flow) {
  return DefaultMetrics().GetCounter("sluice_tier_written_bytes_total",
                                     "Bytes written into a tier, by flow (save, drain, rebuild, repair)",
                                     {{"tier", std::to_string(tier)}, {"flow", flow}});
}

Counter& ScrubbedBytes(size_t tier) {
  return DefaultMetrics().GetCounter("sluice_scrub_read_bytes_total", "Bytes scrub read and checked, per tier",
                                     {{"tier", std::to_string(tier)}});
}

Counter& ScrubVerdicts(size_t tier, const std::string& result) {
  return DefaultMetrics().GetCounter("sluice_scrub_checkpoints_total",
                                     "Checkpoint copies scrubbed, per tier and result "
                                     "(ok, repaired, unrepairable, bad, failed)",
                                     {{"tier", std::to_string(tier)}, {"result", result}});
}

void CountError(const char* op, const Status& status) {
  if (status.ok()) return;
  DefaultMetrics()
      .GetCounter("sluice_errors_total", "Failed operations, by operation and kind of error",
                  {{"op", op}, {"kind", StatusCodeName(status.code())}})
      .Add();
}

Histogram& PipelineMetrics::Durable(size_t tier) {
  return DefaultMetrics().GetHistogram("sluice_durable_seconds",
                                       "Time from the start of a snapshot to its commit on a tier",
                                       SecondsBuckets(), {{"tier", std::to_string(tier)}});
}

}  // namespace sluice
