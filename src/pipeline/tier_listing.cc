#include "pipeline/tier_listing.h"

#include <algorithm>
#include <map>
#include <utility>

#include "checkpoint/catalog.h"
#include "pipeline/scrub.h"

namespace sluice {

Result<std::set<std::string>> NamesOnAnyTier(const std::vector<Store*>& stores, std::string_view name) {
  std::set<std::string> names;
  if (!name.empty()) {
    names.insert(std::string(name));
    return names;
  }
  Status first;
  for (Store* s : stores) {
    auto listed = s->List("", false);
    if (!listed.ok()) {
      if (first.ok()) first = listed.status();
      continue;
    }
    for (const auto& i : *listed) names.insert(i.name);
  }
  if (names.empty() && !first.ok()) return first;
  return names;
}

std::vector<TierPlan> PlanTiersOf(const std::vector<Store*>& stores, const std::vector<TierOptions>& tiers,
                                  const std::string& name, bool* unreachable,
                                  const std::vector<std::set<uint64_t>>& draining) {
  std::vector<std::set<uint64_t>> committed(stores.size());
  std::vector<std::set<uint64_t>> writing(stores.size());
  for (size_t k = 0; k < stores.size(); ++k) {
    auto listed = stores[k]->List(name, true);
    if (!listed.ok()) {
      if (unreachable != nullptr) *unreachable = true;
      continue;
    }
    // A host's part counts as its tier's copy: retention prunes it.
    for (const auto& i : *listed) {
      if (i.complete || (!i.part_ranks.empty() && !i.damaged)) committed[k].insert(i.step);
      if (i.writing) writing[k].insert(i.step);
    }
  }
  auto plans = PlanTiers(committed, tiers, draining);
  // A step another process is draining into a tier right now (its writer
  // lock is there) is not superseded: its source stays.
  std::vector<std::set<uint64_t>> held = draining;
  held.resize(stores.size());
  bool more = false;
  for (size_t k = 1; k < stores.size(); ++k) {
    for (uint64_t s : plans[k].superseded) {
      if (writing[k].count(s)) more = held[k].insert(s).second || more;
    }
  }
  return more ? PlanTiers(committed, tiers, held) : plans;
}

Result<std::vector<TieredCheckpointInfo>> ListTiered(const std::vector<Store*>& stores,
                                                     const std::vector<TierOptions>& tiers,
                                                     std::string_view name) {
  const size_t n = stores.size();
  std::vector<std::map<std::pair<std::string, uint64_t>, CheckpointInfo>> per_tier(n);
  std::vector<Status> tier_error(n);
  std::vector<std::map<std::pair<std::string, uint64_t>, ScrubEntry>> scrubbed(n);
  std::set<std::pair<std::string, uint64_t>> all;
  // Steps a writer is in (a drain into that tier), from the same walk.
  std::vector<std::set<std::pair<std::string, uint64_t>>> writing(n);
  for (size_t k = 0; k < n; ++k) {
    auto listed = stores[k]->List(name, true);
    if (!listed.ok()) {
      tier_error[k] = listed.status();
      continue;
    }
    for (auto& e : ReadScrubStatus(stores[k]->backend()).entries) scrubbed[k][{e.name, e.step}] = std::move(e);
    for (auto& info : *listed) {
      if (!info.complete && !info.damaged && info.part_ranks.empty()) {
        if (info.writing) writing[k].insert({info.name, info.step});
        continue;  // incomplete: not a copy
      }
      all.insert({info.name, info.step});
      per_tier[k][{info.name, info.step}] = std::move(info);
    }
  }
  // Steps a tier is not meant to hold (retention) are "absent", not pending.
  std::map<std::string, std::vector<TierPlan>> plans;
  std::vector<TieredCheckpointInfo> out;
  for (const auto& key : all) {
    if (!plans.count(key.first)) {
      std::vector<std::set<uint64_t>> committed(n);
      for (size_t k = 0; k < n; ++k) {
        for (const auto& [kk, info] : per_tier[k]) {
          if (kk.first == key.first && (info.complete || (!info.part_ranks.empty() && !info.damaged))) {
            committed[k].insert(kk.second);
          }
        }
      }
      plans[key.first] = PlanTiers(committed, tiers);
    }
    TieredCheckpointInfo t;
    int source = -1;
    for (size_t k = 0; k < n; ++k) {
      TierCopy c;
      c.uri = tiers[k].uri;
      auto it = per_tier[k].find(key);
      if (auto sc = scrubbed[k].find(key); sc != scrubbed[k].end()) {
        c.scrubbed_unix_ms = sc->second.unix_ms;
        c.scrub_result = sc->second.state;
        c.scrub_detail = sc->second.detail;
      }
      if (it != per_tier[k].end() && it->second.damaged) {
        c.state = "damaged";
        c.reason = it->second.problem;
      } else if (it != per_tier[k].end() && !it->second.part_ranks.empty()) {
        // This host's ranks of a checkpoint committed on a shared tier.
        c.state = "part";
        c.reason = "rank" + std::string(it->second.part_ranks.size() > 1 ? "s " : " ");
        for (size_t i = 0; i < it->second.part_ranks.size(); ++i) {
          c.reason += (i ? "," : "") + std::to_string(it->second.part_ranks[i]);
        }
        c.reason += " of " + std::to_string(it->second.ranks) + " held here";
        c.safe_hosts = it->second.safe_hosts;
        for (size_t i = 0; i < c.safe_hosts.size(); ++i) {
          c.reason += (i ? "," : "; safe: peer commit on ") + c.safe_hosts[i];
        }
      } else if (it != per_tier[k].end()) {
        c.state = "committed";
        if (source < 0) {
          source = static_cast<int>(k);
          t.info = it->second;
        }
      } else if (!tier_error[k].ok()) {
        // What the tier holds is unknown, but a superseded step will not be
        // drained there whatever it holds.
        const bool superseded = source >= 0 && plans[key.first][k].superseded.count(key.second);
        c.state = superseded ? "superseded" : source >= 0 ? "failed" : "absent";
        c.reason = "cannot list the tier: " + tier_error[k].ToString();
      } else if (source < 0) {
        c.state = "absent";
      } else if (!plans[key.first][k].keep.count(key.second)) {
        c.state = "absent";
        c.reason = "beyond keep-last " + std::to_string(tiers[k].keep_last);
      } else if (writing[k].count(key)) {
        c.state = "draining";
      } else if (plans[key.first][k].superseded.count(key.second)) {
        c.state = "superseded";
        c.reason = "a newer step drains there instead (backlog policy coalesce)";
      } else {
        std::string reason = ReadDrainNote(stores[source]->backend(), key.first, key.second, c.uri);
        c.state = reason.empty() ? "pending" : "failed";
        c.reason = reason;
      }
      // A scrub's verdict is of a copy: none where the tier holds none.
      if (c.state != "committed" && c.state != "damaged" && c.state != "part") {
        c.scrubbed_unix_ms = 0;
        c.scrub_result.clear();
        c.scrub_detail.clear();
      }
      t.tiers.push_back(std::move(c));
    }
    if (source < 0) {
      // Damaged on every tier that holds it, or held only as parts (the
      // shared tier cannot be listed): shown from the first such copy.
      for (size_t k = 0; k < n && source < 0; ++k) {
        auto it = per_tier[k].find(key);
        if (it == per_tier[k].end()) continue;
        source = static_cast<int>(k);
        t.info = it->second;
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<TierBacklog> BacklogOf(const std::vector<TieredCheckpointInfo>& listing,
                                   const std::vector<std::string>& uris) {
  std::vector<TierBacklog> out(uris.size());
  for (size_t k = 0; k < uris.size(); ++k) out[k].uri = uris[k];
  for (const auto& t : listing) {
    for (size_t k = 0; k < t.tiers.size() && k < out.size(); ++k) {
      const std::string& state = t.tiers[k].state;
      if (state == "pending" || state == "draining" || state == "failed") {
        ++out[k].steps;
        out[k].bytes += t.info.bytes - std::min(t.info.bytes, t.info.referenced_bytes);
      } else if (state == "superseded") {
        ++out[k].superseded;
      }
    }
  }
  return out;
}

std::string BacklogOverLimit(const std::vector<TierBacklog>& now, uint32_t max_steps, uint64_t max_bytes) {
  if (max_steps == 0 && max_bytes == 0) return "";
  for (size_t k = 1; k < now.size(); ++k) {
    const bool steps = max_steps != 0 && now[k].steps >= max_steps;
    const bool bytes = max_bytes != 0 && now[k].bytes >= max_bytes;
    if (!steps && !bytes) continue;
    std::string limit = steps ? std::to_string(max_steps) + " steps" : std::to_string(max_bytes) + " bytes";
    return "tier " + std::to_string(k) + " (" + now[k].uri + ") has a backlog of " + std::to_string(now[k].steps) +
           " step(s), " + std::to_string(now[k].bytes) + " bytes, not yet drained there (limit " + limit + ")";
  }
  return "";
}

}  // namespace sluice
