#include "checkpoint/catalog.h"

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <unordered_set>

#include "format/commit_record.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/latest_hint.h"
#include "checkpoint/parts.h"
#include "checkpoint/references.h"
#include "checkpoint/store_walk.h"
#include "checkpoint/writer_registry.h"
#include "io/wall_clock.h"

namespace sluice {
namespace {

}  // namespace

bool AnyLiveWriter(Backend& backend, const std::string& name, uint64_t step,
                   std::string_view except_writer) {
  auto locks = backend.List(WritersPrefix(name, step));
  if (!locks.ok()) return true;  // cannot tell: assume so
  for (const auto& o : *locks) {
    auto parsed = ParseObjectName(o.name);
    if (!parsed) continue;
    const std::string writer = WriterOfObject(parsed->rest);
    if (!except_writer.empty() && writer == except_writer) continue;
    auto state = WriterStateOf(backend, name, step, writer);
    if (!state.ok() || *state == WriterState::kAlive) return true;
  }
  return false;
}

namespace {

// Why the committed step is damaged ("" if it is intact, as far as can be
// told without reading its chunks), with its info when the records load.
// nullopt when the step is not committed after all: its `COMMIT` is a claim
// whose seal is not there (a save running, or one that died), or went since
// it was listed.
std::optional<std::string> DamageOf(Backend& backend, const std::string& name, uint64_t step,
                                    CheckpointInfo* info) {
  auto loaded = LoadCheckpoint(backend, name, step);
  if (!loaded.ok()) {
    if (loaded.status().IsNotFound()) return std::nullopt;
    return loaded.status().message();
  }
  if (info != nullptr) {
    *info = InfoOf(loaded->commit);
    for (const auto& m : loaded->manifests) info->referenced_bytes += m.ReferencedBytes();
  }
  Status data = CheckDataObjects(backend, *loaded);
  return data.ok() ? std::string() : data.message();
}

// A part (parts.h) as listed: its ranks, items and bytes; damaged when its
// records do not verify or a data object of it is missing or short.
CheckpointInfo PartInfo(Backend& backend, const std::string& name, uint64_t step) {
  CheckpointInfo info;
  info.name = name;
  info.step = step;
  auto part = LoadPart(backend, name, step);
  if (!part.ok()) {
    info.damaged = true;
    info.problem = part.status().message();
    return info;
  }
  info.ranks = part->commit.world;
  info.created_unix_ms = part->commit.created_unix_ms;
  info.safe_hosts = part->safe_hosts;
  LoadedCheckpoint held;
  held.commit = part->commit;
  for (const auto& [rank, m] : part->manifests) {
    info.part_ranks.push_back(rank);
    info.items += m.items.size();
    info.bytes += m.TotalBytes();
    info.referenced_bytes += m.ReferencedBytes();
    held.manifests.push_back(m);
  }
  Status data = CheckDataObjects(backend, held);
  if (!data.ok()) {
    info.damaged = true;
    info.problem = data.message();
  }
  return info;
}

}  // namespace

namespace {

// One step of a listing, as ListCheckpoints shows it; nullopt when it is
// not shown (incomplete and not asked for, or only data a removed step
// left for later steps that share chunks with it, or gc's to take).
std::optional<CheckpointInfo> StepInfo(Backend& backend, const StepKey& key, const StepObjects& s,
                                       bool include_incomplete) {
  CheckpointInfo info;
  bool valid = false;
  // Committed means the commit record and every manifest it names
  // verify, the same test a restore applies, and every data object is
  // there in full.
  std::optional<std::string> damage;
  if (s.has_commit) damage = DamageOf(backend, key.first, key.second, &info);
  if (damage) {
    info.problem = *damage;
    valid = info.problem.empty();
    info.damaged = !valid;
    if (info.damaged) info.complete = false;
  } else if (s.has_part) {
    return PartInfo(backend, key.first, key.second);
  } else if (std::all_of(s.objects.begin(), s.objects.end(),
                         [](const ObjectInfo& o) { return IsDataObject(o.name); })) {
    return std::nullopt;
  } else {
    info.writing = AnyListedWriterAlive(backend, key, s);
    info.problem = info.writing ? "save in progress (no commit record yet)"
                                : "no commit record (save incomplete or interrupted)";
  }
  if (!valid) {
    if (!include_incomplete && !info.damaged) return std::nullopt;
    if (info.name.empty()) {
      info.name = key.first;
      info.step = key.second;
      info.ranks = static_cast<uint32_t>(s.manifest_ranks.size());
      info.bytes = s.data_bytes;
      info.created_unix_ms = s.newest_ms;
    }
    info.complete = false;
  }
  return info;
}

}  // namespace

Result<std::vector<CheckpointInfo>> ListCheckpoints(Backend& backend, std::string_view name,
                                                    bool include_incomplete) {
  ASSIGN_OR_RETURN(Steps steps, WalkSteps(backend, name));
  std::vector<const Steps::value_type*> order;
  for (const auto& entry : steps) order.push_back(&entry);
  // Each step's records are read on threads of their own: on a remote
  // store each read is a round trip.
  std::vector<std::optional<CheckpointInfo>> infos(order.size());
  ForEachParallel(order.size(), [&](size_t i) {
    infos[i] = StepInfo(backend, order[i]->first, order[i]->second, include_incomplete);
  });
  std::vector<CheckpointInfo> out;
  for (auto& info : infos) {
    if (info) out.push_back(std::move(*info));
  }
  return out;
}

namespace {

// The steps of `name` that may be committed, newest first: from the name's
// children where the backend lists them cheaply (a step found to have no
// commit record costs one failed read), else from a walk (those whose
// `COMMIT` it listed).
Result<std::vector<uint64_t>> CandidateSteps(Backend& backend, std::string_view name) {
  ASSIGN_OR_RETURN(auto by_name, StepsOfName(backend, name));
  if (by_name) return std::move(*by_name);
  ASSIGN_OR_RETURN(Steps steps, WalkSteps(backend, name));
  std::vector<uint64_t> out;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (it->second.has_commit && it->first.first == name) out.push_back(it->first.second);
  }
  return out;
}

}  // namespace

Result<NewestStep> NewestCommittedStep(Backend& backend, std::string_view name) {
  ASSIGN_OR_RETURN(std::vector<uint64_t> steps, CandidateSteps(backend, name));
  const std::string n(name);
  for (uint64_t step : steps) {
    auto damage = DamageOf(backend, n, step, nullptr);
    if (!damage) continue;  // no commit record, or a claim not sealed
    return NewestStep{step, *damage};
  }
  return Status::NotFound("no committed checkpoint named '" + std::string(name) + "'");
}

Result<uint64_t> LatestStep(Backend& backend, std::string_view name) {
  ASSIGN_OR_RETURN(NewestStep newest, NewestCommittedStep(backend, name));
  if (!newest.problem.empty()) {
    return Status::Corruption(CheckpointLabel(name, newest.step) + ", the newest committed step, is damaged: " +
                              newest.problem + " (--step latest-good uses the newest intact step instead)");
  }
  return newest.step;
}

Result<uint64_t> LatestGoodStep(Backend& backend, std::string_view name) {
  ASSIGN_OR_RETURN(std::vector<uint64_t> steps, CandidateSteps(backend, name));
  const std::string n(name);
  for (uint64_t step : steps) {
    auto damage = DamageOf(backend, n, step, nullptr);
    if (damage && damage->empty()) return step;
  }
  return Status::NotFound("no intact committed checkpoint named '" + std::string(name) + "'");
}

}  // namespace sluice
