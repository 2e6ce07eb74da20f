#include "checkpoint/rank_gatherer.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "checkpoint/writer_registry.h"
#include "format/commit_record.h"
#include "format/layout.h"
#include "format/limits.h"
#include "io/crc32c.h"

namespace sluice {
namespace {

constexpr uint32_t kPointersAhead = 2;

}  // namespace

RankGatherer::RankGatherer(Backend& backend, const CheckpointId& id, uint32_t world, std::string attempt,
                           RankManifest own)
    : backend_(backend), id_(id), world_(world), attempt_(std::move(attempt)), chosen_(world), pointers_(world) {
  chosen_[0] = std::move(own);
  for (auto& p : pointers_) p.end = kPointersAhead;
}

bool RankGatherer::AllChosen() const {
  return std::all_of(chosen_.begin(), chosen_.end(), [](const auto& c) { return c.has_value(); });
}

std::string RankGatherer::Missing() const {
  std::string missing;
  for (uint32_t r = 0; r < world_; ++r) {
    if (!chosen_[r]) missing += (missing.empty() ? "" : ",") + std::to_string(r);
  }
  return missing;
}

bool RankGatherer::Consider(const std::string& object, uint32_t rank) {
  if (rejected_.count(object) || (chosen_[rank] && chosen_[rank]->object == object)) return true;
  auto bytes = backend_.ReadSmall(object);
  if (!bytes.ok()) {
    if (!bytes.status().IsNotFound()) return false;
    rejected_.insert(object);  // withdrawn by its writer
    return true;
  }
  auto m = DecodeManifest(*bytes, "manifest " + object);
  if (!m.ok() || m->world != world_ || m->rank != rank || m->name != id_.name || m->step != id_.step ||
      m->attempt != attempt_) {
    rejected_.insert(object);
    return true;
  }
  // Only a writer that is still there (waiting for this commit) is part of
  // this save: a manifest whose writer crashed or gave up is a leftover of
  // an earlier attempt.
  auto state = WriterStateOf(backend_, id_.name, id_.step, m->writer_id);
  if (!state.ok()) return false;
  if (*state == WriterState::kGone) {
    rejected_.insert(object);
    return true;
  }
  // Several manifests for one rank: a crashed earlier attempt left one. The
  // newest is this attempt's.
  if (!chosen_[rank] || chosen_[rank]->manifest.created_unix_ms < m->created_unix_ms) {
    chosen_[rank] = RankManifest{object, bytes->size(), Crc32c(bytes->data(), bytes->size()), std::move(m).value()};
  }
  return true;
}

Result<RankGatherer::Round> RankGatherer::ProbeRound(bool missing_ranks_only) {
  Round round;
  std::vector<std::string> probe;
  std::map<std::string, std::pair<uint32_t, uint32_t>> pointer_of;  // name -> (rank, k)
  std::vector<uint32_t> probed_end(world_, 0);
  for (uint32_t r = 1; r < world_; ++r) {
    if (missing_ranks_only && chosen_[r]) continue;
    probed_end[r] = std::min(pointers_[r].end, limits::kMaxRankPointers);
    for (uint32_t k = pointers_[r].next; k < probed_end[r]; ++k) {
      if (pointers_[r].settled.count(k)) continue;
      std::string name = RankPointerObject(id_.name, id_.step, r, k);
      pointer_of[name] = {r, k};
      probe.push_back(std::move(name));
    }
  }
  if (probe.empty()) return round;
  ASSIGN_OR_RETURN(auto found, backend_.Stat(probe));
  std::sort(found.begin(), found.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.name < b.name; });
  for (const auto& o : found) {
    auto [rank, k] = pointer_of.at(o.name);
    RankPointers& p = pointers_[rank];
    p.end = std::max(p.end, k + 1 + kPointersAhead);
    auto target = backend_.ReadSmall(o.name);
    if (!target.ok()) {
      // Gone since the Stat: a hole now, probed again. Else ask again.
      if (!target.status().IsNotFound()) round.unresolved = true;
      continue;
    }
    auto parsed = ParseObjectName(*target);
    if (parsed && parsed->name == id_.name && parsed->step == id_.step &&
        RankOfManifest(parsed->rest) == std::optional<uint32_t>(rank) && !Consider(*target, rank)) {
      round.unresolved = true;
      continue;
    }
    p.settled.insert(k);  // not a manifest of this rank, or judged
  }
  for (uint32_t r = 1; r < world_; ++r) {
    RankPointers& p = pointers_[r];
    while (p.settled.count(p.next)) p.settled.erase(p.next++);
    if (probed_end[r] > 0 && std::min(p.end, limits::kMaxRankPointers) > probed_end[r]) round.extended = true;
  }
  return round;
}

Result<bool> RankGatherer::Gather() {
  if (world_ == 1) return true;  // a save of one rank has nothing to gather
  // While ranks are missing, only theirs are probed: one Stat per round.
  Round round;
  do {
    ASSIGN_OR_RETURN(round, ProbeRound(true));
  } while (round.extended);
  if (!AllChosen()) return false;
  // Every rank has a manifest: every rank's pointers are read to their end
  // before committing.
  do {
    ASSIGN_OR_RETURN(round, ProbeRound(false));
    if (round.unresolved) return false;  // judged on the next round
  } while (round.extended);
  return AllChosen();
}

Result<CommitPlan> RankGatherer::Plan(const std::string& label, int64_t created_unix_ms) const {
  std::unordered_set<std::string_view> all_keys;
  for (uint32_t r = 0; r < world_; ++r) {
    for (const auto& it : chosen_[r]->manifest.items) {
      if (!all_keys.insert(it.key).second) {
        return Status::InvalidArgument("item key '" + it.key + "' is saved by more than one rank");
      }
    }
  }
  CommitRecord rec;
  rec.name = id_.name;
  rec.step = id_.step;
  rec.world = world_;
  rec.created_unix_ms = created_unix_ms;
  CommitPlan plan;
  plan.label = label;
  plan.commit_object = CommitObject(id_.name, id_.step);
  for (uint32_t r = 0; r < world_; ++r) {
    const RankManifest& c = *chosen_[r];
    const std::string owner = "rank " + std::to_string(r);
    plan.objects.push_back(CommitPlan::Named{c.object, c.bytes, owner});
    for (const auto& obj : c.manifest.objects) plan.objects.push_back(CommitPlan::Named{obj.name, obj.size, owner});
    rec.ranks.push_back(
        CommittedRank{r, c.object, c.bytes, c.crc, c.manifest.items.size(), c.manifest.TotalBytes()});
  }
  plan.commit_bytes = EncodeCommitRecord(rec);
  return plan;
}

}  // namespace sluice
