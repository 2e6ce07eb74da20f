#include "checkpoint/store_walk.h"

#include <algorithm>

#include "checkpoint/latest_hint.h"
#include "checkpoint/references.h"
#include "checkpoint/writer_registry.h"
#include "format/layout.h"

namespace sluice {
namespace {

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool IsDataObject(const std::string& object) {
  auto parsed = ParseObjectName(object);
  return parsed && parsed->rest.rfind("data/", 0) == 0;
}

Result<Steps> WalkSteps(Backend& backend, std::string_view name, std::vector<ObjectInfo>* hints) {
  std::string prefix = name.empty() ? CheckpointsPrefix() : NamePrefix(name);
  ASSIGN_OR_RETURN(auto listed, backend.List(prefix));
  Steps steps;
  for (auto& o : listed) {
    auto parsed = ParseObjectName(o.name);
    if (!parsed) {
      if (hints != nullptr && NameOfLatestHint(o.name)) hints->push_back(std::move(o));
      continue;
    }
    StepObjects& s = steps[{parsed->name, parsed->step}];
    const std::string& rest = parsed->rest;
    if (rest == "COMMIT") s.has_commit = true;
    if (rest.rfind("parts/", 0) == 0) s.has_part = true;
    if (auto r = RankOfManifest(rest)) s.manifest_ranks.insert(*r);
    if (rest.rfind("writers/", 0) == 0) {
      if (EndsWith(rest, ".lock")) s.lock_writers.push_back(WriterOfObject(rest));
      if (EndsWith(rest, ".refs")) s.refs_writers.push_back(WriterOfObject(rest));
    }
    if (rest.rfind("data/", 0) == 0) s.data_bytes += o.size;
    s.newest_ms = std::max(s.newest_ms, o.mtime_unix_ms);
    s.objects.push_back(std::move(o));
  }
  return steps;
}

Result<std::optional<std::vector<uint64_t>>> StepsOfName(Backend& backend, std::string_view name) {
  const ChildListing* children = backend.caps().child_listing;
  if (children == nullptr) return std::optional<std::vector<uint64_t>>();
  ASSIGN_OR_RETURN(auto names, children->ListChildren(NamePrefix(name)));
  std::vector<uint64_t> steps;
  for (const std::string& child : names) {
    // A step's directory is named by exactly 20 digits (format/layout.h).
    auto parsed = ParseObjectName(NamePrefix(name) + child + "/x");
    if (parsed && parsed->name == name) steps.push_back(parsed->step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return std::optional<std::vector<uint64_t>>(std::move(steps));
}

bool AnyListedWriterAlive(Backend& backend, const StepKey& key, const StepObjects& step) {
  for (const std::string& writer : step.lock_writers) {
    auto state = WriterStateOf(backend, key.first, key.second, writer);
    if (!state.ok() || *state == WriterState::kAlive) return true;
  }
  return false;
}

std::map<std::string, LiveRefs> LiveRefsOf(Backend& backend, const Steps& steps) {
  std::map<std::string, LiveRefs> out;
  for (const auto& [key, s] : steps) {
    for (const std::string& writer : s.refs_writers) {
      LiveRefs& refs = out[key.first];
      AddStepsReferencedByLiveWriter(backend, key.first, key.second, writer, &refs.steps, &refs.all);
    }
  }
  return out;
}

}  // namespace sluice
