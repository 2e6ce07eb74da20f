#include "pipeline/retention.h"

#include <algorithm>
#include <optional>

#include "format/layout.h"
#include "pipeline/tier_listing.h"

namespace sluice {

Retention::Retention(std::vector<Store*> stores, std::vector<TierOptions> tiers, bool tier0_per_host, Hooks hooks)
    : stores_(std::move(stores)), tiers_(std::move(tiers)), tier0_per_host_(tier0_per_host), hooks_(std::move(hooks)) {}

Retention::~Retention() { Stop(); }

void Retention::Start() { thread_ = std::thread([this] { Loop(); }); }

void Retention::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Retention::Due(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    due_.insert(name);
  }
  cv_.notify_all();
}

void Retention::Loop() {
  for (;;) {
    std::string name;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !due_.empty(); });
      if (stop_) return;
      name = *due_.begin();
      due_.erase(due_.begin());
    }
    Apply(name);
  }
}

std::vector<TierPlan> Retention::Plan(const std::string& name, bool* unreachable) {
  return PlanTiersOf(stores_, tiers_, name, unreachable, hooks_.draining(name));
}

uint64_t Retention::Apply(const std::string& name) {
  std::lock_guard<std::mutex> lock(apply_mu_);
  uint64_t removed = 0;
  // With a per-host tier 0, every rank's pipeline prunes its own parts,
  // listing its tier 0 alone; the shared tiers are rank 0's to prune (or
  // a pipeline's that saved no rank of the name: `sluice drain`).
  if (tier0_per_host_) {
    removed += PruneParts(name);
    if (stores_.size() == 1 || hooks_.leaves_shared_tiers(name)) return removed;
  }
  // Where every tier keeps every step there is nothing to remove (a step
  // leaves a tier only past its keep_last): no listing (it may wait on every
  // placement of the store, a slow one's too, and a pipeline's close waits
  // for it).
  if (std::all_of(tiers_.begin(), tiers_.end(), [](const TierOptions& t) { return t.keep_last == 0; })) {
    return removed;
  }
  // While any tier cannot be listed, what it holds is unknown: remove
  // nothing anywhere.
  bool unreachable = false;
  auto plans = Plan(name, &unreachable);
  if (unreachable) return 0;
  for (size_t k = 0; k < stores_.size(); ++k) {
    for (uint64_t step : plans[k].to_remove) {
      if (stores_[k]->Remove({name, step}).ok()) ++removed;
    }
  }
  return removed;
}

// Each host's own parts of `name` beyond tier 0's keep_last, newest kept:
// removed whatever their state. A part is no use without the shared
// tier's commit, so tier 0 never keeps one as a last copy; but for the
// newest safe step (a peer commit, doc/peer.md), which may be the newest
// step that survives a lost host: it stays until a newer one is safe.
uint64_t Retention::PruneParts(const std::string& name) {
  const uint32_t keep = tiers_[0].keep_last;
  if (keep == 0) return 0;
  auto listed = stores_[0]->List(name, true);
  if (!listed.ok()) return 0;
  std::vector<uint64_t> parts;
  std::optional<uint64_t> newest_safe;
  for (const auto& c : *listed) {
    if (!c.part_ranks.empty() || (c.damaged && PartRecordsIn(name, c.step))) parts.push_back(c.step);
    if (!c.safe_hosts.empty() && !c.damaged) newest_safe = std::max(newest_safe.value_or(0), c.step);
  }
  std::sort(parts.rbegin(), parts.rend());
  uint64_t removed = 0;
  for (size_t i = keep; i < parts.size(); ++i) {
    if (newest_safe == parts[i]) continue;
    if (stores_[0]->Remove({name, parts[i]}).ok()) ++removed;
  }
  return removed;
}

bool Retention::PartRecordsIn(const std::string& name, uint64_t step) {
  auto listed = stores_[0]->backend().List(PartPrefix(name, step));
  return listed.ok() && !listed->empty();
}

}  // namespace sluice
