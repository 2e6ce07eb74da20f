#include "checkpoint/step_copy.h"

#include <algorithm>
#include <map>
#include <set>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/parts.h"
#include "checkpoint/commit_coordinator.h"
#include "checkpoint/copies.h"
#include "checkpoint/references.h"
#include "checkpoint/step_commit.h"
#include "format/layout.h"
#include "io/crc32c.h"

namespace sluice {
namespace {

bool Stopped(const CopyControl& c) { return c.stop != nullptr && c.stop->load(); }

// Whether the destination already commits (name, step): OK(true) when it is
// the same save (checkpoint/copies.h), OK(false) when nothing is committed
// there, AlreadyExists when another save is. A copy there whose manifests
// do not load is judged by its commit record alone (scrub repairs it).
Result<bool> AlreadyThere(Backend& dst, const LoadedCheckpoint& loaded, const std::string& label) {
  const std::string& name = loaded.commit.name;
  const uint64_t step = loaded.commit.step;
  auto record = ReadCommitRecord(dst, name, step);
  if (!record.ok()) {
    if (record.status().IsNotFound()) return false;
    return record.status().WithContext(label);
  }
  bool same = false;
  auto there = LoadCheckpoint(dst, name, step);
  if (there.ok()) {
    same = SameSave(*there, loaded);
  } else {
    auto commit = DecodeCommitOf(name, step, record->bytes);
    same = commit.ok() && SameSave(*commit, loaded.commit);
  }
  if (!same) return Status::AlreadyExists(label + ": the destination holds a different commit of this step");
  return true;
}

// What a drain writes: every rank's manifest with the destination's name of
// each of its objects, and the objects to copy for them.
struct DestinationCopy {
  // names[r][i]: where rank r's object i is on the destination (a placed
  // object's once it is stored).
  std::vector<std::vector<std::string>> names;
  std::vector<ObjectToCopy> to_copy;
  std::vector<std::pair<size_t, size_t>> slots;  // (rank, index) each copy names
};

// Source names of objects of `steps` (other steps, which the checkpoint
// shares chunks with) mapped to their names on the destination, where the
// destination holds the same save of that step (checkpoint/copies.h).
std::map<std::string, std::string> SharedNamesThere(Backend& src, Backend& dst, const std::string& name,
                                                    const std::set<uint64_t>& steps) {
  std::map<std::string, std::string> out;
  for (uint64_t s : steps) {
    auto a = LoadCheckpoint(src, name, s);
    auto b = LoadCheckpoint(dst, name, s);
    if (!a.ok() || !b.ok() || !SameSave(*a, *b)) continue;
    out.merge(ObjectNamesAcross(*a, *b));
  }
  return out;
}

// Where each object goes. The step's own objects are written new, under
// this drain writer's names, placed away from slow placements and hedged
// (engine/write_queue.h); nothing is asked of the destination about them
// (a stat per object would wait behind a slow placement for many of them;
// on RADOS, src/backends/rados/). An object of another step (an incremental save's
// base) that a committed step on the destination names already, under its
// own name or under the name that step's copy there gives it, present in
// full, is not copied again; only where one is present under its own name
// is the destination listed (on RADOS a listing walks every placement
// group) to learn whether a commit names it. One that is not there is
// staged beside its own name and swapped in whole, so that another drain
// copying it meanwhile never sees it half written.
Result<DestinationCopy> PlanDestination(Backend& src, Backend& dst, const LoadedCheckpoint& loaded,
                                        const std::string& writer_id, const std::set<uint64_t>& shared_steps) {
  const std::string& name = loaded.commit.name;
  const uint64_t step = loaded.commit.step;
  const std::map<std::string, std::string> shared_there = SharedNamesThere(src, dst, name, shared_steps);
  DestinationCopy out;
  std::vector<std::vector<ObjectToCopy>> all;
  std::set<std::string> held;  // named by a commit there
  std::vector<std::string> check;
  for (const auto& m : loaded.manifests) {
    all.push_back(ObjectsToCopy(m));
    out.names.emplace_back(m.objects.size());
    for (const auto& o : all.back()) {
      if (!o.shared) continue;
      check.push_back(o.name);
      if (auto it = shared_there.find(o.name); it != shared_there.end()) {
        check.push_back(it->second);
        held.insert(it->second);
      }
    }
  }
  std::map<std::string, uint64_t> present;
  std::vector<ObjectInfo> found;
  if (!check.empty()) {
    ASSIGN_OR_RETURN(found, dst.Stat(check));
  }
  bool listed = false;
  for (const auto& f : found) {
    present[f.name] = f.size;
    if (!listed && !held.count(f.name)) {
      ASSIGN_OR_RETURN(std::set<std::string> committed, ObjectsOfCommittedSteps(dst, name));
      held.merge(committed);
      listed = true;
    }
  }
  std::map<std::string, std::string> staged;  // source name -> destination name, for a shared object copied once
  for (size_t r = 0; r < all.size(); ++r) {
    for (size_t i = 0; i < all[r].size(); ++i) {
      ObjectToCopy& o = all[r][i];
      for (const std::string& there : {o.shared ? o.name : "", o.shared && shared_there.count(o.name) ? shared_there.at(o.name) : ""}) {
        auto p = present.find(there);
        if (!there.empty() && held.count(there) && p != present.end() && p->second >= o.size) {
          out.names[r][i] = there;
          break;
        }
      }
      if (!out.names[r][i].empty()) continue;
      if (o.shared) {
        if (auto it = staged.find(o.name); it != staged.end()) {
          out.names[r][i] = it->second;
          continue;
        }
        staged[o.name] = o.name;
        out.names[r][i] = o.name;
        o.dst_name = RepairStagingObject(name, step, writer_id, o.name);
      } else {
        o.dst_name = DataObject(name, step, loaded.manifests[r].rank, writer_id, static_cast<uint32_t>(i));
        o.placed = true;
      }
      out.to_copy.push_back(std::move(o));
      out.slots.emplace_back(r, i);
    }
  }
  return out;
}

// Swaps each shared object staged beside its name in.
Status SwapInStaged(Backend& dst, const std::vector<ObjectToCopy>& objects, const std::string& label) {
  for (const auto& o : objects) {
    if (o.dst_name.empty() || o.placed) continue;
    Status st = dst.Replace(o.dst_name, o.name);
    if (!st.ok()) {
      (void)dst.Remove(o.dst_name);
      return st.WithContext(label + ": swap in shared object " + o.name);
    }
  }
  return Status::OK();
}

// Publishes the destination's manifests (the source's, naming the objects
// where the destination holds them, as written by `writer_id`) and returns
// the commit plan that names them: the source's record but for the
// manifests' names, sizes and crcs.
Result<CommitPlan> PublishManifests(Backend& dst, const LoadedCheckpoint& loaded, const DestinationCopy& copy,
                                    const std::string& writer_id, const std::string& label) {
  CommitRecord record = loaded.commit;
  CommitPlan plan;
  plan.label = label;
  plan.commit_object = CommitObject(record.name, record.step);
  for (size_t r = 0; r < loaded.manifests.size(); ++r) {
    Manifest m = loaded.manifests[r];
    m.writer_id = writer_id;
    for (size_t i = 0; i < m.objects.size(); ++i) m.objects[i].name = copy.names[r][i];
    const std::string bytes = EncodeManifest(m);
    CommittedRank& cr = record.ranks[r];
    cr.manifest = ManifestObject(record.name, record.step, cr.rank, writer_id);
    cr.manifest_bytes = bytes.size();
    cr.manifest_crc32c = Crc32c(bytes.data(), bytes.size());
    RETURN_IF_ERROR(dst.PublishIfAbsent(cr.manifest, bytes).WithContext(label + ": publish " + cr.manifest));
    const std::string owner = "rank " + std::to_string(cr.rank);
    plan.objects.push_back(CommitPlan::Named{cr.manifest, cr.manifest_bytes, owner});
    for (const auto& o : m.objects) plan.objects.push_back(CommitPlan::Named{o.name, o.size, owner});
  }
  plan.commit_bytes = EncodeCommitRecord(record);
  return plan;
}

// Copies the checkpoint's objects (as one stream: reads and writes stay in
// flight across object boundaries) and publishes its manifests; returns
// the plan of its commit.
Result<CommitPlan> CopyCheckpoint(Backend& src, Backend& dst, const LoadedCheckpoint& loaded, StepCommit& writer,
                                  const CopyControl& control, const std::string& label) {
  const std::string& writer_id = writer.writer_id();
  const std::string& name = loaded.commit.name;
  // Objects of other steps (an incremental save's base) are protected on
  // the destination by a refs record first, and looked for after it
  // (references.h).
  std::set<uint64_t> shared_steps;
  for (const auto& m : loaded.manifests) {
    for (uint32_t i = 0; i < m.objects.size(); ++i) {
      if (!m.IsReference(i)) continue;
      if (auto s = StepOfDataObject(name, m.objects[i].name)) shared_steps.insert(*s);
    }
  }
  if (!shared_steps.empty()) {
    RETURN_IF_ERROR(writer.ProtectSteps(shared_steps).WithContext(label));
  }
  ASSIGN_OR_RETURN(DestinationCopy copy, PlanDestination(src, dst, loaded, writer_id, shared_steps));
  RETURN_IF_ERROR(AddKnownChunks(src, name, &copy.to_copy).WithContext(label));
  std::vector<std::string> stored;
  RETURN_IF_ERROR(CopyObjects(src, dst, copy.to_copy, control, &stored).WithContext(label));
  for (size_t k = 0; k < copy.to_copy.size(); ++k) {
    if (copy.to_copy[k].placed) copy.names[copy.slots[k].first][copy.slots[k].second] = stored[k];
  }
  RETURN_IF_ERROR(SwapInStaged(dst, copy.to_copy, label));
  if (Stopped(control)) return Status::Unavailable(label + ": stopped");
  return PublishManifests(dst, loaded, copy, writer_id, label);
}

}  // namespace

Status CopyCommittedStep(Backend& src, Backend& dst, const std::string& name, uint64_t step,
                         const CopyControl& control) {
  const std::string label = CheckpointLabel(name, step) + ": drain from " + src.uri() + " to " + dst.uri();
  if (!dst.caps().atomic_publish_if_absent) {
    return Status::NotSupported(label + ": the destination cannot publish atomically");
  }
  ASSIGN_OR_RETURN(LoadedCheckpoint loaded, LoadCommittedOrSafe(src, name, step));
  ASSIGN_OR_RETURN(bool done, AlreadyThere(dst, loaded, label));
  if (done) return Status::OK();
  for (const auto& m : loaded.manifests) {
    for (const auto& o : m.objects) {
      if (o.size > dst.caps().max_object_bytes) {
        return Status::NotSupported(label + ": data object " + o.name + " (" + std::to_string(o.size) +
                                    " bytes) is larger than the destination's maximum object size");
      }
    }
  }
  // A writer of the destination step, which claims it while the copy runs.
  // A second copier of the step (or a save there) may run beside it: each
  // writes under its own names, both claim the step, and exactly one seals
  // it; the other finds the same save committed, or fails. (Not asked
  // first: that takes a listing, which on some stores walks every
  // placement, a slow one's too.)
  StepCommitOptions options;
  options.commits = true;
  // A copy that fails is retried (the pipeline's drains, a rebuild run
  // again): its claim stays for the retry to seal.
  options.keep_claim_on_failure = true;
  ASSIGN_OR_RETURN(auto writer, StepCommit::Begin(dst, CheckpointId{name, step}, "", options));
  ASSIGN_OR_RETURN(CommitPlan plan, CopyCheckpoint(src, dst, loaded, *writer, control, label));
  std::string existing;
  Status st = writer->Publish(std::move(plan), &existing);
  if (st.IsAlreadyExists()) {
    auto same = AlreadyThere(dst, loaded, label);
    if (same.ok() && *same) return Status::OK();
    return Status::AlreadyExists(label + ": another commit of this step won");
  }
  return st;
}

}  // namespace sluice
