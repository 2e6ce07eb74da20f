// sluice status: one host's checkpoints at a glance: per name, the newest
// committed step on each tier, and the saves and drains in flight with their
// rate and ETA; redrawn in place with --watch on a terminal.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "output.h"
#include "store_flags.h"

namespace sluice::cli {
CommandSpec StatusSpec() {
  CommandSpec s;
  s.name = "status";
  s.usage = "status (--store URI | --tier URI...) [--name NAME] [--watch] [--interval DURATION] [--json]";
  s.summary =
      "Shows, per checkpoint name, the newest committed step on each tier (and how\n"
      "many steps it holds, how many damaged; SAFE: the newest step a peer commit on\n"
      "that tier makes safe, and the hosts holding it), then every save and drain in flight:\n"
      "the bytes written so far, the rate, and for drains the total and an ETA. A\n"
      "drain or save run by another process shows too (it holds the step's writer\n"
      "lock). With --watch it redraws every --interval (default 2s) until\n"
      "interrupted, in place when stdout is a terminal; a store that goes away is\n"
      "shown as an error and watched until it returns. --json prints the same as one\n"
      "JSON object per refresh.";
  s.flags = StoreFlagSpecs(false);
  s.flags.insert(s.flags.end(), {
      {"name", "NAME", "only this checkpoint name"},
      {"watch", "", "refresh until interrupted"},
      {"interval", "DURATION", "time between refreshes, e.g. 2s or 500ms (default 2s; also the sampling time of a single run's rates)"},
      {"json", "", "print a JSON object per refresh"},
  });
  return s;
}

namespace {

struct NameOnTier {
  uint64_t newest = 0;
  bool any = false;
  std::optional<uint64_t> newest_safe;  // the newest step a peer commit here makes safe
  std::vector<std::string> safe_hosts;  // the hosts holding that peer commit
  uint64_t steps = 0;
  uint64_t damaged = 0;
};

struct InFlight {
  std::string name;
  uint64_t step = 0;
  size_t tier = 0;
  std::string kind;    // "drain" or "save"
  uint64_t bytes = 0;  // written so far on that tier
  uint64_t total = 0;  // what it will be (drains), 0 if unknown
  double rate = 0;     // bytes/s since the previous sample, 0 if none
};

struct Snapshot {
  std::vector<std::string> uris;
  std::map<std::string, std::vector<NameOnTier>> names;
  std::vector<InFlight> in_flight;
  std::string error;
  std::string error_code;  // the Status code's name, for --json
  std::chrono::steady_clock::time_point at;
};

uint64_t StepDataBytes(Pipeline& p, size_t tier, const std::string& name, uint64_t step) {
  auto bytes = p.tier(tier).DataBytesWritten({name, step});
  return bytes.ok() ? *bytes : 0;
}

Snapshot Take(const PipelineOptions& options, const std::string& name) {
  Snapshot s;
  s.at = std::chrono::steady_clock::now();
  for (const auto& t : options.tiers) s.uris.push_back(t.uri);
  auto pipeline = Pipeline::Open(options);
  if (!pipeline.ok()) {
    s.error = pipeline.status().message();
    s.error_code = StatusCodeName(pipeline.status().code());
    return s;
  }
  Pipeline& p = **pipeline;
  auto listed = p.List(name);
  if (!listed.ok()) {
    s.error = listed.status().message();
    s.error_code = StatusCodeName(listed.status().code());
    return s;
  }
  for (const auto& c : *listed) {
    auto& per_tier = s.names[c.info.name];
    per_tier.resize(p.tier_count());
    for (size_t k = 0; k < c.tiers.size(); ++k) {
      const auto& tc = c.tiers[k];
      NameOnTier& n = per_tier[k];
      if (tc.state == "committed" || tc.state == "part") {  // part: this host's ranks of it
        n.newest = n.any ? std::max(n.newest, c.info.step) : c.info.step;
        n.any = true;
        ++n.steps;
        if (!tc.safe_hosts.empty() && c.info.step >= n.newest_safe.value_or(0)) {
          n.newest_safe = c.info.step;
          n.safe_hosts = tc.safe_hosts;
        }
      } else if (tc.state == "damaged") {
        ++n.damaged;
      } else if (tc.state == "draining") {
        s.in_flight.push_back(InFlight{c.info.name, c.info.step, k, "drain",
                                       StepDataBytes(p, k, c.info.name, c.info.step), c.info.bytes, 0});
      }
    }
  }
  // Saves under way: a live writer and no commit record yet, on any tier.
  for (size_t k = 0; k < p.tier_count(); ++k) {
    auto all = p.tier(k).List(name, true);
    if (!all.ok()) continue;
    for (const auto& c : *all) {
      if (c.complete || c.damaged || c.problem.rfind("save in progress", 0) != 0) continue;
      bool draining = false;
      for (const auto& f : s.in_flight) draining |= f.name == c.name && f.step == c.step && f.tier == k;
      if (draining) continue;
      s.names[c.name].resize(p.tier_count());
      s.in_flight.push_back(InFlight{c.name, c.step, k, "save", c.bytes, 0, 0});
    }
  }
  return s;
}

// Rates from the bytes each flight had at the previous snapshot.
void Rates(Snapshot& now, const Snapshot& before) {
  const double dt = std::chrono::duration<double>(now.at - before.at).count();
  if (dt <= 0) return;
  for (auto& f : now.in_flight) {
    for (const auto& g : before.in_flight) {
      if (g.name == f.name && g.step == f.step && g.tier == f.tier && f.bytes >= g.bytes) {
        f.rate = static_cast<double>(f.bytes - g.bytes) / dt;
      }
    }
  }
}

std::string Eta(const InFlight& f) {
  if (f.total == 0 || f.rate <= 0 || f.bytes >= f.total) return "";
  return std::to_string(static_cast<uint64_t>((f.total - f.bytes) / f.rate + 0.5)) + " s";
}

void PrintStatusJson(const Snapshot& s) {
  JsonValue names = JsonValue::array();
  for (const auto& [name, per_tier] : s.names) {
    JsonValue tiers = JsonValue::array();
    for (size_t k = 0; k < per_tier.size(); ++k) {
      const auto& n = per_tier[k];
      tiers.push_back({{"tier", k}, {"uri", s.uris[k]}, {"newest_step", n.any ? JsonValue(n.newest) : JsonValue()},
                       {"newest_safe_step", n.newest_safe ? JsonValue(*n.newest_safe) : JsonValue()},
                       {"safe_hosts", n.safe_hosts}, {"steps", n.steps}, {"damaged", n.damaged}});
    }
    names.push_back({{"name", name}, {"tiers", tiers}});
  }
  JsonValue in_flight = JsonValue::array();
  for (const auto& f : s.in_flight) {
    JsonValue j = {{"name", f.name}, {"step", f.step}, {"tier", f.tier}, {"uri", s.uris[f.tier]},
                   {"kind", f.kind}, {"bytes", f.bytes}};
    if (f.total) j["total_bytes"] = f.total;
    j["bytes_per_sec"] = f.rate;
    if (!Eta(f).empty()) j["eta_seconds"] = static_cast<double>(f.total - f.bytes) / f.rate;
    in_flight.push_back(std::move(j));
  }
  JsonValue out = {{"time", FormatTime(NowUnixMs())}};
  if (!s.error.empty()) {
    out["error"] = s.error;
    out["code"] = s.error_code;
  }
  out["tiers"] = s.uris;
  out["names"] = names;
  out["in_flight"] = in_flight;
  PrintJson(out);
}

void PrintText(const Snapshot& s) {
  std::printf("sluice status  %s\n",
              FormatTime(NowUnixMs()).c_str());
  if (!s.error.empty()) {
    std::printf("ERROR: %s\n", s.error.c_str());
    return;
  }
  if (s.names.empty()) std::printf("no checkpoints\n");
  if (!s.names.empty()) {
    std::printf("%-24s %-4s %-40s %20s %6s %8s  %s\n", "NAME", "TIER", "URI", "NEWEST", "STEPS", "DAMAGED", "SAFE");
  }
  for (const auto& [name, per_tier] : s.names) {
    for (size_t k = 0; k < per_tier.size(); ++k) {
      const auto& n = per_tier[k];
      std::string safe = "-";
      if (n.newest_safe) {
        safe = std::to_string(*n.newest_safe) + " on ";
        for (size_t h = 0; h < n.safe_hosts.size(); ++h) safe += (h ? "," : "") + n.safe_hosts[h];
      }
      std::printf("%-24s %-4zu %-40s %20s %6llu %8llu  %s\n", k == 0 ? name.c_str() : "", k, s.uris[k].c_str(),
                  n.any ? std::to_string(n.newest).c_str() : "-", static_cast<unsigned long long>(n.steps),
                  static_cast<unsigned long long>(n.damaged), safe.c_str());
    }
  }
  if (s.in_flight.empty()) {
    std::printf("nothing in flight\n");
    return;
  }
  std::printf("IN FLIGHT\n");
  for (const auto& f : s.in_flight) {
    std::string what = f.kind == "drain" ? "drain to tier " + std::to_string(f.tier) : "save on tier " + std::to_string(f.tier);
    std::string amount = f.total ? HumanBytes(f.bytes) + " of " + HumanBytes(f.total) : HumanBytes(f.bytes) + " so far";
    const std::string eta = Eta(f);
    std::printf("  %s  %s (%s)  %s  %s%s\n", CheckpointLabel(f.name, f.step).c_str(), what.c_str(),
                s.uris[f.tier].c_str(), amount.c_str(), HumanRate(f.rate).c_str(),
                eta.empty() ? "" : ("  ETA " + eta).c_str());
  }
}

}  // namespace

namespace {
volatile std::sig_atomic_t g_watch_stop = 0;
void OnWatchStop(int) { g_watch_stop = 1; }
}  // namespace

int CmdStatus(int argc, char** argv) {
  const CommandSpec spec = StatusSpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  std::string name;
  if (flags.Has("name")) {
    auto n = NameFromFlags(flags);
    if (!n.ok()) return Fail(n.status(), true);
    name = *n;
  }
  uint64_t interval_ms = 2000;
  if (auto v = flags.Get("interval")) {
    auto ms = ParseDurationMs(*v);
    if (!ms.ok() || *ms == 0) return Fail(Status::InvalidArgument("--interval must be a duration, e.g. 2s"), true);
    interval_ms = *ms;
  }
  auto popts = PipelineOptionsFromFlags(flags, false);
  if (!popts.ok()) return Fail(popts.status(), true);
  popts->staging_at_open = false;
  const bool json = flags.Has("json"), watch = flags.Has("watch");
  const bool redraw = watch && !json && isatty(STDOUT_FILENO) == 1;
  Snapshot before = Take(*popts, name);
  if (!watch) {
    // One refresh: a second sample after the interval gives flights a rate.
    if (!before.error.empty()) {
      if (json) PrintStatusJson(before);
      return Fail(Status::Unavailable(before.error));
    }
    Snapshot now = before;
    if (!before.in_flight.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<uint64_t>(interval_ms, 1000)));
      now = Take(*popts, name);
      Rates(now, before);
    }
    json ? PrintStatusJson(now) : PrintText(now);
    return kExitOk;
  }
  // Ends on SIGINT or SIGTERM with exit 0, as drain --watch does (doc/cli.md).
  std::signal(SIGINT, OnWatchStop);
  std::signal(SIGTERM, OnWatchStop);
  while (!g_watch_stop) {
    if (redraw) std::printf("\x1b[H\x1b[2J");
    json ? PrintStatusJson(before) : PrintText(before);
    std::fflush(stdout);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(interval_ms);
    while (!g_watch_stop && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (g_watch_stop) break;
    Snapshot now = Take(*popts, name);
    Rates(now, before);
    before = std::move(now);
  }
  return kExitOk;
}

}  // namespace sluice::cli
