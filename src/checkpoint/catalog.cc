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

Result<std::vector<CheckpointInfo>> ListCheckpoints(Backend& backend, std::string_view name,
                                                    bool include_incomplete) {
  ASSIGN_OR_RETURN(Steps steps, WalkSteps(backend, name));
  std::vector<CheckpointInfo> out;
  for (const auto& [key, s] : steps) {
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
      info = PartInfo(backend, key.first, key.second);
      out.push_back(std::move(info));
      continue;
    } else if (std::all_of(s.objects.begin(), s.objects.end(),
                           [](const ObjectInfo& o) { return IsDataObject(o.name); })) {
      // Only data objects, nothing writing: what a removed step left for
      // later steps that share chunks with it (or gc's to take), not a save.
      continue;
    } else {
      info.writing = AnyListedWriterAlive(backend, key, s);
      info.problem = info.writing ? "save in progress (no commit record yet)"
                                  : "no commit record (save incomplete or interrupted)";
    }
    if (!valid) {
      if (!include_incomplete && !info.damaged) continue;
      if (info.name.empty()) {
        info.name = key.first;
        info.step = key.second;
        info.ranks = static_cast<uint32_t>(s.manifest_ranks.size());
        info.bytes = s.data_bytes;
        info.created_unix_ms = s.newest_ms;
      }
      info.complete = false;
    }
    out.push_back(std::move(info));
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
// are listed. That is repeated until a round finds no new commit, so that
// a step committed (and perhaps removed again) between two looks is seen
// by one of them; a store that keeps committing through four rounds keeps
// everything this time.
Result<StillNeeded> FindStillNeeded(Backend& backend, const std::string& name) {
  StillNeeded need;
  std::set<uint64_t> seen;
  for (int round = 0; round < 4; ++round) {
    bool all = false;
    ASSIGN_OR_RETURN(std::set<uint64_t> referenced, StepsReferencedByLiveWriters(backend, name, &all));
    need.all = need.all || all;
    need.steps.insert(referenced.begin(), referenced.end());
    ASSIGN_OR_RETURN(auto listed, backend.List(NamePrefix(name)));
    bool fresh = false;
    for (const auto& o : listed) {
      auto parsed = ParseObjectName(o.name);
      if (!parsed || parsed->rest != "COMMIT" || parsed->name != name || seen.count(parsed->step)) continue;
      auto loaded = LoadCheckpoint(backend, name, parsed->step);
      // Removed meanwhile, or a claim not sealed yet: looked at again in
      // the next round, where it may be a commit.
      if (!loaded.ok() && loaded.status().IsNotFound()) continue;
      seen.insert(parsed->step);
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

}  // namespace

// Makes the unsealed claim at (name, step)'s COMMIT unsealable before gc
// or rm removes it (kFencedSeal), so that no seal outlives its claim: a
// seal found means its claim was there (references.cc relies on it).
// Returns the fenced seal's name; "" when COMMIT holds a damaged claim
// (which nobody can seal); NotFound when COMMIT is gone (then it must not
// be removed by name either: a claim made since would go); AlreadyExists
// when it holds a record, or a claim that is sealed; the backend's error
// when COMMIT cannot be read.
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
  // The commit record goes first: from then on the checkpoint is invisible,
  // and an interruption leaves only garbage for gc. Where `COMMIT` holds a
  // claim, its seals go before it (a seal whose claim is gone is garbage,
  // and a claim whose seal is gone an uncommitted step, but a seal found
  // means its claim was there when it was read: references.cc relies on
  // that).
  // So do part records (parts.h): the part is then no longer restorable here.
  std::string commit = CommitObject(id.name, id.step);
  const std::string parts = PartPrefix(id.name, id.step);
  const std::string seals = SealPrefix(id.name, id.step);
  auto is_record = [&](const std::string& o) {
    return o == commit || o.rfind(parts, 0) == 0 || o.rfind(seals, 0) == 0;
  };
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
  // Only then is it asked who still needs its data objects (later steps
  // that share chunks with it, writers about to): a writer that registers
  // after this point finds the commit record gone and does not build on it.
  // The other steps are listed before that question: only objects that
  // existed before it was asked can be removed (not one a drain recreates
  // meanwhile).
  ASSIGN_OR_RETURN(Steps steps, WalkSteps(backend, id.name));
  ASSIGN_OR_RETURN(StillNeeded need, FindStillNeeded(backend, id.name));
  for (const auto& o : listed) {
    if (is_record(o.name)) continue;
    if (IsDataObject(o.name) && need.Keeps(o, id.step)) continue;
    Status st = backend.Remove(o.name);
    if (!st.ok() && !st.IsNotFound()) return st;
  }
  // What earlier removals kept because this step named it, and no step
  // needs any more: steps holding nothing but data objects (no commit
  // record, manifest or writer: nothing is writing there).
  for (const auto& [key, s] : steps) {
    if (key.second == id.step || s.has_commit) continue;
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

}  // namespace sluice
