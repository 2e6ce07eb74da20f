#include "pipeline/drain.h"

#include "format/layout.h"

namespace sluice {

void WriteDrainNote(Backend& src, const std::string& name, uint64_t step, const std::string& dst_uri,
                    const std::string& reason) {
  const std::string obj = DrainNoteObject(name, step, dst_uri);
  std::string body = dst_uri + "\n" + reason;
  if (body.size() > 4096) body.resize(4096);
  (void)src.Remove(obj);
  (void)src.PublishIfAbsent(obj, body);
}

void ClearDrainNote(Backend& src, const std::string& name, uint64_t step, const std::string& dst_uri) {
  (void)src.Remove(DrainNoteObject(name, step, dst_uri));
}

std::string ReadDrainNote(Backend& src, const std::string& name, uint64_t step,
                          const std::string& dst_uri) {
  auto body = src.ReadSmall(DrainNoteObject(name, step, dst_uri));
  if (!body.ok()) return "";
  size_t nl = body->find('\n');
  // The note names its tier: a hash collision or a stale note of another
  // URI is ignored.
  if (nl == std::string::npos || body->substr(0, nl) != dst_uri) return "";
  std::string reason = body->substr(nl + 1);
  return reason.empty() ? "drain failed" : reason;
}

std::vector<TierPlan> PlanTiers(const std::vector<std::set<uint64_t>>& committed,
                                const std::vector<TierOptions>& tiers,
                                const std::vector<std::set<uint64_t>>& draining) {
  const size_t n = committed.size();
  std::vector<TierPlan> plans(n);
  std::set<uint64_t> seen;  // committed on this tier or an earlier one
  for (size_t k = 0; k < n; ++k) {
    seen.insert(committed[k].begin(), committed[k].end());
    TierPlan& p = plans[k];
    const uint32_t keep = k < tiers.size() ? tiers[k].keep_last : 0;
    for (auto it = seen.rbegin(); it != seen.rend(); ++it) {
      if (keep != 0 && p.keep.size() >= keep) break;
      p.keep.insert(*it);
    }
    if (k == 0) continue;
    std::set<uint64_t> waiting;
    for (uint64_t s : p.keep) {
      if (!committed[k].count(s)) waiting.insert(s);
    }
    const bool coalesce = k >= tiers.size() || tiers[k].backlog == BacklogPolicy::kCoalesce;
    if (!coalesce || waiting.empty()) {
      p.to_drain = std::move(waiting);
      continue;
    }
    // The newest step this tier waits for, or holds as an earlier tier
    // does; every older waiting one is superseded by it, except one being
    // drained now. A step only this tier holds (from an earlier run, before
    // a rollback) supersedes nothing: the new run's steps still go there.
    uint64_t newest = *waiting.rbegin();
    for (auto it = committed[k].rbegin(); it != committed[k].rend(); ++it) {
      if (*it <= newest) break;
      bool earlier = false;
      for (size_t j = 0; j < k && !earlier; ++j) earlier = committed[j].count(*it) > 0;
      if (earlier) {
        newest = *it;
        break;
      }
    }
    const std::set<uint64_t>* now = k < draining.size() ? &draining[k] : nullptr;
    for (uint64_t s : waiting) {
      if (s == newest || (now != nullptr && now->count(s))) {
        p.to_drain.insert(s);
      } else {
        p.superseded.insert(s);
      }
    }
  }
  for (size_t k = 0; k < n; ++k) {
    TierPlan& p = plans[k];
    for (uint64_t s : committed[k]) {
      if (p.keep.count(s)) continue;
      // Never the only copy: a step leaves a tier once every later tier that
      // wants it has it, or superseded it there (the last tier's keep_last
      // is final).
      bool later = true;
      for (size_t j = k + 1; j < n; ++j) {
        if (plans[j].keep.count(s) && !committed[j].count(s) && !plans[j].superseded.count(s)) later = false;
      }
      if (later) p.to_remove.insert(s);
    }
  }
  return plans;
}

}  // namespace sluice
