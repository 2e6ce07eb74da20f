#include "checkpoint/garbage_collector.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_set>

#include "checkpoint/catalog.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/latest_hint.h"
#include "checkpoint/step_removal.h"
#include "checkpoint/store_walk.h"
#include "format/layout.h"
#include "io/wall_clock.h"

namespace sluice {
namespace {

bool HasCommitNow(Backend& backend, const StepKey& key) {
  return ReadCommitRecord(backend, key.first, key.second).status().code() != StatusCode::kNotFound;
}

// What the step (name, step) reaches if it is committed: its records, and
// every data object its manifests name, wherever it lives; nullopt if it is
// not committed (no record, or a claim without its seal: its objects go
// like any uncommitted step's). A damaged commit record or manifest: what
// it reaches is unknown, so every object of the step (`objects`, as listed)
// is. Deleting is never the repair.
std::optional<std::vector<std::string>> ReachedFrom(Backend& backend, const StepKey& key,
                                                    const std::vector<ObjectInfo>& objects) {
  std::vector<std::string> reached;
  auto loaded = LoadCheckpoint(backend, key.first, key.second);
  if (!loaded.ok()) {
    // NotFound is the record's absence or a manifest's: the record tells which.
    if (loaded.status().IsNotFound() && !HasCommitNow(backend, key)) return std::nullopt;
    for (const auto& o : objects) reached.push_back(o.name);
    return reached;
  }
  reached.push_back(CommitObject(key.first, key.second));
  if (!loaded->seal.empty()) reached.push_back(loaded->seal);
  for (const auto& r : loaded->commit.ranks) reached.push_back(r.manifest);
  for (const auto& m : loaded->manifests) {
    for (const auto& o : m.objects) reached.push_back(o.name);
  }
  // A committed step's drain notes say why a later tier lacks it.
  const std::string notes = DrainNotePrefix(key.first, key.second);
  for (const auto& o : objects) {
    if (o.name.rfind(notes, 0) == 0) reached.push_back(o.name);
  }
  return reached;
}

// A latest-step hint older than `cutoff` that names no committed step (it
// was removed, or never committed here) goes like any object nothing reaches.
void RemoveStaleHints(Backend& backend, const std::vector<ObjectInfo>& hints, int64_t cutoff, GcReport* report) {
  for (const ObjectInfo& h : hints) {
    if (h.mtime_unix_ms > cutoff) continue;
    const std::string name = *NameOfLatestHint(h.name);
    auto bytes = backend.ReadSmall(h.name);
    if (!bytes.ok()) continue;
    const std::optional<uint64_t> step = ParseHintedStep(*bytes);
    if (step && ReadCommitRecord(backend, name, *step).ok()) continue;
    if (backend.Remove(h.name).ok()) {
      ++report->objects_removed;
      report->bytes_removed += h.size;
    }
  }
}

// The mark: every object a commit reaches or a live writer may still
// commit, as the walk `steps` and the reads after it find them. `committed`
// gets the steps that were committed.
std::unordered_set<std::string> Mark(Backend& backend, const Steps& steps, std::set<StepKey>* committed) {
  const std::map<std::string, LiveRefs> live_refs = LiveRefsOf(backend, steps);
  std::vector<const Steps::value_type*> order;
  for (const auto& entry : steps) order.push_back(&entry);
  std::mutex mu;
  std::unordered_set<std::string> marked;
  ForEachParallel(order.size(), [&](size_t i) {
    const StepKey& key = order[i]->first;
    const StepObjects& s = order[i]->second;
    auto refs = live_refs.find(key.first);
    std::vector<std::string> reached;
    bool is_committed = false;
    if (AnyListedWriterAlive(backend, key, s) || (refs != live_refs.end() && refs->second.Names(key.second))) {
      // A step a writer works in, or one a live writer's refs name: its
      // objects may be about to be committed.
      for (const auto& o : s.objects) reached.push_back(o.name);
    } else if (auto committed_reach = ReachedFrom(backend, key, s.objects)) {
      // Read after the writer check: a writer that finished in between has
      // published its commit record by now.
      is_committed = true;
      reached = std::move(*committed_reach);
    } else if (s.has_part) {
      // One host's part of a checkpoint committed elsewhere: only rm and
      // retention remove it, whole (a crashed attempt's leftovers with it).
      for (const auto& o : s.objects) reached.push_back(o.name);
    }
    std::lock_guard<std::mutex> g(mu);
    if (is_committed) committed->insert(key);
    for (auto& r : reached) marked.insert(std::move(r));
  });
  return marked;
}

// What started since the mark's walk, found by a second walk: writers that
// registered (their steps are left to the next gc), refs records of live
// writers, and commits published since (what they name is kept).
struct SinceMark {
  Steps steps;
  std::map<std::string, LiveRefs> live_refs;
  std::unordered_set<std::string> named_by_new_commits;
  std::set<std::string> names_unknown;  // a new commit of the name did not load: keep all uncommitted
};

Result<SinceMark> LookSinceMark(Backend& backend, const std::set<StepKey>& committed) {
  SinceMark since;
  ASSIGN_OR_RETURN(since.steps, WalkSteps(backend, ""));
  since.live_refs = LiveRefsOf(backend, since.steps);
  for (const auto& [key, s] : since.steps) {
    if (!s.has_commit || committed.count(key)) continue;
    auto loaded = LoadCheckpoint(backend, key.first, key.second);
    if (!loaded.ok()) {
      // A claim not sealed is no commit; anything else may name anything.
      if (!loaded.status().IsNotFound()) since.names_unknown.insert(key.first);
      continue;
    }
    for (const auto& m : loaded->manifests) {
      for (const auto& d : m.objects) since.named_by_new_commits.insert(d.name);
    }
  }
  return since;
}

// Removes the step's unmarked objects `doomed` (listed older than `cutoff`)
// unless something started in the step since the mark. Adds to `report`.
Status SweepStep(Backend& backend, const StepKey& key, bool was_committed, std::vector<ObjectInfo> doomed,
                 const SinceMark& since, int64_t cutoff, GcReport* report, std::mutex* report_mu) {
  auto now = since.steps.find(key);
  if (now != since.steps.end() && AnyListedWriterAlive(backend, key, now->second)) return Status::OK();
  auto refs = since.live_refs.find(key.first);
  if (refs != since.live_refs.end() && refs->second.Names(key.second)) return Status::OK();
  if (!was_committed) {
    // Committed since the mark: its objects are judged by the next gc.
    if (HasCommitNow(backend, key) || since.names_unknown.count(key.first)) return Status::OK();
    // An uncommitted step's objects may be named by a step committed since
    // the mark (an incremental save that referenced them meanwhile).
    doomed.erase(std::remove_if(doomed.begin(), doomed.end(),
                                [&](const ObjectInfo& o) { return since.named_by_new_commits.count(o.name) > 0; }),
                 doomed.end());
  }
  // Looked at again just before they go: an object written again since the
  // walk (a drain re-creating it under the same name) is young now.
  std::vector<std::string> names;
  for (const auto& o : doomed) names.push_back(o.name);
  if (names.empty()) return Status::OK();
  ASSIGN_OR_RETURN(auto fresh, backend.Stat(names));
  std::map<std::string, const ObjectInfo*> old_enough;
  for (const auto& o : fresh) {
    if (o.mtime_unix_ms <= cutoff) old_enough[o.name] = &o;
  }
  doomed.erase(std::remove_if(doomed.begin(), doomed.end(),
                              [&](const ObjectInfo& o) { return old_enough.count(o.name) == 0; }),
               doomed.end());
  // An unsealed claim among them (a writer that died left it) is fenced
  // first: the next writer of the step may be sealing it right now.
  std::string fence;
  const std::string commit = CommitObject(key.first, key.second);
  const bool commit_doomed =
      std::any_of(doomed.begin(), doomed.end(), [&](const ObjectInfo& o) { return o.name == commit; });
  if (!was_committed && commit_doomed) {
    auto fenced = FenceUnsealedClaim(backend, key.first, key.second);
    if (fenced.status().IsNotFound()) {
      // Gone already (another gc or rm): not removed by name, as a claim
      // made since would go with it.
      doomed.erase(std::remove_if(doomed.begin(), doomed.end(), [&](const ObjectInfo& o) { return o.name == commit; }),
                   doomed.end());
    } else if (!fenced.ok()) {
      return Status::OK();  // sealed meanwhile, or cannot tell: the next gc judges it again
    } else {
      fence = std::move(fenced).value();
    }
  }
  // The claim before its fence (a fence without its claim is garbage; a
  // claim without its fence could be sealed again).
  std::stable_partition(doomed.begin(), doomed.end(), [&](const ObjectInfo& o) { return o.name == commit; });
  for (const ObjectInfo& o : doomed) {
    Status st = backend.Remove(o.name);
    if (!st.ok() && !st.IsNotFound()) return st;
    if (st.ok()) {
      std::lock_guard<std::mutex> g(*report_mu);
      ++report->objects_removed;
      report->bytes_removed += o.size;
    }
  }
  if (!fence.empty()) (void)backend.Remove(fence);
  return Status::OK();
}

}  // namespace

// An object is kept exactly when a commit or a live writer references it,
// so a commit that names objects of another step (chunks shared across
// steps) keeps them alive without gc knowing why.
Result<GcReport> CollectGarbage(Backend& backend, uint64_t min_age_ms) {
  std::vector<ObjectInfo> hints;
  ASSIGN_OR_RETURN(Steps steps, WalkSteps(backend, "", &hints));
  const int64_t cutoff = NowUnixMs() - static_cast<int64_t>(min_age_ms);
  std::set<StepKey> committed;
  const std::unordered_set<std::string> marked = Mark(backend, steps, &committed);
  std::vector<std::pair<const StepKey*, std::vector<ObjectInfo>>> doomed;
  for (const auto& [key, s] : steps) {
    std::vector<ObjectInfo> unmarked;
    for (const auto& o : s.objects) {
      if (!marked.count(o.name) && o.mtime_unix_ms <= cutoff) unmarked.push_back(o);
    }
    if (!unmarked.empty()) doomed.emplace_back(&key, std::move(unmarked));
  }
  GcReport report;
  if (!doomed.empty()) {
    ASSIGN_OR_RETURN(SinceMark since, LookSinceMark(backend, committed));
    std::mutex mu;
    Status first_error;
    ForEachParallel(doomed.size(), [&](size_t i) {
      const StepKey& key = *doomed[i].first;
      Status st = SweepStep(backend, key, committed.count(key) > 0, std::move(doomed[i].second), since, cutoff,
                            &report, &mu);
      std::lock_guard<std::mutex> g(mu);
      if (!st.ok() && first_error.ok()) first_error = st;
    });
    RETURN_IF_ERROR(first_error);
  }
  RemoveStaleHints(backend, hints, cutoff, &report);
  // Last, so that what the removals above left empty goes too. No age
  // applies to directories: the removals above just touched their mtimes,
  // and a writer whose fresh directory goes makes it again. Temporaries of
  // publishes go by min_age like any object: as `gc --help` says, a save
  // running during a gc with --min-age 0 may fail (never commit torn).
  // Tidying only: a failure here (an unreadable directory) does not undo
  // the report of what was removed, and the next gc tries again.
  (void)backend.ReclaimLeftovers(CheckpointsPrefix(), min_age_ms);
  return report;
}

}  // namespace sluice
