#include "checkpoint/step_removal.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_set>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/latest_hint.h"
#include "checkpoint/store_walk.h"
#include "format/commit_record.h"
#include "format/layout.h"

namespace sluice {
namespace {

// What the steps of `name` still need, asked after a commit record went (or
// before objects of an uncommitted step are swept): the data objects
// committed manifests name, and the steps live writers' refs records name
// (references.h). `all`: something could not be read, so nothing may be
// assumed unneeded.
struct StillNeeded {
  bool all = false;
  std::unordered_set<std::string> objects;
  std::set<uint64_t> steps;
  bool Keeps(const ObjectInfo& o, uint64_t step) const {
    return all || steps.count(step) || objects.count(o.name);
  }
};

// Refs records first, then commit records: a writer that finished after its
// refs record was looked for has published its commit by the time commits
// are listed. So each round reads the refs records of the walk before, then
// walks again for the commits. That is repeated until a round finds no new
// commit, so that a step committed (and perhaps removed again) between two
// looks is seen by one of them; a store that keeps committing through four
// rounds keeps everything this time. `walked`: a walk of the name made
// before the question was asked (its refs records are read first).
Result<StillNeeded> FindStillNeeded(Backend& backend, const std::string& name, Steps walked) {
  StillNeeded need;
  std::set<uint64_t> seen;
  for (int round = 0; round < 4; ++round) {
    const std::map<std::string, LiveRefs> refs = LiveRefsOf(backend, walked);
    if (auto it = refs.find(name); it != refs.end()) {
      need.all = need.all || it->second.all;
      need.steps.insert(it->second.steps.begin(), it->second.steps.end());
    }
    ASSIGN_OR_RETURN(walked, WalkSteps(backend, name));
    bool fresh = false;
    for (const auto& [key, s] : walked) {
      if (!s.has_commit || key.first != name || seen.count(key.second)) continue;
      auto loaded = LoadCheckpoint(backend, name, key.second);
      // Removed meanwhile, or a claim not sealed yet: looked at again in
      // the next round, where it may be a commit.
      if (!loaded.ok() && loaded.status().IsNotFound()) continue;
      seen.insert(key.second);
      fresh = true;
      if (!loaded.ok()) {
        need.all = true;  // a damaged step may name anything
        continue;
      }
      for (const auto& m : loaded->manifests) {
        for (const auto& d : m.objects) need.objects.insert(d.name);
      }
    }
    if (round > 0 && !fresh) return need;
  }
  need.all = true;
  return need;
}

bool IsRecordOf(const CheckpointId& id, const std::string& object) {
  return object == CommitObject(id.name, id.step) || object.rfind(PartPrefix(id.name, id.step), 0) == 0 ||
         object.rfind(SealPrefix(id.name, id.step), 0) == 0;
}

// Hides the step: its seals, its commit record (a claim fenced first), its
// part records and the latest-step hints naming it go, so that it is
// invisible from then on and an interruption leaves only garbage for gc.
// `listed`: the step's objects, listed before its writers were asked about.
Status HideStep(Backend& backend, const CheckpointId& id, const std::vector<ObjectInfo>& listed) {
  // The commit record goes first: from then on the checkpoint is invisible,
  // and an interruption leaves only garbage for gc. Where `COMMIT` holds a
  // claim, its seals go before it (a seal whose claim is gone is garbage,
  // and a claim whose seal is gone an uncommitted step, but a seal found
  // means its claim was there when it was read: references.cc relies on
  // that).
  // So do part records (parts.h): the part is then no longer restorable here.
  const std::string commit = CommitObject(id.name, id.step);
  const std::string seals = SealPrefix(id.name, id.step);
  auto is_record = [&](const std::string& o) { return IsRecordOf(id, o); };
  bool commit_gone = false;  // since the listing: not removed by name (a claim made since would go)
  auto remove_records = [&](bool seal_pass) -> Status {
    for (const auto& o : listed) {
      if (commit_gone && o.name == commit) continue;
      if (is_record(o.name) && (o.name.rfind(seals, 0) == 0) == seal_pass) {
        Status st = backend.Remove(o.name);
        if (!st.ok() && !st.IsNotFound()) return st;
      }
    }
    return Status::OK();
  };
  RETURN_IF_ERROR(remove_records(true));
  // A claim at COMMIT is fenced before it goes: a writer of the step that
  // found it (its claimant died) may be sealing it, and a seal made after
  // the listing goes too. (Only a COMMIT listed is removed at all: one
  // made since belongs to a save that registered after the check above.)
  std::string fence;
  const bool commit_listed =
      std::any_of(listed.begin(), listed.end(), [&](const ObjectInfo& o) { return o.name == commit; });
  for (int attempt = 0; commit_listed; ++attempt) {
    auto fenced = FenceUnsealedClaim(backend, id.name, id.step);
    if (fenced.ok()) {
      fence = std::move(fenced).value();
      break;
    }
    if (fenced.status().IsNotFound()) {
      commit_gone = true;
      break;
    }
    if (!fenced.status().IsAlreadyExists()) return fenced.status().WithContext(CheckpointLabel(id.name, id.step));
    auto bytes = backend.ReadSmall(commit);
    if (!bytes.ok()) {
      if (!bytes.status().IsNotFound()) return bytes.status().WithContext(CheckpointLabel(id.name, id.step));
      commit_gone = true;
      break;
    }
    if (!IsCommitClaim(*bytes)) break;  // a record: removed below
    auto claim = DecodeClaimOf(id.name, id.step, *bytes);
    if (!claim.ok()) break;
    // Sealed since the listing. By a writer still running (it registered
    // after the check above): its commit is final, and this rm refuses.
    // By one that has finished: a committed step, removed as any other,
    // its seal first.
    if (AnyLiveWriter(backend, id.name, id.step)) {
      return Status::Unavailable(CheckpointLabel(id.name, id.step) +
                                 " was committed by a save still running; not removing it");
    }
    if (attempt == 3) {
      return Status::Unavailable(CheckpointLabel(id.name, id.step) + " is being committed again right now; not removing it");
    }
    Status st = backend.Remove(claim->seal);
    if (!st.ok() && !st.IsNotFound()) return st;
  }
  RETURN_IF_ERROR(remove_records(false));
  if (!fence.empty()) (void)backend.Remove(fence);
  // A latest-step hint naming it goes too (it is a hint: a save that finds
  // it stale lists instead, so a failure here is no error).
  RemoveLatestHintsNaming(backend, id.name, id.step);
  return Status::OK();
}

// Removes what the hidden steps (step -> its objects as listed) held besides
// their records, unless a step still names it or a live writer's refs
// record protects its step; then what earlier removals kept because a step
// named it, and no step needs any more: steps holding nothing but data
// objects (no commit record, manifest or writer: nothing is writing there).
// Asked only after every step given is hidden: a writer that registers
// after this point finds their commit records gone and does not build on
// them. The name is walked before the question: only objects that existed
// before it was asked are removed (not one a drain recreates meanwhile).
Status SweepHidden(Backend& backend, const std::string& name,
                   const std::map<uint64_t, std::vector<ObjectInfo>>& hidden) {
  ASSIGN_OR_RETURN(Steps steps, WalkSteps(backend, name));
  ASSIGN_OR_RETURN(StillNeeded need, FindStillNeeded(backend, name, steps));
  for (const auto& [step, listed] : hidden) {
    for (const auto& o : listed) {
      if (IsRecordOf({name, step}, o.name)) continue;
      if (IsDataObject(o.name) && need.Keeps(o, step)) continue;
      Status st = backend.Remove(o.name);
      if (!st.ok() && !st.IsNotFound()) return st;
    }
  }
  for (const auto& [key, s] : steps) {
    if (hidden.count(key.second) || s.has_commit) continue;
    bool only_data = std::all_of(s.objects.begin(), s.objects.end(),
                                 [](const ObjectInfo& o) { return IsDataObject(o.name); });
    if (!only_data) continue;
    for (const auto& o : s.objects) {
      if (need.Keeps(o, key.second)) continue;
      Status st = backend.Remove(o.name);
      if (!st.ok() && !st.IsNotFound()) return st;
    }
  }
  return Status::OK();
}

}  // namespace

Result<std::string> FenceUnsealedClaim(Backend& backend, const std::string& name, uint64_t step) {
  ASSIGN_OR_RETURN(std::string bytes, backend.ReadSmall(CommitObject(name, step)));
  if (!IsCommitClaim(bytes)) return Status::AlreadyExists("a commit record is there");
  auto claim = DecodeClaimOf(name, step, bytes);
  // A damaged claim names no seal anybody can publish (readers refuse it).
  if (!claim.ok()) return std::string();
  Status st = backend.PublishIfAbsent(claim->seal, kFencedSeal);
  if (st.IsAlreadyExists()) {
    // Fenced by an earlier gc that stopped before removing the claim, or sealed.
    auto there = backend.ReadSmall(claim->seal);
    if (there.ok() && *there == kFencedSeal) return claim->seal;
    return Status::AlreadyExists("the claim is sealed");
  }
  RETURN_IF_ERROR(st);
  return claim->seal;
}

Status RemoveCheckpoint(Backend& backend, const CheckpointId& id) {
  RETURN_IF_ERROR(ValidateCheckpointName(id.name));
  ASSIGN_OR_RETURN(auto listed, backend.List(StepPrefix(id.name, id.step)));
  if (listed.empty()) {
    return Status::NotFound(CheckpointLabel(id.name, id.step) + " not found");
  }
  // A running save would fail or, worse, report success for a checkpoint
  // removed under it.
  if (AnyLiveWriter(backend, id.name, id.step)) {
    return Status::Unavailable(CheckpointLabel(id.name, id.step) +
                               " is being saved right now; not removing it");
  }
  RETURN_IF_ERROR(HideStep(backend, id, listed));
  return SweepHidden(backend, id.name, {{id.step, std::move(listed)}});
}

Result<uint64_t> RemoveAllSteps(Backend& backend, const std::string& name) {
  RETURN_IF_ERROR(ValidateCheckpointName(name));
  ASSIGN_OR_RETURN(Steps listed, WalkSteps(backend, name));
  if (listed.empty()) return Status::NotFound("no checkpoint named '" + name + "'");
  // Who is writing, asked after the listing (one walk for every step): a
  // writer whose objects were listed published its lock before them.
  ASSIGN_OR_RETURN(Steps now, WalkSteps(backend, name));
  std::map<uint64_t, std::vector<ObjectInfo>> hidden;
  std::string busy;
  for (auto& [key, s] : listed) {
    auto it = now.find(key);
    if (it != now.end() && AnyListedWriterAlive(backend, key, it->second)) {
      busy += (busy.empty() ? "" : ", ") + std::to_string(key.second);
      continue;
    }
    RETURN_IF_ERROR(HideStep(backend, {name, key.second}, s.objects));
    hidden.emplace(key.second, std::move(s.objects));
  }
  RETURN_IF_ERROR(SweepHidden(backend, name, hidden));
  if (!busy.empty()) {
    return Status::Unavailable("steps " + busy + " of " + name + " are being saved right now; not removing them (" +
                               std::to_string(hidden.size()) + " other steps removed)");
  }
  return static_cast<uint64_t>(hidden.size());
}

}  // namespace sluice
