// sluice rebuild: repopulate a lost tier from the others, newest steps
// first, at a capped rate.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "output.h"
#include "sluice/maintenance.h"
#include "store_flags.h"

namespace sluice::cli {
CommandSpec RebuildSpec() {
  CommandSpec s;
  s.name = "rebuild";
  s.usage = "rebuild --tier URI --tier URI... [--target K] [--keep-last N] [--name NAME] [--rate-limit RATE] [--json]";
  s.summary =
      "Repopulates tier K (default 0) after it was lost (an empty or replaced\n"
      "directory, a reformatted disk, a recreated RADOS pool) from the other tiers:\n"
      "the newest N committed steps of each name (default 1; 0 means all), newest\n"
      "first, each copied from the nearest tier that holds it intact, every chunk\n"
      "verified on the way, and committed there atomically. Writes into tier K are\n"
      "capped at RATE bytes/s, so a job training on the same device keeps most of it.\n"
      "Steps tier K already holds are left alone; a damaged copy there is reported\n"
      "(sluice scrub repairs it). Exit 1 if a step could not be rebuilt.";
  s.details =
      "A killed rebuild leaves only uncommitted objects in the step it was copying\n"
      "(sluice gc removes them); run it again to finish. Restores during a rebuild\n"
      "read whichever tier holds a committed copy.";
  s.flags = StoreFlagSpecs(false);
  s.flags.insert(s.flags.end(), {
      {"target", "K", "index of the tier to rebuild, in --tier order (default 0)"},
      {"keep-last", "N", "newest steps of each name to restore there (default 1; 0: all)"},
      {"name", "NAME", "rebuild only this checkpoint name (default: all)"},
      {"rate-limit", "RATE", "write the tier at most RATE bytes/s, e.g. 200MiB (default: no cap)"},
      {"json", "", "print the report as one JSON object"},
  });
  return s;
}

int CmdRebuild(int argc, char** argv) {
  const CommandSpec spec = RebuildSpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  RebuildOptions options;
  auto args = TierWalkArgsFromFlags(flags);
  if (!args.ok()) return Fail(args.status(), true);
  options.name = args->name;
  options.rate_bytes_per_sec = args->rate_bytes_per_sec;
  options.store = args->store;
  const std::vector<std::string>& uris = args->uris;
  auto target = flags.GetU64("target", 0);
  if (!target.ok()) return Fail(target.status(), true);
  auto keep = flags.GetU64("keep-last", 1);
  if (!keep.ok() || *keep > UINT32_MAX) return Fail(Status::InvalidArgument("--keep-last must be a count"), true);
  options.keep_last = static_cast<uint32_t>(*keep);
  if (uris.size() < 2) return Fail(Status::InvalidArgument("rebuild needs two or more --tier: the lost one and a source"), true);
  if (*target >= uris.size()) {
    return Fail(Status::InvalidArgument("--target " + std::to_string(*target) + " is not a tier (there are " +
                                        std::to_string(uris.size()) + ")"), true);
  }
  options.target = static_cast<size_t>(*target);
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<Backend*> tiers;
  for (size_t k = 0; k < uris.size(); ++k) {
    // The lost tier may be an empty directory or a recreated pool: it is
    // created if missing. The others must exist.
    auto backend = OpenBackend(uris[k], k == options.target);
    if (!backend.ok()) return FailStoreOpen(backend.status());
    tiers.push_back(backend->get());
    backends.push_back(std::move(backend).value());
  }
  const bool json = flags.Has("json");
  options.on_step = [&](const RebuildStep& s) {
    if (json) return;
    const std::string label = CheckpointLabel(s.name, s.step);
    if (s.state == "rebuilt") {
      std::printf("REBUILT %s from tier %zu: %s in %.2f s (%s)\n", label.c_str(), s.source, HumanBytes(s.bytes).c_str(),
                  s.seconds, HumanRate(s.seconds > 0 ? s.bytes / s.seconds : 0).c_str());
    } else {
      std::string state = s.state;
      for (char& c : state) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      std::printf("%s %s%s%s\n", state.c_str(), label.c_str(), s.reason.empty() ? "" : ": ", s.reason.c_str());
    }
    std::fflush(stdout);
  };
  const double cpu0 = ProcessCpuSeconds();
  auto report = Rebuild(tiers, options);
  const double cpu = ProcessCpuSeconds() - cpu0;
  if (!report.ok()) return Fail(report.status());
  size_t failed = 0, rebuilt = 0;
  for (const auto& s : report->steps) {
    failed += s.state == "failed";
    rebuilt += s.state == "rebuilt";
  }
  if (json) {
    JsonValue steps = JsonValue::array();
    for (const auto& s : report->steps) {
      JsonValue sj = {{"name", s.name}, {"step", s.step}, {"state", s.state}, {"bytes", s.bytes},
                      {"seconds", s.seconds}};
      if (s.state == "rebuilt") sj["source"] = s.source;
      if (!s.reason.empty()) sj["reason"] = s.reason;
      steps.push_back(std::move(sj));
    }
    PrintJson({{"ok", report->ok()}, {"target", options.target}, {"seconds", report->seconds},
               {"bytes", report->bytes}, {"cpu_seconds", cpu}, {"rate_limit", options.rate_bytes_per_sec}, {"stopped", report->stopped},
               {"tier_errors", report->tier_errors}, {"steps", steps}});
  } else {
    for (const auto& e : report->tier_errors) std::printf("TIER FAILED %s\n", e.c_str());
    std::printf("rebuilt %zu step(s) onto tier %zu, %s in %.2f s (%s)%s\n", rebuilt, options.target,
                HumanBytes(report->bytes).c_str(), report->seconds,
                HumanRate(report->seconds > 0 ? report->bytes / report->seconds : 0).c_str(),
                failed ? (", " + std::to_string(failed) + " failed").c_str() : "");
  }
  if (!report->ok()) {
    std::fprintf(stderr, "sluice: rebuild of tier %zu is not complete\n", options.target);
    return kExitError;
  }
  return kExitOk;
}

}  // namespace sluice::cli
