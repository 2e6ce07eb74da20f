// sluice drain: finish what saves left undone on later tiers — copy every
// checkpoint committed on a tier but missing on a later one, commit it
// there, then apply retention.
#include <chrono>
#include <cstdio>
#include <thread>

#include "output.h"
#include "store_flags.h"

namespace sluice::cli {

int CmdDrain(int argc, char** argv) {
  CommandSpec spec;
  spec.name = "drain";
  spec.usage = "drain --tier URI --tier URI [...] [--name NAME] [--retry-for DURATION] [flags]";
  spec.summary =
      "Copies every checkpoint committed on a tier but not yet on a later tier to\n"
      "that tier (from the fastest tier holding it), verifying every chunk on the\n"
      "way, and commits it there; then removes what --keep-last no longer keeps.\n"
      "Resumes drains a killed save or drain left unfinished: partial copies are\n"
      "rewritten, never committed.";
  spec.flags = StoreFlagSpecs(false);
  for (auto& f : TierPolicyFlagSpecs()) spec.flags.push_back(f);
  spec.flags.insert(spec.flags.end(), {
      {"name", "NAME", "only checkpoints of this name"},
      {"retry-for", "DURATION", "retry failed drains with backoff for this long (default 0: one pass)"},
      {"json", "", "print the result as one JSON object"},
  });
  spec.details =
      "Exit status: 0 when every checkpoint is committed on every tier it belongs on,\n"
      "1 when some drain failed (each is named), 2 on bad usage.";
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  std::string name = flags.Get("name").value_or("");
  if (flags.Has("name")) {
    if (Status st = ValidateCheckpointName(name); !st.ok()) return Fail(st, true);
  }
  auto retry = ParseDurationMs(flags.Get("retry-for").value_or("0"));
  if (!retry.ok()) return Fail(retry.status().WithContext("--retry-for"), true);
  auto popts = PipelineOptionsFromFlags(flags, false);
  if (!popts.ok()) return Fail(popts.status(), true);
  if (popts->tiers.size() < 2) return Fail(Status::InvalidArgument("drain needs at least two --tier"), true);
  // Later tiers may be created; tier 0 must exist (it is where the data is).
  popts->store.create_if_missing = true;
  const auto t0 = std::chrono::steady_clock::now();
  auto pipeline = Pipeline::Open(*popts);
  if (!pipeline.ok()) return FailStoreOpen(pipeline.status());
  DrainReport total;
  uint64_t backoff_ms = 1000;
  for (;;) {
    auto report = (*pipeline)->Drain(name);
    if (!report.ok()) return Fail(report.status());
    total.checkpoints_drained += report->checkpoints_drained;
    total.bytes += report->bytes;
    total.checkpoints_removed += report->checkpoints_removed;
    total.failures = report->failures;
    if (total.failures.empty() || SecondsSince(t0) * 1000 + backoff_ms > *retry) break;
    for (const auto& f : total.failures) std::fprintf(stderr, "sluice: %s; retrying in %.0f s\n", f.c_str(), backoff_ms / 1000.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min<uint64_t>(backoff_ms * 2, 60'000);
  }
  const double secs = SecondsSince(t0);
  if (flags.Has("json")) {
    Json j;
    j.BeginObject()
        .Key("drained").UInt(total.checkpoints_drained).Key("bytes").UInt(total.bytes)
        .Key("seconds").Num(secs).Key("removed_by_retention").UInt(total.checkpoints_removed)
        .Key("failures").BeginArray();
    for (const auto& f : total.failures) j.Str(f);
    j.EndArray().EndObject();
    std::printf("%s\n", j.str().c_str());
  } else {
    std::printf("drained %llu checkpoint(s), %s in %.2f s (%s); retention removed %llu\n",
                static_cast<unsigned long long>(total.checkpoints_drained), HumanBytes(total.bytes).c_str(),
                secs, HumanRate(secs > 0 ? total.bytes / secs : 0).c_str(),
                static_cast<unsigned long long>(total.checkpoints_removed));
  }
  for (const auto& f : total.failures) std::fprintf(stderr, "sluice: %s\n", f.c_str());
  return total.failures.empty() ? kExitOk : kExitError;
}

}  // namespace sluice::cli
