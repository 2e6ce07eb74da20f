// sluice drain: finish what saves left undone on later tiers — copy every
// checkpoint committed on a tier but missing on a later one, commit it
// there, then apply retention.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include "output.h"
#include "serve_metrics.h"
#include "store_flags.h"

namespace sluice::cli {
namespace {

std::atomic<bool> g_stop{false};

// First SIGINT/SIGTERM: finish the pass under way and exit 0. A second one
// kills at once, which is safe too (an unfinished copy is never committed;
// the next drain redoes it).
void OnStopSignal(int) {
  g_stop = true;
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

void PrintPass(const DrainReport& r, double secs, bool json) {
  if (json) {
    PrintJson({{"drained", r.checkpoints_drained}, {"bytes", r.bytes}, {"seconds", secs},
               {"removed_by_retention", r.checkpoints_removed}, {"superseded", r.checkpoints_superseded},
               {"failures", r.failures}});
  } else {
    std::printf("drained %llu checkpoint(s), %s in %.2f s (%s); retention removed %llu",
                static_cast<unsigned long long>(r.checkpoints_drained), HumanBytes(r.bytes).c_str(),
                secs, HumanRate(secs > 0 ? r.bytes / secs : 0).c_str(),
                static_cast<unsigned long long>(r.checkpoints_removed));
    if (r.checkpoints_superseded > 0) {
      std::printf("; %llu superseded by newer steps (--backlog-policy coalesce)",
                  static_cast<unsigned long long>(r.checkpoints_superseded));
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

// --watch: a pass every interval until a signal; each pass that did
// something (or failed) is reported as it ends.
int Watch(Pipeline& pipeline, const std::string& name, uint64_t interval_ms, bool json) {
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  bool failing = false;
  while (!g_stop) {
    const auto t0 = std::chrono::steady_clock::now();
    auto report = pipeline.Drain(name);
    if (!report.ok()) {
      std::fprintf(stderr, "sluice: %s\n", report.status().message().c_str());
      failing = true;
    } else {
      if (report->checkpoints_drained > 0 || report->checkpoints_removed > 0 || !report->failures.empty()) {
        PrintPass(*report, SecondsSince(t0), json);
      }
      for (const auto& f : report->failures) std::fprintf(stderr, "sluice: %s\n", f.c_str());
      failing = !report->failures.empty();
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(interval_ms);
    while (!g_stop && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  // Stopped by a signal: 1 if the last pass left something undrained.
  return failing ? kExitError : kExitOk;
}

}  // namespace

CommandSpec DrainSpec() {
  CommandSpec spec;
  spec.name = "drain";
  spec.usage = "drain --tier URI --tier URI [...] [--name NAME] [--retry-for DURATION | --watch] [flags]";
  spec.summary =
      "Copies every checkpoint committed on a tier but not yet on a later tier to\n"
      "that tier (from the fastest tier holding it), verifying every chunk on the\n"
      "way, and commits it there; then removes what --keep-last no longer keeps.\n"
      "Resumes drains a killed save or drain left unfinished: partial copies are\n"
      "never committed (gc removes them). Under --backlog-policy coalesce (the default) only\n"
      "the newest step due on a tier is copied there and older due ones are\n"
      "superseded (counted in the report); drain-every copies them all, oldest first.";
  spec.flags = StoreFlagSpecs(false);
  for (auto& f : TierPolicyFlagSpecs()) spec.flags.push_back(f);
  spec.flags.insert(spec.flags.end(), {
      {"name", "NAME", "only checkpoints of this name"},
      {"retry-for", "DURATION", "retry failed drains with backoff for this long (default 0: one pass)"},
      {"watch", "", "keep draining: a pass every --interval until SIGINT or SIGTERM, each\n"
                    "pass that drained, removed or failed something reported as it ends"},
      {"interval", "DURATION", "with --watch: time between passes (default 10s)"},
      {"json", "", "print the result as one JSON object (with --watch: one per line)"},
  });
  spec.flags.push_back(MetricsListenFlagSpec());
  spec.details =
      "Exit status: 0 when every checkpoint is committed on every tier it belongs on,\n"
      "1 when some drain failed (each is named), 2 on bad usage. With --watch it runs\n"
      "until SIGINT or SIGTERM (the pass under way finishes first; a second signal\n"
      "ends it at once, which is safe: an unfinished copy is never committed), then\n"
      "exits 0, or 1 if its last pass left a drain failing.";
  return spec;
}

int CmdDrain(int argc, char** argv) {
  const CommandSpec spec = DrainSpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  auto named = OptionalNameFromFlags(flags);
  if (!named.ok()) return Fail(named.status(), true);
  const std::string name = *named;
  auto retry = ParseDurationMs(flags.Get("retry-for").value_or("0"));
  if (!retry.ok()) return Fail(retry.status().WithContext("--retry-for"), true);
  auto popts = PipelineOptionsFromFlags(flags, false);
  if (!popts.ok()) return Fail(popts.status(), true);
  if (popts->tiers.size() < 2) return Fail(Status::InvalidArgument("drain needs at least two --tier"), true);
  const bool watch = flags.Has("watch");
  if (watch && flags.Has("retry-for")) {
    return Fail(Status::InvalidArgument("--watch retries every --interval; --retry-for is for one-off drains"), true);
  }
  if (!watch && flags.Has("interval")) return Fail(Status::InvalidArgument("--interval needs --watch"), true);
  auto interval = ParseDurationMs(flags.Get("interval").value_or("10s"));
  if (!interval.ok()) return Fail(interval.status().WithContext("--interval"), true);
  if (*interval == 0) return Fail(Status::InvalidArgument("--interval must be more than 0"), true);
  // Later tiers may be created; tier 0 must exist (it is where the data is).
  {
    StoreOptions source;
    source.create_if_missing = false;
    auto there = Store::Open(popts->tiers[0].uri, source);
    if (!there.ok()) return FailStoreOpen(there.status());
  }
  popts->store.create_if_missing = true;
  const auto t0 = std::chrono::steady_clock::now();
  auto metrics_server = ServeMetricsIfAsked(flags);
  if (!metrics_server.ok()) {
    return Fail(metrics_server.status(), metrics_server.status().code() == StatusCode::kInvalidArgument);
  }
  auto pipeline = Pipeline::Open(*popts);
  if (!pipeline.ok()) return FailStoreOpen(pipeline.status());
  if (watch) return Watch(**pipeline, name, *interval, flags.Has("json"));
  DrainReport total;
  uint64_t backoff_ms = 1000;
  for (;;) {
    auto report = (*pipeline)->Drain(name);
    if (!report.ok()) return Fail(report.status());
    total.checkpoints_drained += report->checkpoints_drained;
    total.bytes += report->bytes;
    total.checkpoints_removed += report->checkpoints_removed;
    total.checkpoints_superseded = report->checkpoints_superseded;  // each pass counts them again
    total.failures = report->failures;
    if (total.failures.empty() || SecondsSince(t0) * 1000 + backoff_ms > *retry) break;
    for (const auto& f : total.failures) std::fprintf(stderr, "sluice: %s; retrying in %.0f s\n", f.c_str(), backoff_ms / 1000.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min<uint64_t>(backoff_ms * 2, 60'000);
  }
  const double secs = SecondsSince(t0);
  PrintPass(total, secs, flags.Has("json"));
  for (const auto& f : total.failures) std::fprintf(stderr, "sluice: %s\n", f.c_str());
  return total.failures.empty() ? kExitOk : kExitError;
}

}  // namespace sluice::cli
