#include "pipeline/pipeline_metrics.h"

#include <algorithm>
#include <mutex>

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

PipelineMetrics::PipelineMetrics(size_t tiers) : save_written(&TierWrittenBytes(0, "save")) {
  for (size_t k = 0; k < tiers; ++k) {
    drain_written.push_back(k > 0 ? &TierWrittenBytes(k, "drain") : nullptr);
    durable.push_back(&DefaultMetrics().GetHistogram("sluice_durable_seconds",
                                                     "Time from the start of a snapshot to its commit on a tier",
                                                     SecondsBuckets(), {{"tier", std::to_string(k)}}));
  }
}

void ReportPipelineState(const PipelineLiveState& live, MetricsSink& sink) {
  const char* in_flight = "Checkpoints not yet committed on a tier, by state (writing, queued, retrying)";
  for (size_t k = 0; k < live.tiers.size(); ++k) {
    const std::string tier = std::to_string(k);
    const auto& t = live.tiers[k];
    if (!t.uri.empty()) {
      sink.Gauge("sluice_tier_info", "A tier of an open pipeline (always 1), with its URI",
                 {{"tier", tier}, {"uri", t.uri}}, 1);
    }
    double writing = k == 0 ? live.saves_writing : (live.draining_tier == static_cast<int>(k) ? 1 : 0);
    sink.Gauge("sluice_checkpoints_in_flight", in_flight, {{"tier", tier}, {"state", "writing"}}, writing);
    if (k > 0) {
      double queued = 0, retrying = 0;
      for (const auto& d : live.drains) {
        if (d.tier == k) (d.retrying ? retrying : queued) += 1;
      }
      sink.Gauge("sluice_checkpoints_in_flight", in_flight, {{"tier", tier}, {"state", "queued"}}, queued);
      sink.Gauge("sluice_checkpoints_in_flight", in_flight, {{"tier", tier}, {"state", "retrying"}}, retrying);
    }
    if (k < live.backlog.size()) {
      const TierBacklog& b = live.backlog[k];
      sink.Gauge("sluice_tier_backlog_steps",
                 "Checkpoints due on a tier and not yet committed there (tier 0: snapshotted, not yet "
                 "written; later tiers: draining, waiting or retrying)",
                 {{"tier", tier}}, static_cast<double>(b.steps));
      sink.Gauge("sluice_tier_backlog_bytes", "Bytes of the checkpoints in sluice_tier_backlog_steps",
                 {{"tier", tier}}, static_cast<double>(b.bytes));
      if (k > 0) {
        sink.Counter("sluice_superseded_total",
                     "Steps a tier's backlog policy (coalesce) skipped for a newer step, since the pipeline opened",
                     {{"tier", tier}}, static_cast<double>(b.superseded));
      }
    }
    sink.Counter("sluice_throttled_seconds_total",
                 "Seconds background writes into a tier waited for its rate cap or concurrency limit",
                 {{"tier", tier}}, t.throttled_seconds);
    sink.Gauge("sluice_tier_rate_limit_bytes_per_second", "The tier's cap on background writes (0: none)",
               {{"tier", tier}}, static_cast<double>(t.rate_bytes_per_sec));
  }
  sink.Gauge("sluice_drain_queue_depth", "Drains waiting (due, or backing off after a failure)", {},
             static_cast<double>(live.drains.size()));
  sink.Gauge("sluice_staging_bytes", "Size of the staging arenas of open pipelines", {},
             static_cast<double>(live.staging_bytes));
}

void DeclarePipelineMetrics(size_t tiers) {
  // The series recorded as events, at zero.
  PipelineMetrics series(tiers);
  for (size_t k = 0; k < tiers; ++k) {
    (void)ScrubbedBytes(k);
    if (k > 0) {
      (void)TierWrittenBytes(k, "rebuild");
      (void)TierWrittenBytes(k, "repair");
    }
  }
  // The state families, at zero for the most tiers declared: a collector
  // kept for the process, whose zeros add nothing to the values open
  // pipelines report (series reported twice are summed).
  static std::mutex mu;
  static size_t declared = 0;
  // Never destroyed at exit: a scrape may still be answered then.
  static MetricsRegistry::Registration* zeros = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (zeros != nullptr && tiers <= declared) return;
  declared = std::max(declared, tiers);
  delete zeros;
  const size_t n = declared;
  zeros = DefaultMetrics().AddCollector([n](MetricsSink& sink) {
    PipelineLiveState idle;
    idle.tiers.resize(n);
    idle.backlog.resize(n);
    ReportPipelineState(idle, sink);
  }).release();
}

}  // namespace sluice
