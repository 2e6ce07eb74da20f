// References: how an incremental save shares chunks with an earlier step of
// the same name, and how removal and gc keep every shared object alive.
//
// A manifest may name data objects of other steps (objects of its base, or
// objects its base itself referenced); a restore reads them like its own.
// Such an object stays as long as any committed manifest names it:
//   - gc is mark-and-sweep over every commit (catalog.cc);
//   - Remove deletes a step's commit record first, then only the objects no
//     other committed step of the name names;
//   - a writer that is going to name objects of other steps first publishes
//     a refs record (writers/<writer>.refs, the steps whose prefixes hold
//     them) next to its writer lock, and only then checks that its base is
//     still committed. Remove and gc keep every object of a step a live
//     writer's refs record names. Because Remove deletes the commit record
//     before it looks for refs records, a writer either sees the base gone
//     (and writes in full) or is seen by the Remove.
//
// Thread-safety: free functions; BaseIndex is a value.
#ifndef SLUICE_CHECKPOINT_REFERENCES_H_
#define SLUICE_CHECKPOINT_REFERENCES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/object_copy.h"
#include "format/manifest.h"
#include "sluice/backend.h"

namespace sluice {

// The chunks of one rank's manifest of a base step, found by content.
class BaseIndex {
 public:
  // Indexes every hashed chunk of `m` (a manifest of step `step`).
  BaseIndex(uint64_t step, const Manifest& m);

  uint64_t step() const { return step_; }
  // The steps whose prefixes hold the objects this base's chunks lie in.
  const std::set<uint64_t>& object_steps() const { return object_steps_; }
  const std::vector<DataObjectRef>& objects() const { return objects_; }
  // A chunk of the base with this hash and length (its `object` indexes
  // objects()), or null.
  const ChunkRef* Find(const Hash128& hash, uint32_t length) const;
  size_t chunks() const { return by_hash_.size(); }

 private:
  struct Key {
    Hash128 hash;
    uint32_t length;
    bool operator==(const Key& o) const { return hash == o.hash && length == o.length; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.hash.low ^ (k.hash.high * 31) ^ k.length); }
  };
  uint64_t step_;
  std::vector<DataObjectRef> objects_;
  std::set<uint64_t> object_steps_;
  std::unordered_map<Key, ChunkRef, KeyHash> by_hash_;
};

// Publishes the refs record of `writer` in (name, step): `steps` are the
// other steps whose data objects it may name. Before anything it names is
// trusted, the caller checks that what it references is still committed.
Status PublishWriterRefs(Backend& backend, std::string_view name, uint64_t step,
                         std::string_view writer, const std::set<uint64_t>& steps);

// Adds the steps that `writer`'s refs record in (name, step) lists, if the
// writer is alive; sets `*all` when that cannot be told (its lock or record
// unreadable or garbled). A writer gone, or a record gone, adds nothing.
void AddStepsReferencedByLiveWriter(Backend& backend, std::string_view name, uint64_t step,
                                    std::string_view writer, std::set<uint64_t>* steps, bool* all);

// The steps of `name` that live writers (of any step) reference. `*all` is
// set when a live writer's record cannot be read or parsed: then nothing of
// the name may be assumed unreferenced.
Result<std::set<uint64_t>> StepsReferencedByLiveWriters(Backend& backend, std::string_view name,
                                                        bool* all);

// Every data object the committed steps of `name` name (damaged steps
// add nothing: a copy the destination may lack is copied again).
Result<std::set<std::string>> ObjectsOfCommittedSteps(Backend& backend, std::string_view name);

// Every chunk that committed manifests of `name` on `backend` place in each
// of `objects` (sorted by offset, each once): what is known of a shared
// object's bytes, so that copying it verifies all of them that anyone
// reads. A damaged step adds nothing.
Result<std::map<std::string, std::vector<ChunkRef>>> ChunksOfSharedObjects(
    Backend& backend, std::string_view name, const std::set<std::string>& objects);

// For each shared object of `objects` (ObjectToCopy::shared): adds the
// chunks other committed manifests of `name` on `src` place in it, so that a
// copy verifies every byte some step reads and copies unverified only what
// no step names.
Status AddKnownChunks(Backend& src, std::string_view name, std::vector<ObjectToCopy>* objects);

// The newest committed step of `name` other than `step` whose manifest of
// `rank` can serve as an incremental base, with the refs record published
// and the base re-checked after it (see above). nullopt: there is none, it
// has no chunk hashes, or it went away meanwhile (the save is then written
// in full). Errors are the backend's.
//
// The refs record is not removed when the writer ends: it counts only while
// the writer's lock is alive, and gc (or the step's removal) takes it. So a
// save costs no extra operation after its commit.
Result<std::optional<BaseIndex>> ReferenceBase(Backend& backend, std::string_view name,
                                               uint64_t step, uint32_t rank,
                                               std::string_view writer);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_REFERENCES_H_
