// sluice scrub: read and check every committed checkpoint on every tier, at
// a capped rate.
#include <cctype>
#include <cstdio>
#include <memory>

#include "sluice/maintenance.h"
#include "sluice/maintenance.h"
#include "output.h"
#include "serve_metrics.h"
#include "store_flags.h"

namespace sluice::cli {
CommandSpec ScrubSpec() {
  CommandSpec s;
  s.name = "scrub";
  s.usage = "scrub (--store URI | --tier URI...) [--name NAME] [--rate-limit RATE] [--no-repair] [--json]";
  s.summary =
      "Reads every committed checkpoint (of NAME, or all) on every tier given, newest\n"
      "first, and checks its commit record, its manifests and every chunk's crc32c,\n"
      "reading and writing each tier at most RATE bytes/s. A copy that is bad (a bad\n"
      "chunk, a missing or short data object, a damaged commit record or manifest) is\n"
      "rewritten from a copy on another tier that verified in full: only the bad\n"
      "objects, each written beside the bad one and then swapped in whole. A copy no\n"
      "other tier holds good is left as it is and reported unrepairable; nothing is\n"
      "ever deleted. Each copy is reported ok, repaired, or unrepairable (with why).\n"
      "Exit 1 if any copy is not ok or repaired, or a tier could not be scrubbed.";
  s.details =
      "A killed scrub resumes where it stopped: its progress is kept in the first tier\n"
      "(scrub/progress), and the next scrub of the same tiers and name skips the\n"
      "checkpoints already done. One scrub at a time runs on a tier (scrub/lock);\n"
      "a second one is refused (exit 1). Each copy's last result is kept in its tier\n"
      "(scrub/status) and shown by `sluice ls --json`.";
  s.flags = StoreFlagSpecs(false);
  s.flags.insert(s.flags.end(), {
      {"name", "NAME", "scrub only this checkpoint name (default: all)"},
      {"rate-limit", "RATE", "read and write each tier at most RATE bytes/s, e.g. 200MiB (default: no cap)"},
      {"no-repair", "", "only report: leave bad copies as they are (reported bad)"},
      {"json", "", "print the report as one JSON object"},
  });
  s.flags.push_back(MetricsListenFlagSpec());
  return s;
}

int CmdScrub(int argc, char** argv) {
  const CommandSpec spec = ScrubSpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  ScrubOptions options;
  auto args = TierWalkArgsFromFlags(flags);
  if (!args.ok()) return Fail(args.status(), true);
  options.name = args->name;
  options.rate_bytes_per_sec = args->rate_bytes_per_sec;
  options.store = args->store;
  const std::vector<std::string>& uris = args->uris;
  options.repair = !flags.Has("no-repair");
  // A tier that cannot be opened is named as failed; the others are
  // scrubbed. A bad URI is a usage error.
  auto opened = OpenTiersGoingOnWithoutFailed(uris);
  if (!opened.ok()) {
    if (opened.status().code() == StatusCode::kInvalidArgument) return Fail(opened.status(), true);
    return FailStoreOpen(opened.status());
  }
  const std::vector<Backend*>& tiers = opened->tiers;
  auto metrics_server = ServeMetricsIfAsked(flags);
  if (!metrics_server.ok()) return Fail(metrics_server.status(), metrics_server.status().code() == StatusCode::kInvalidArgument);
  const bool json = flags.Has("json");
  options.on_copy = [&](const ScrubCopyResult& r) {
    if (json) return;
    const std::string label = CheckpointLabel(r.name, r.step);
    for (const auto& b : r.bad) {
      std::printf("  BAD item '%s' rank %u chunk %llu: object %s offset %llu length %llu: %s\n", b.item.c_str(),
                  b.rank, static_cast<unsigned long long>(b.chunk_index), b.object.c_str(),
                  static_cast<unsigned long long>(b.object_offset), static_cast<unsigned long long>(b.length),
                  b.reason.c_str());
    }
    std::string state = r.state;
    for (char& c : state) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::printf("%s %s tier %zu: %llu chunks, %s in %.2f s (%s)", state.c_str(), label.c_str(), r.tier,
                static_cast<unsigned long long>(r.chunks), HumanBytes(r.bytes).c_str(), r.seconds,
                HumanRate(r.seconds > 0 ? r.bytes / r.seconds : 0).c_str());
    if (r.source) std::printf(", rewrote %zu object(s) from tier %zu", r.rewritten.size(), *r.source);
    if (!r.reason.empty()) std::printf(": %s", r.reason.c_str());
    std::printf("\n");
    std::fflush(stdout);
  };
  const double cpu0 = ProcessCpuSeconds();
  auto report = Scrub(tiers, options);
  const double cpu = ProcessCpuSeconds() - cpu0;
  if (!report.ok()) return Fail(report.status());
  size_t not_ok = 0, repaired = 0;
  for (const auto& r : report->copies) {
    not_ok += r.state != "ok" && r.state != "repaired";
    repaired += r.state == "repaired";
  }
  if (json) {
    JsonValue copies = JsonValue::array();
    for (const auto& r : report->copies) {
      JsonValue c = {{"name", r.name}, {"step", r.step}, {"tier", r.tier}, {"uri", uris[r.tier]},
                     {"state", r.state}, {"chunks", r.chunks}, {"bytes", r.bytes}, {"seconds", r.seconds}};
      if (!r.reason.empty()) c["reason"] = r.reason;
      if (r.source) c["repaired_from"] = *r.source;
      c["rewritten"] = r.rewritten;
      JsonValue& bad = c["bad_chunks"] = JsonValue::array();
      for (const auto& b : r.bad) {
        bad.push_back({{"item", b.item}, {"rank", b.rank}, {"chunk", b.chunk_index}, {"object", b.object},
                       {"offset", b.object_offset}, {"length", b.length}, {"reason", b.reason}});
      }
      copies.push_back(std::move(c));
    }
    PrintJson({{"ok", report->ok()}, {"seconds", report->seconds}, {"bytes", report->bytes}, {"cpu_seconds", cpu},
               {"rate_limit", options.rate_bytes_per_sec}, {"repair", options.repair}, {"resumed", report->resumed},
               {"skipped", report->skipped}, {"tier_errors", report->tier_errors}, {"copies", copies}});
  } else {
    if (report->resumed) {
      std::printf("resumed an interrupted scrub: %zu checkpoint(s) it had finished were skipped\n", report->skipped);
    }
    for (const auto& e : report->tier_errors) std::printf("TIER FAILED %s\n", e.c_str());
    std::printf("scrubbed %zu checkpoint cop%s on %zu tier(s), %s in %.2f s: %s\n", report->copies.size(),
                report->copies.size() == 1 ? "y" : "ies", uris.size(), HumanBytes(report->bytes).c_str(),
                report->seconds,
                report->ok() ? (repaired ? (std::to_string(repaired) + " repaired, the rest ok").c_str() : "all ok")
                             : (std::to_string(not_ok) + " not ok").c_str());
  }
  if (!report->ok()) {
    if (not_ok > 0) {
      std::fprintf(stderr, "sluice: %zu checkpoint cop%s not ok\n", not_ok, not_ok == 1 ? "y is" : "ies are");
    } else {
      std::fprintf(stderr, "sluice: %zu tier(s) could not be scrubbed\n", report->tier_errors.size());
    }
    return kExitError;
  }
  return kExitOk;
}

}  // namespace sluice::cli
