// sluice ls: committed (and with --all, incomplete) checkpoints.
#include <cstdio>

#include "output.h"
#include "store_flags.h"

namespace sluice::cli {

CommandSpec LsSpec() {
  CommandSpec spec;
  spec.name = "ls";
  spec.usage = "ls (--store URI | --tier URI...) [--name NAME [--step N]] [--all | --backlog] [--json]";
  spec.summary =
      "Lists committed checkpoints: name, step, bytes, ranks, items, creation time,\n"
      "and with several --tier the state on each tier: committed, draining, pending\n"
      "(an earlier tier has it, this one not yet), failed (the last drain failed, with\n"
      "the reason), superseded (that tier fell behind and its backlog policy drains a\n"
      "newer step there instead), absent (not held, e.g. beyond its --keep-last),\n"
      "part (this host's ranks of a multi-rank checkpoint saved with --tier0-per-host,\n"
      "committed on a shared tier), damaged (a commit record is there but the copy\n"
      "does not verify: sluice scrub repairs it). A step damaged on its only tier is\n"
      "listed as DAMAGED, never hidden. --json adds each copy's last scrub\n"
      "(last_scrub, last_scrub_result, last_scrub_detail) and a part's part_ranks.\n"
      "With several --tier, each later tier's backlog follows the table (when there\n"
      "is one): steps committed on an earlier tier and due there, with their bytes.\n"
      "With --name and --step, only that step, found by name on each tier without\n"
      "listing the store (the same cost at step 10 as at step 10,000): committed,\n"
      "damaged or absent there.";
  spec.flags = StoreFlagSpecs(false);
  spec.flags.insert(spec.flags.end(), {
      {"name", "NAME", "only checkpoints of this name"},
      {"step", "N", "with --name: only this step, looked up by name on each tier"},
      {"all", "", "also list incomplete checkpoints (no valid commit record), marked so"},
      {"keep-last", "TIER=K", "as given to save/drain, so steps beyond it show as absent", true},
      BacklogPolicyFlagSpec(),
      {"backlog", "", "print only each tier's backlog: steps pending, draining or failed\n"
                      "                            there, their bytes, and steps superseded there"},
      {"json", "", "print a JSON array, one object per checkpoint"},
  });
  return spec;
}

namespace {

using Incomplete = std::vector<std::pair<size_t, CheckpointInfo>>;

int PrintBacklog(const Flags& flags, const std::vector<TierBacklog>& backlog) {
  if (flags.Has("json")) {
    JsonValue out = JsonValue::array();
    for (size_t k = 0; k < backlog.size(); ++k) {
      out.push_back({{"tier", k}, {"uri", backlog[k].uri}, {"steps", backlog[k].steps},
                     {"bytes", backlog[k].bytes}, {"superseded", backlog[k].superseded}});
    }
    PrintJson(out);
    return kExitOk;
  }
  std::printf("%-4s %8s %12s %10s  %s\n", "TIER", "BACKLOG", "BYTES", "SUPERSEDED", "URI");
  for (size_t k = 0; k < backlog.size(); ++k) {
    std::printf("%-4zu %8llu %12s %10llu  %s\n", k, static_cast<unsigned long long>(backlog[k].steps),
                HumanBytes(backlog[k].bytes).c_str(), static_cast<unsigned long long>(backlog[k].superseded),
                backlog[k].uri.c_str());
  }
  return kExitOk;
}

JsonValue InfoJson(const CheckpointInfo& c) {
  JsonValue j{{"name", c.name}, {"step", c.step}, {"bytes", c.bytes},
              {"own_bytes", c.bytes - std::min(c.bytes, c.referenced_bytes)},
              {"referenced_bytes", c.referenced_bytes}, {"ranks", c.ranks},
              {"items", c.items}, {"created", FormatTime(c.created_unix_ms)},
              {"created_unix_ms", c.created_unix_ms}};
  if (!c.part_ranks.empty()) {
    JsonValue ranks = JsonValue::array();
    for (uint32_t r : c.part_ranks) ranks.push_back(r);
    j["part_ranks"] = std::move(ranks);
  }
  if (!c.safe_hosts.empty()) j["safe_hosts"] = c.safe_hosts;
  return j;
}

void PrintListingJson(const std::vector<TieredCheckpointInfo>& tiered, const Incomplete& incomplete) {
  JsonValue out = JsonValue::array();
  for (const auto& t : tiered) {
    JsonValue j = InfoJson(t.info);
    j["complete"] = t.info.complete;
    if (t.info.damaged) {
      j["damaged"] = true;
      j["problem"] = t.info.problem;
    }
    JsonValue& tiers = j["tiers"] = JsonValue::array();
    for (const auto& tc : t.tiers) {
      JsonValue tj = {{"uri", tc.uri}, {"state", tc.state}};
      if (!tc.reason.empty()) tj["reason"] = tc.reason;
      if (tc.scrubbed_unix_ms != 0) {
        tj["last_scrub"] = FormatTime(tc.scrubbed_unix_ms);
        tj["last_scrub_unix_ms"] = tc.scrubbed_unix_ms;
        tj["last_scrub_result"] = tc.scrub_result;
        if (!tc.scrub_detail.empty()) tj["last_scrub_detail"] = tc.scrub_detail;
      }
      tiers.push_back(std::move(tj));
    }
    out.push_back(std::move(j));
  }
  for (const auto& [k, c] : incomplete) {
    JsonValue j = InfoJson(c);
    j["complete"] = false;
    j["problem"] = c.problem;
    j["tier"] = k;
    out.push_back(std::move(j));
  }
  PrintJson(out);
}

void PrintListingText(const std::vector<TieredCheckpointInfo>& tiered, const Incomplete& incomplete, bool several,
                      const std::vector<TierBacklog>& backlog) {
  // SHARED: bytes kept in earlier steps' objects; NEW: what this step wrote.
  std::printf("%-24s %10s %12s %12s %12s %6s %8s  %-20s  %s\n", "NAME", "STEP", "BYTES", "SHARED", "NEW", "RANKS",
              "ITEMS", "CREATED", several ? "TIERS" : "STATE");
  for (const auto& t : tiered) {
    const auto& c = t.info;
    std::string state;
    if (!several) {
      state = c.damaged ? "DAMAGED: " + c.problem
              : !c.part_ranks.empty() ? "part: " + t.tiers[0].reason + " (committed on a shared tier)"
                                      : "committed";
    } else {
      for (size_t k = 0; k < t.tiers.size(); ++k) {
        if (k) state += "  ";
        const auto& tc = t.tiers[k];
        state += std::to_string(k) + ":" + (tc.state == "damaged" ? "DAMAGED" : tc.state);
        if (!tc.reason.empty() && (tc.state == "failed" || tc.state == "damaged" || tc.state == "part")) {
          state += " (" + tc.reason + ")";
        }
      }
    }
    std::printf("%-24s %10llu %12s %12s %12s %6u %8s  %-20s  %s\n", c.name.c_str(),
                static_cast<unsigned long long>(c.step), HumanBytes(c.bytes).c_str(),
                c.referenced_bytes > 0 ? HumanBytes(c.referenced_bytes).c_str() : "-",
                HumanBytes(c.bytes - std::min(c.bytes, c.referenced_bytes)).c_str(), c.ranks,
                std::to_string(c.items).c_str(), FormatTime(c.created_unix_ms).c_str(), state.c_str());
  }
  for (const auto& [k, c] : incomplete) {
    std::string state = (several ? "tier " + std::to_string(k) + " " : std::string()) + "INCOMPLETE: " + c.problem;
    std::printf("%-24s %10llu %12s %12s %12s %6u %8s  %-20s  %s\n", c.name.c_str(),
                static_cast<unsigned long long>(c.step), HumanBytes(c.bytes).c_str(), "-", "-", c.ranks, "-",
                FormatTime(c.created_unix_ms).c_str(), state.c_str());
  }
  for (size_t k = 1; k < backlog.size(); ++k) {
    if (backlog[k].steps == 0 && backlog[k].superseded == 0) continue;
    std::printf("tier %zu backlog: %llu step(s), %s not yet drained there; %llu superseded (%s)\n", k,
                static_cast<unsigned long long>(backlog[k].steps), HumanBytes(backlog[k].bytes).c_str(),
                static_cast<unsigned long long>(backlog[k].superseded), backlog[k].uri.c_str());
  }
}

// ls --name N --step S: the step opened by name on each tier, no listing.
int ListOneStep(const Flags& flags, Pipeline& pipeline, const std::string& name) {
  uint64_t step = 0;
  const std::string text = flags.Get("step").value_or("");
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 19) {
    return Fail(Status::InvalidArgument("--step '" + text + "' is not a step number (e.g. --step 1000)"), true);
  }
  step = std::stoull(text);
  TieredCheckpointInfo t;
  bool found = false;
  for (size_t k = 0; k < pipeline.tier_count(); ++k) {
    TierCopy c;
    c.uri = pipeline.tier(k).backend().uri();
    auto reader = pipeline.tier(k).OpenCheckpoint(name, step);
    if (reader.ok()) {
      c.state = "committed";
      if (!found) t.info = (*reader)->info();
      found = true;
    } else if (reader.status().IsNotFound()) {
      c.state = "absent";
    } else {
      c.state = "damaged";
      c.reason = reader.status().message();
      if (!found && t.info.name.empty()) {
        t.info.name = name;
        t.info.step = step;
        t.info.damaged = true;
        t.info.problem = c.reason;
      }
    }
    t.tiers.push_back(std::move(c));
  }
  if (!found && t.info.name.empty()) {
    return Fail(Status::NotFound("checkpoint " + name + "@" + std::to_string(step) + " is on no tier"));
  }
  if (found) t.info.complete = true;
  if (flags.Has("json")) {
    PrintListingJson({t}, {});
  } else {
    PrintListingText({t}, {}, pipeline.tier_count() > 1, {});
  }
  return kExitOk;
}

}  // namespace

