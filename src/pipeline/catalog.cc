#include "pipeline/catalog.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <unordered_set>

#include "format/commit_record.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "pipeline/checkpoint_reader.h"

namespace sluice {
namespace {

struct StepObjects {
  bool has_commit = false;
  std::vector<ObjectInfo> objects;
  std::set<uint32_t> manifest_ranks;
  uint64_t data_bytes = 0;
  int64_t newest_ms = 0;
};

using Steps = std::map<std::pair<std::string, uint64_t>, StepObjects>;

Result<Steps> GroupBySteps(Backend& backend, std::string_view name) {
  std::string prefix = name.empty() ? CheckpointsPrefix() : NamePrefix(name);
  ASSIGN_OR_RETURN(auto listed, backend.List(prefix));
  Steps steps;
  for (auto& o : listed) {
    auto parsed = ParseObjectName(o.name);
    if (!parsed) continue;
    StepObjects& s = steps[{parsed->name, parsed->step}];
    if (parsed->rest == "COMMIT") s.has_commit = true;
    if (auto r = RankOfManifest(parsed->rest); r && o.name.find(".tmp.") == std::string::npos) {
      s.manifest_ranks.insert(*r);
    }
    if (parsed->rest.rfind("data/", 0) == 0) s.data_bytes += o.size;
    s.newest_ms = std::max(s.newest_ms, o.mtime_unix_ms);
    s.objects.push_back(std::move(o));
  }
  return steps;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<std::vector<CheckpointInfo>> ListCheckpoints(Backend& backend, std::string_view name,
                                                    bool include_incomplete) {
  ASSIGN_OR_RETURN(Steps steps, GroupBySteps(backend, name));
  std::vector<CheckpointInfo> out;
  for (const auto& [key, s] : steps) {
    CheckpointInfo info;
    bool valid = false;
    if (s.has_commit) {
      std::string commit = CommitObject(key.first, key.second);
      auto bytes = backend.ReadSmall(commit);
      if (bytes.ok()) {
        auto rec = DecodeCommitRecord(*bytes, "commit record " + commit);
        if (rec.ok() && rec->name == key.first && rec->step == key.second) {
          info = InfoOf(*rec);
          valid = true;
        } else {
          info.problem = rec.ok() ? "commit record names another checkpoint" : rec.status().message();
        }
      } else {
        info.problem = bytes.status().ToString();
      }
    } else {
      info.problem = "no commit record (save incomplete or interrupted)";
    }
    if (!valid) {
      if (!include_incomplete) continue;
      info.name = key.first;
      info.step = key.second;
      info.complete = false;
      info.ranks = static_cast<uint32_t>(s.manifest_ranks.size());
      info.bytes = s.data_bytes;
      info.created_unix_ms = s.newest_ms;
    }
    out.push_back(std::move(info));
  }
  return out;
}

Result<uint64_t> LatestStep(Backend& backend, std::string_view name) {
  ASSIGN_OR_RETURN(Steps steps, GroupBySteps(backend, name));
  std::optional<uint64_t> best;
  for (const auto& [key, s] : steps) {
    if (s.has_commit && key.first == name) best = std::max(best.value_or(0), key.second);
  }
  if (!best) return Status::NotFound("no committed checkpoint named '" + std::string(name) + "'");
  return *best;
}

Status RemoveCheckpoint(Backend& backend, const CheckpointId& id) {
  RETURN_IF_ERROR(ValidateCheckpointName(id.name));
  ASSIGN_OR_RETURN(auto listed, backend.List(StepPrefix(id.name, id.step)));
  if (listed.empty()) {
    return Status::NotFound("checkpoint " + id.name + "@" + std::to_string(id.step) + " not found");
  }
  // The commit record goes first: from then on the checkpoint is invisible,
  // and an interruption leaves only garbage for gc.
  std::string commit = CommitObject(id.name, id.step);
  for (const auto& o : listed) {
    if (o.name == commit) RETURN_IF_ERROR(backend.Remove(o.name));
  }
  for (const auto& o : listed) {
    if (o.name == commit) continue;
    Status st = backend.Remove(o.name);
    if (!st.ok() && !st.IsNotFound()) return st;
  }
  return Status::OK();
}

Result<GcReport> CollectGarbage(Backend& backend, uint64_t min_age_ms) {
  ASSIGN_OR_RETURN(Steps steps, GroupBySteps(backend, ""));
  const int64_t cutoff = NowUnixMs() - static_cast<int64_t>(min_age_ms);
  GcReport report;
  for (const auto& [key, s] : steps) {
    std::unordered_set<std::string> live;
    bool keep_all = false;
    if (s.has_commit) {
      auto loaded = LoadCheckpoint(backend, key.first, key.second);
      if (loaded.ok()) {
        live.insert(CommitObject(key.first, key.second));
        for (const auto& r : loaded->commit.ranks) live.insert(r.manifest);
        for (const auto& m : loaded->manifests) {
          for (const auto& o : m.objects) live.insert(o.name);
        }
      } else {
        // A damaged commit record or manifest: what it reaches is unknown,
        // so nothing of this step is touched. Deleting is never the repair.
        keep_all = true;
      }
    }
    if (keep_all) continue;
    for (const auto& o : s.objects) {
      if (live.count(o.name) || o.mtime_unix_ms > cutoff) continue;
      Status st = backend.Remove(o.name);
      if (!st.ok() && !st.IsNotFound()) return st;
      if (st.ok()) {
        ++report.objects_removed;
        report.bytes_removed += o.size;
      }
    }
  }
  return report;
}

}  // namespace sluice
