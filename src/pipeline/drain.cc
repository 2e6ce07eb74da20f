#include "pipeline/drain.h"

#include <algorithm>
#include <cstring>
#include <deque>

#include "format/layout.h"
#include "checkpoint/catalog.h"
#include "checkpoint/commit_coordinator.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/references.h"
#include "checkpoint/writer_registry.h"

namespace sluice {
namespace {

bool Stopped(const CopyControl& c) { return c.stop != nullptr && c.stop->load(); }

// Swaps each object copied beside its name (ObjectToCopy::dst_name) in.
Status SwapInStaged(Backend& dst, const std::vector<ObjectToCopy>& objects, const std::string& label) {
  for (const auto& o : objects) {
    if (o.dst_name.empty()) continue;
    Status st = dst.Replace(o.dst_name, o.name);
    if (!st.ok()) {
      (void)dst.Remove(o.dst_name);
      return st.WithContext(label + ": swap in shared object " + o.name);
    }
  }
  return Status::OK();
}

// Publishes the record's manifests at the destination, byte for byte (one
// there already must hold the same bytes).
Status CopyManifests(Backend& src, Backend& dst, const CommitRecord& record, const std::string& label) {
  for (const auto& r : record.ranks) {
    ASSIGN_OR_RETURN(std::string bytes, src.ReadSmall(r.manifest));
    Status st = dst.PublishIfAbsent(r.manifest, bytes);
    if (st.IsAlreadyExists()) {
      auto there = dst.ReadSmall(r.manifest);
      if (!there.ok() || *there != bytes) {
        return Status::Corruption(label + ": manifest " + r.manifest +
                                  " exists there with other contents");
      }
    } else {
      RETURN_IF_ERROR(st.WithContext(label));
    }
  }
  return Status::OK();
}

}  // namespace

namespace {

// Of `objects`, those the destination does not hold already. What
// committed steps there name is not copied again, own objects included: a
// later step drained before this one (an earlier drain of this step failed)
// may share them, and rewriting them in place would take them from it while
// the copy runs. Held means named by a commit there and present in full.
Result<std::vector<ObjectToCopy>> NotHeldThere(Backend& dst, const std::string& name, uint64_t step,
                                               const std::string& writer_id, std::vector<ObjectToCopy> objects) {
  ASSIGN_OR_RETURN(std::set<std::string> held, ObjectsOfCommittedSteps(dst, name));
  std::vector<std::string> check;
  for (const auto& o : objects) {
    if (held.count(o.name)) check.push_back(o.name);
  }
  std::map<std::string, uint64_t> present;
  if (!check.empty()) {
    ASSIGN_OR_RETURN(auto found, dst.Stat(check));
    for (const auto& f : found) present[f.name] = f.size;
  }
  std::vector<ObjectToCopy> missing;
  for (auto& o : objects) {
    auto it = present.find(o.name);
    if (it != present.end() && it->second >= o.size) continue;
    // A shared object is staged beside and swapped in whole: another drain
    // copying it meanwhile never sees it half written.
    if (o.shared) o.dst_name = RepairStagingObject(name, step, writer_id, o.name);
    missing.push_back(std::move(o));
  }
  return missing;
}

}  // namespace

Status DrainCheckpoint(Backend& src, Backend& dst, const std::string& name, uint64_t step,
                       const CopyControl& control) {
  const std::string label = CheckpointLabel(name, step) + ": drain from " + src.uri() + " to " + dst.uri();
  if (!dst.caps().atomic_publish_if_absent) {
    return Status::NotSupported(label + ": the destination cannot publish atomically");
  }
  ASSIGN_OR_RETURN(LoadedCheckpoint loaded, LoadCheckpoint(src, name, step));
  const std::string commit = CommitObject(name, step);
  // The record as published, wherever (a claim's seal): the destination
  // gets it at `COMMIT` itself.
  ASSIGN_OR_RETURN(CommitRecordBytes src_record, ReadCommitRecord(src, name, step));
  const std::string& commit_bytes = src_record.bytes;
  auto already = ReadCommitRecord(dst, name, step);
  if (already.ok()) {
    if (already->bytes == commit_bytes) return Status::OK();
    return Status::AlreadyExists(label + ": the destination holds a different commit of this step");
  }
  if (!already.status().IsNotFound()) return already.status().WithContext(label);
  for (const auto& m : loaded.manifests) {
    for (const auto& o : m.objects) {
      if (o.size > dst.caps().max_object_bytes) {
        return Status::NotSupported(label + ": data object " + o.name + " (" +
                                    std::to_string(o.size) +
                                    " bytes) is larger than the destination's maximum object size");
      }
    }
  }
  // Claim the destination step: gc and rm there leave it alone, and another
  // drainer backs off.
  if (AnyLiveWriter(dst, name, step)) {
    return Status::Unavailable(label + ": another save or drain of this step is running there");
  }
  // (Its manifests keep the names they have at the source.)
  const std::string writer_id = NewWriterIdAwayFromSlow(dst, name, step, std::nullopt);
  RETURN_IF_ERROR(AcquireWriterLock(dst, name, step, writer_id).WithContext(label));
  struct ReleaseOnReturn {
    Backend& b;
    const std::string& n;
    uint64_t s;
    const std::string& w;
    ~ReleaseOnReturn() { ReleaseWriterLock(b, n, s, w); }
  } release{dst, name, step, writer_id};
  // The check above and taking the lock are two steps: a second drainer may
  // have passed the check too, or committed meanwhile. Both back off (a
  // retry comes later), rather than both copying over one another.
  if (AnyLiveWriter(dst, name, step, writer_id)) {
    return Status::Unavailable(label + ": another save or drain of this step is running there");
  }
  if (auto now = ReadCommitRecord(dst, name, step); now.ok()) {
    if (now->bytes == commit_bytes) return Status::OK();
    return Status::AlreadyExists(label + ": the destination holds a different commit of this step");
  }
  // Claimed while the copy runs. A drain that fails leaves its claim: the
  // next drain of the step (the pipeline retries) seals it, and a store
  // that took the claim but fails removals would otherwise leave it fenced
  // until gc.
  CommitClaimant claim(dst, name, step, writer_id);
  claim.KeepClaim();

  // Every object of every rank, as one stream: reads and writes stay in
  // flight across object boundaries. Objects of other steps (an
  // incremental save's base) are copied only where the destination does not
  // hold them for a committed step already; the ones it holds are protected
  // by a refs record first, and checked for after it (references.h).
  std::vector<ObjectToCopy> objects;
  std::set<uint64_t> shared_steps;
  for (const auto& m : loaded.manifests) {
    for (auto& o : ObjectsToCopy(m)) {
      if (o.shared) {
        if (auto s = StepOfDataObject(name, o.name)) shared_steps.insert(*s);
      }
      objects.push_back(std::move(o));
    }
  }
  if (!shared_steps.empty()) {
    RETURN_IF_ERROR(PublishWriterRefs(dst, name, step, writer_id, shared_steps).WithContext(label));
  }
  ASSIGN_OR_RETURN(objects, NotHeldThere(dst, name, step, writer_id, std::move(objects)));
  RETURN_IF_ERROR(AddKnownChunks(src, name, &objects).WithContext(label));
  RETURN_IF_ERROR(CopyObjects(src, dst, objects, control).WithContext(CheckpointLabel(name, step)));
  RETURN_IF_ERROR(SwapInStaged(dst, objects, label));
  if (Stopped(control)) return Status::Unavailable(label + ": stopped");
  RETURN_IF_ERROR(CopyManifests(src, dst, loaded.commit, label));
  // The same coordinator as a save's rank 0: every object the commit
  // reaches must be there, whole, before and after it is published.
  CommitPlan plan;
  plan.label = label;
  plan.commit_object = commit;
  plan.commit_bytes = commit_bytes;
  plan.seal = claim.seal();
  plan.claimed = claim.Wait() == CommitClaimant::Outcome::kOurs;
  for (size_t r = 0; r < loaded.manifests.size(); ++r) {
    const std::string owner = "rank " + std::to_string(loaded.commit.ranks[r].rank);
    plan.objects.push_back(CommitPlan::Named{loaded.commit.ranks[r].manifest, loaded.commit.ranks[r].manifest_bytes, owner});
    for (const auto& o : loaded.manifests[r].objects) plan.objects.push_back(CommitPlan::Named{o.name, o.size, owner});
  }
  std::string existing;
  Status st = PublishCommit(dst, plan, &existing);
  if (st.IsAlreadyExists()) {
    if (existing == commit_bytes) return Status::OK();
    return Status::AlreadyExists(label + ": another commit of this step won");
  }
  return st;
}

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