int CmdLs(int argc, char** argv) {
  const CommandSpec spec = LsSpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  auto named = OptionalNameFromFlags(flags);
  if (!named.ok()) return Fail(named.status(), true);
  const std::string name = *named;
  auto popts = PipelineOptionsFromFlags(flags, false);
  if (!popts.ok()) return Fail(popts.status(), true);
  if (flags.Has("step") && (!flags.Has("name") || flags.Has("all") || flags.Has("backlog"))) {
    return Fail(Status::InvalidArgument("--step needs --name and goes with neither --all nor --backlog "
                                        "(e.g. ls --store DIR --name llama --step 1000)"),
                true);
  }
  auto pipeline = Pipeline::Open(*popts);
  if (!pipeline.ok()) return FailStoreOpen(pipeline.status());
  if (flags.Has("step")) return ListOneStep(flags, **pipeline, name);
  auto tiered = (*pipeline)->List(name);
  if (!tiered.ok()) return Fail(tiered.status());
  // Incomplete checkpoints are per tier (each tier's own leftovers).
  Incomplete incomplete;
  if (flags.Has("all")) {
    for (size_t k = 0; k < (*pipeline)->tier_count(); ++k) {
      auto list = (*pipeline)->tier(k).List(name, true);
      if (!list.ok()) {
        if (k == 0) return Fail(list.status());
        continue;
      }
      for (auto& c : *list) {
        if (!c.complete && !c.damaged && c.part_ranks.empty()) incomplete.push_back({k, std::move(c)});
      }
    }
  }
  std::vector<std::string> uris;
  for (const auto& t : popts->tiers) uris.push_back(t.uri);
  const std::vector<TierBacklog> backlog = BacklogOf(*tiered, uris);
  if (flags.Has("backlog")) {
    if (flags.Has("all")) return Fail(Status::InvalidArgument("--backlog and --all do not go together"), true);
    return PrintBacklog(flags, backlog);
  }
  if (flags.Has("json")) {
    PrintListingJson(*tiered, incomplete);
    return kExitOk;
  }
  if (tiered->empty() && incomplete.empty()) {
    std::printf("no checkpoints%s\n", flags.Has("all") ? "" : " (--all also shows incomplete ones)");
    return kExitOk;
  }
  PrintListingText(*tiered, incomplete, (*pipeline)->tier_count() > 1, backlog);
  return kExitOk;
}

}  // namespace sluice::cli
