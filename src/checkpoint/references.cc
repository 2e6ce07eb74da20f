#include "checkpoint/references.h"

#include <algorithm>
#include <cstdlib>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/latest_hint.h"
#include "checkpoint/store_walk.h"
#include "checkpoint/writer_registry.h"
#include "format/layout.h"

namespace sluice {
namespace {

constexpr std::string_view kRefsHeader = "SLUICE-REFS 1\n";

// The steps a refs record lists; nullopt if it is not one.
std::optional<std::set<uint64_t>> ParseRefs(std::string_view body) {
  if (body.substr(0, kRefsHeader.size()) != kRefsHeader) return std::nullopt;
  body.remove_prefix(kRefsHeader.size());
  std::set<uint64_t> steps;
  while (!body.empty()) {
    size_t nl = body.find('\n');
    if (nl == std::string_view::npos || nl == 0 || nl > 20) return std::nullopt;
    std::string line(body.substr(0, nl));
    if (line.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    steps.insert(std::strtoull(line.c_str(), nullptr, 10));
    body.remove_prefix(nl + 1);
  }
  return steps;
}

// Sorts chunks by offset and drops repeats (the same chunk named twice).
void SortUnique(std::vector<ChunkRef>* chunks) {
  std::sort(chunks->begin(), chunks->end(), [](const ChunkRef& a, const ChunkRef& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.length < b.length;
  });
  chunks->erase(std::unique(chunks->begin(), chunks->end(),
                            [](const ChunkRef& a, const ChunkRef& b) { return a.offset == b.offset && a.length == b.length; }),
                chunks->end());
}

}  // namespace

BaseIndex::BaseIndex(uint64_t step, const Manifest& m) : step_(step), objects_(m.objects) {
  for (const auto& o : objects_) {
    if (auto s = StepOfDataObject(m.name, o.name)) object_steps_.insert(*s);
  }
  for (const auto& it : m.items) {
    for (const auto& c : it.chunks) {
      if (c.has_hash) by_hash_.emplace(Key{c.hash, c.length}, c);
    }
  }
}

const ChunkRef* BaseIndex::Find(const Hash128& hash, uint32_t length) const {
  auto it = by_hash_.find(Key{hash, length});
  return it == by_hash_.end() ? nullptr : &it->second;
}

Status PublishWriterRefs(Backend& backend, std::string_view name, uint64_t step,
                         std::string_view writer, const std::set<uint64_t>& steps) {
  std::string body(kRefsHeader);
  for (uint64_t s : steps) body += std::to_string(s) + "\n";
  return backend.PublishIfAbsent(WriterRefsObject(name, step, writer), body)
      .WithContext("publish the steps this writer references");
}

void AddStepsReferencedByLiveWriter(Backend& backend, std::string_view name, uint64_t step,
                                    std::string_view writer, std::set<uint64_t>* steps, bool* all) {
  auto state = WriterStateOf(backend, name, step, writer);
  if (!state.ok()) {
    *all = true;  // cannot tell whether it is alive
    return;
  }
  if (*state == WriterState::kGone) return;
  auto body = backend.ReadSmall(WriterRefsObject(name, step, writer));
  if (!body.ok()) {
    if (!body.status().IsNotFound()) *all = true;  // NotFound: released since it was listed
    return;
  }
  auto refs = ParseRefs(*body);
  if (!refs) {
    *all = true;
    return;
  }
  steps->insert(refs->begin(), refs->end());
}

Result<std::set<uint64_t>> StepsReferencedByLiveWriters(Backend& backend, std::string_view name,
                                                        bool* all) {
  *all = false;
  ASSIGN_OR_RETURN(auto listed, backend.List(NamePrefix(name)));
  std::set<uint64_t> steps;
  for (const auto& o : listed) {
    auto parsed = ParseObjectName(o.name);
    if (!parsed || parsed->rest.rfind("writers/", 0) != 0) continue;
    const std::string& rest = parsed->rest;
    if (rest.size() < 5 || rest.compare(rest.size() - 5, 5, ".refs") != 0) continue;
    AddStepsReferencedByLiveWriter(backend, parsed->name, parsed->step, WriterOfObject(rest), &steps, all);
  }
  return steps;
}

namespace {

// Calls f(manifest) for every manifest of every committed step of `name`
// that loads (a damaged step adds nothing).
template <typename F>
Status ForEachCommittedManifest(Backend& backend, std::string_view name, F f) {
  ASSIGN_OR_RETURN(auto listed, backend.List(NamePrefix(name)));
  for (const auto& o : listed) {
    auto parsed = ParseObjectName(o.name);
    if (!parsed || parsed->rest != "COMMIT" || parsed->name != name) continue;
    auto loaded = LoadCheckpoint(backend, name, parsed->step);
    if (!loaded.ok()) continue;
    for (const auto& m : loaded->manifests) f(m);
  }
  return Status::OK();
}

}  // namespace

Result<std::set<std::string>> ObjectsOfCommittedSteps(Backend& backend, std::string_view name) {
  std::set<std::string> objects;
  RETURN_IF_ERROR(ForEachCommittedManifest(backend, name, [&](const Manifest& m) {
    for (const auto& d : m.objects) objects.insert(d.name);
  }));
  return objects;
}

Result<std::map<std::string, std::vector<ChunkRef>>> ChunksOfSharedObjects(
    Backend& backend, std::string_view name, const std::set<std::string>& objects) {
  std::map<std::string, std::vector<ChunkRef>> out;
  if (objects.empty()) return out;
  RETURN_IF_ERROR(ForEachCommittedManifest(backend, name, [&](const Manifest& m) {
    for (const auto& it : m.items) {
      for (const auto& c : it.chunks) {
        const std::string& obj = m.objects[c.object].name;
        if (objects.count(obj)) out[obj].push_back(c);
      }
    }
  }));
  for (auto& [obj, chunks] : out) SortUnique(&chunks);
  return out;
}

Status AddKnownChunks(Backend& src, std::string_view name, std::vector<ObjectToCopy>* objects) {
  std::set<std::string> shared;
  for (const auto& o : *objects) {
    if (o.shared) shared.insert(o.name);
  }
  ASSIGN_OR_RETURN(auto known, ChunksOfSharedObjects(src, name, shared));
  for (auto& o : *objects) {
    auto it = known.find(o.name);
    if (!o.shared || it == known.end()) continue;
    o.chunks.insert(o.chunks.end(), it->second.begin(), it->second.end());
    SortUnique(&o.chunks);
  }
  return Status::OK();
}

Result<std::optional<BaseIndex>> ReferenceBase(Backend& backend, std::string_view name,
                                               uint64_t step, uint32_t rank,
                                               std::string_view writer) {
  // The step the last save committed (LatestHintObject), when its commit
  // record is there; else the newest committed step a listing finds.
  std::optional<uint64_t> base;
  Result<CommitRecordBytes> before = Status::NotFound("no base");
  for (bool other_slots : {false, true}) {
    for (LatestHint& hint : ReadLatestHints(backend, name, other_slots)) {
      if (base || hint.step == step) continue;
      // The record the hint carries stands in for a first read of the commit
      // record: each read of a record whose placement is slow waits behind
      // it. It is checked like a read one would be, against
      // the record read after the refs record is published; a hint naming a
      // step removed since only costs a full write.
      if (!hint.record.empty() && DecodeCommitOf(name, hint.step, hint.record).ok()) {
        before = CommitRecordBytes{std::move(hint.record),
                                   IsSealOf(hint.seal, name, hint.step) ? std::move(hint.seal) : ""};
        base = hint.step;
        continue;
      }
      before = ReadCommitRecord(backend, name, hint.step);
      if (before.ok()) base = hint.step;
    }
    if (base) break;
  }
  if (!base) {
    // The steps under the name where the backend lists them cheaply, else
    // those whose `COMMIT` a walk finds.
    ASSIGN_OR_RETURN(auto by_name, StepsOfName(backend, name));
    std::set<uint64_t> committed;
    if (by_name) {
      committed.insert(by_name->begin(), by_name->end());
    } else {
      ASSIGN_OR_RETURN(auto listed, backend.List(NamePrefix(name)));
      for (const auto& o : listed) {
        auto parsed = ParseObjectName(o.name);
        if (parsed && parsed->rest == "COMMIT" && parsed->name == name) committed.insert(parsed->step);
      }
    }
    committed.erase(step);
    // The newest whose record is there (a claim not sealed is no commit).
    for (auto it = committed.rbegin(); it != committed.rend(); ++it) {
      before = ReadCommitRecord(backend, name, *it);
      if (before.ok() || !before.status().IsNotFound()) {
        base = *it;
        break;
      }
    }
    if (!base) return std::optional<BaseIndex>();
  }
  if (!before.ok()) {
    if (before.status().IsNotFound()) return std::optional<BaseIndex>();
    return before.status();
  }
  // A damaged base is not built upon: its chunks are written again. (The
  // commit record just read or hinted, not read again: each read of a
  // record whose placement is slow waits behind it. Only this rank's
  // manifest.)
  auto record = DecodeCommitOf(name, *base, before->bytes);
  if (!record.ok() || rank >= record->ranks.size()) return std::optional<BaseIndex>();
  auto manifest = LoadCommittedManifest(backend, *record, record->ranks[rank]);
  if (!manifest.ok()) return std::optional<BaseIndex>();
  BaseIndex index(*base, *manifest);
  if (index.chunks() == 0) return std::optional<BaseIndex>();
  std::set<uint64_t> steps = index.object_steps();
  steps.insert(*base);
  RETURN_IF_ERROR(PublishWriterRefs(backend, name, step, writer, steps));
  // Only now is the base known to stay: a Remove that deleted its commit
  // record after this point finds the refs record and keeps its objects.
  // A record published at a claim's seal is read there alone: Remove takes
  // a step's seals before its claim, so a seal still there means the
  // removal had not begun. (The claim's placement was slow when it was
  // made: reading it would wait behind it.)
  Result<std::string> after = [&]() -> Result<std::string> {
    if (!before->seal.empty()) return backend.ReadSmall(before->seal);
    ASSIGN_OR_RETURN(CommitRecordBytes now, ReadCommitRecord(backend, name, *base));
    return std::move(now.bytes);
  }();
  if (!after.ok() || *after != before->bytes) return std::optional<BaseIndex>();
  return std::optional<BaseIndex>(std::move(index));
}

}  // namespace sluice
