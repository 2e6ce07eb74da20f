#include "checkpoint/checkpoint_reader.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include "format/layout.h"
#include "io/crc32c.h"
#include "engine/read_stream.h"

namespace sluice {
namespace {

std::string Label(std::string_view name, uint64_t step) { return CheckpointLabel(name, step); }

// One chunk's place in its item, for the callbacks.
struct ChunkPlace {
  const ItemInfo* item = nullptr;
  const ManifestItem* mitem = nullptr;
  uint32_t rank = 0;
  uint64_t chunk_index = 0;
  uint64_t item_offset = 0;
};

// Collects the chunks of `ranks`, grouped per data object in object order.
struct ReadPlan {
  std::vector<ChunkPlace> places;
  // (rank, object index) -> tasks; std::map keeps objects in order.
  std::map<std::pair<uint32_t, uint32_t>, std::vector<ChunkTask>> per_object;
};

}  // namespace

CheckpointInfo InfoOf(const CommitRecord& commit) {
  CheckpointInfo info;
  info.name = commit.name;
  info.step = commit.step;
  info.complete = true;
  info.ranks = commit.world;
  info.items = commit.TotalItems();
  info.bytes = commit.TotalBytes();
  info.created_unix_ms = commit.created_unix_ms;
  return info;
}

Result<Manifest> LoadCommittedManifest(Backend& backend, const CommitRecord& commit, const CommittedRank& r) {
  auto mbytes = backend.ReadSmall(r.manifest);
  if (!mbytes.ok()) {
    return Status::Corruption(Label(commit.name, commit.step) + ": manifest " + r.manifest + " of rank " +
                              std::to_string(r.rank) + " unreadable: " + mbytes.status().ToString());
  }
  return DecodeCommittedManifest(commit, r, *mbytes);
}

Result<Manifest> DecodeCommittedManifest(const CommitRecord& commit, const CommittedRank& r, std::string_view bytes) {
  if (bytes.size() != r.manifest_bytes || Crc32c(bytes.data(), bytes.size()) != r.manifest_crc32c) {
    return Status::Corruption(Label(commit.name, commit.step) + ": manifest " + r.manifest + " of rank " +
                              std::to_string(r.rank) + " does not match the size and checksum the commit recorded");
  }
  ASSIGN_OR_RETURN(Manifest m, DecodeManifest(bytes, "manifest " + r.manifest));
  if (m.name != commit.name || m.step != commit.step || m.rank != r.rank || m.world != commit.world) {
    return Status::Corruption("manifest " + r.manifest + " belongs to another checkpoint or rank");
  }
  return m;
}

Result<CommitRecord> DecodeCommitOf(std::string_view name, uint64_t step, std::string_view bytes,
                                    std::string_view read_from) {
  const std::string object = read_from.empty() ? CommitObject(name, step) : std::string(read_from);
  ASSIGN_OR_RETURN(CommitRecord commit, DecodeCommitRecord(bytes, "commit record " + object));
  if (commit.name != name || commit.step != step) {
    return Status::Corruption("commit record " + object + " describes " + Label(commit.name, commit.step));
  }
  return commit;
}

namespace {

// ReadCommitRecord; `*unsealed_seal`, where given, gets the seal a claim
// without its seal names.
Result<CommitRecordBytes> ReadRecord(Backend& backend, std::string_view name, uint64_t step,
                                     std::string* unsealed_seal) {
  const std::string label = Label(name, step);
  const std::string commit_name = CommitObject(name, step);
  auto bytes = backend.ReadSmall(commit_name);
  if (!bytes.ok()) {
    if (bytes.status().IsNotFound()) return Status::NotFound(label + " is not committed");
    return bytes.status().WithContext(label);
  }
  if (!IsCommitClaim(*bytes)) return CommitRecordBytes{std::move(bytes).value(), ""};
  ASSIGN_OR_RETURN(CommitClaim claim, DecodeClaimOf(name, step, *bytes));
  auto sealed = backend.ReadSmall(claim.seal);
  if (!sealed.ok()) {
    if (sealed.status().IsNotFound()) {
      if (unsealed_seal != nullptr) *unsealed_seal = claim.seal;
      return Status::NotFound(label + " is not committed (claimed by a save that has not sealed it)");
    }
    return sealed.status().WithContext(label + ": seal " + claim.seal);
  }
  if (*sealed == kFencedSeal) {
    return Status::NotFound(label + " is not committed (it is being removed: sluice rm or gc fenced its unsealed claim)");
  }
  return CommitRecordBytes{std::move(sealed).value(), std::move(claim.seal)};
}

}  // namespace

Result<CommitRecordBytes> ReadCommitRecord(Backend& backend, std::string_view name, uint64_t step) {
  return ReadRecord(backend, name, step, nullptr);
}

Result<CommitClaim> DecodeClaimOf(std::string_view name, uint64_t step, std::string_view bytes) {
  const std::string commit_name = CommitObject(name, step);
  ASSIGN_OR_RETURN(CommitClaim claim, DecodeCommitClaim(bytes, "commit claim " + commit_name));
  if (claim.name != name || claim.step != step || !IsSealOf(claim.seal, name, step)) {
    return Status::Corruption("commit claim " + commit_name + " names seal " + claim.seal + " of " +
                              Label(claim.name, claim.step));
  }
  return claim;
}

namespace {

// Why (name, step) reads as not committed where `COMMIT` held a claim whose
// seal `seal` was not there (`not_committed`, ReadRecord's NotFound): asked
// only on a reader's way out, not on every poll of a waiting rank.
Status WhyUnsealed(Backend& backend, std::string_view name, uint64_t step, const std::string& seal,
                   const Status& not_committed) {
  const std::string label = Label(name, step);
  auto now = backend.ReadSmall(CommitObject(name, step));
  if (!now.ok() && now.status().IsNotFound()) return Status::NotFound(label + " was removed while it was being read");
  const std::string writer = WriterOfSeal(seal);
  if (writer.empty()) return not_committed;
  auto lock = backend.Stat({WriterLockObject(name, step, writer)});
  if (lock.ok() && !lock->empty()) {
    return Status::NotFound(label + " is not committed yet (a save of it is running and has not sealed it)");
  }
  return Status::NotFound(label + " is not committed: it is being removed (sluice rm, gc), or its save died "
                                  "before sealing it and gc removes what is left");
}

}  // namespace

Result<LoadedCheckpoint> LoadCheckpoint(Backend& backend, std::string_view name, uint64_t step) {
  std::string unsealed;
  auto read = ReadRecord(backend, name, step, &unsealed);
  if (!read.ok()) {
    if (!unsealed.empty()) return WhyUnsealed(backend, name, step, unsealed, read.status());
    return read.status();
  }
  CommitRecordBytes record = std::move(read).value();
  LoadedCheckpoint out;
  ASSIGN_OR_RETURN(out.commit, DecodeCommitOf(name, step, record.bytes, record.seal));
  out.seal = std::move(record.seal);
  for (const auto& r : out.commit.ranks) {
    ASSIGN_OR_RETURN(Manifest m, LoadCommittedManifest(backend, out.commit, r));
    out.manifests.push_back(std::move(m));
  }
  return out;
}

namespace {

class Reader final : public CheckpointReader {
 public:
  Reader(Backend& backend, const StoreOptions& options, LoadedCheckpoint loaded,
         BadChunkHandler on_bad = nullptr)
      : backend_(backend), options_(options), loaded_(std::move(loaded)), on_bad_(std::move(on_bad)) {
    info_ = InfoOf(loaded_.commit);
    for (uint32_t r = 0; r < loaded_.manifests.size(); ++r) {
      for (const auto& it : loaded_.manifests[r].items) {
        items_.push_back(ItemInfo{it.key, it.metadata, it.size, r});
        mitems_.push_back(&it);
      }
    }
    for (size_t i = 0; i < items_.size(); ++i) by_key_.emplace(items_[i].key, i);
  }

  const CheckpointInfo& info() const override { return info_; }
  const std::vector<ItemInfo>& items() const override { return items_; }

  Status ReadRange(std::string_view key, uint64_t offset, void* out, uint64_t len) override {
    auto found = by_key_.find(std::string(key));
    if (found == by_key_.end()) {
      return Status::NotFound(Label(info_.name, info_.step) + ": no item '" + std::string(key) + "'");
    }
    const ItemInfo& item = items_[found->second];
    const ManifestItem& mi = *mitems_[found->second];
    if (offset > item.size || len > item.size - offset) {
      return Status::InvalidArgument("item '" + item.key + "': range " + std::to_string(offset) +
                                     "+" + std::to_string(len) + " outside its " +
                                     std::to_string(item.size) + " bytes");
    }
    if (len == 0) return Status::OK();
    const Manifest& m = loaded_.manifests[item.rank];
    std::vector<ChunkPlace> places;
    std::vector<std::pair<uint32_t, ChunkTask>> tasks;  // (object, task)
    uint64_t pos = 0;
    for (uint64_t c = 0; c < mi.chunks.size(); ++c) {
      const ChunkRef& ref = mi.chunks[c];
      if (pos + ref.length > offset && pos < offset + len) {
        places.push_back(ChunkPlace{&item, &mi, item.rank, c, pos});
      }
      pos += ref.length;
    }
    auto* dst = static_cast<uint8_t*>(out);
    // The chunks of the range, grouped by data object in item order, read as
    // one stream so that reads stay in flight across object boundaries.
    std::vector<ObjectChunks> objects;
    for (size_t i = 0; i < places.size(); ++i) {
      const ChunkRef& ref = mi.chunks[places[i].chunk_index];
      const std::string& object = m.objects[ref.object].name;
      if (objects.empty() || objects.back().object != object) objects.push_back(ObjectChunks{object, {}});
      objects.back().tasks.push_back(ChunkTask{&ref, i});
    }
    return ReadChunksAcross(
        backend_, objects, options_.io_bytes,
        [&](size_t k, const ChunkTask& t, const uint8_t* data, const std::string& problem) -> Status {
          const ChunkPlace& p = places[t.user];
          std::vector<uint8_t> recovered;
          if (data == nullptr) {
            RETURN_IF_ERROR(Recover(p, objects[k].object, *t.ref, problem, &recovered));
            data = recovered.data();
          }
          uint64_t from = std::max(offset, p.item_offset);
          uint64_t to = std::min(offset + len, p.item_offset + t.ref->length);
          std::memcpy(dst + (from - offset), data + (from - p.item_offset), to - from);
          return Status::OK();
        });
  }

  Status ReadAll(std::optional<uint32_t> rank, const ItemSink& sink) override {
    ReadPlan plan = Plan(rank);
    for (size_t i = 0; i < items_.size(); ++i) {
      if (rank && items_[i].rank != *rank) continue;
      if (items_[i].size == 0) RETURN_IF_ERROR(sink(items_[i], 0, nullptr, 0));
    }
    // One stream over every object, so reads stay in flight across object
    // boundaries.
    const std::vector<ObjectChunks> objects = StreamOf(plan);
    return ReadChunksAcross(
        backend_, objects, options_.io_bytes,
        [&](size_t k, const ChunkTask& t, const uint8_t* data, const std::string& problem) -> Status {
          const ChunkPlace& p = plan.places[t.user];
          std::vector<uint8_t> recovered;
          if (data == nullptr) {
            RETURN_IF_ERROR(Recover(p, objects[k].object, *t.ref, problem, &recovered));
            data = recovered.data();
          }
          return sink(*p.item, p.item_offset, data, t.ref->length);
        });
  }

  VerifyReport Verify() {
    VerifyReport report;
    ReadPlan plan = Plan(std::nullopt);
    report.items = items_.size();
    const std::vector<ObjectChunks> objects = StreamOf(plan);
    std::vector<bool> judged(plan.places.size(), false);
    auto judge = [&](const std::string& object, const ChunkTask& t, const uint8_t* data,
                     const std::string& problem) {
      const ChunkPlace& p = plan.places[t.user];
      judged[t.user] = true;
      ++report.chunks;
      report.bytes += t.ref->length;
      if (data == nullptr) {
        report.bad.push_back(BadChunk{p.item->key, p.rank, p.chunk_index, object, t.ref->offset,
                                      t.ref->length, problem + SharedNote(object)});
      }
    };
    // One stream over every object (reads in flight across object
    // boundaries); missing objects, failed reads and bad checksums are judged
    // per chunk and reading goes on.
    Status st = ReadChunksAcross(backend_, objects, options_.io_bytes,
                                 [&](size_t k, const ChunkTask& t, const uint8_t* data,
                                     const std::string& problem) -> Status {
                                   judge(objects[k].object, t, data, problem);
                                   return Status::OK();
                                 });
    if (st.ok()) return report;
    // The stream stopped (a read that could not be reaped): the chunks left
    // are read object by object, and an object that cannot be read on has
    // every chunk not yet judged reported bad.
    for (const auto& o : objects) {
      std::vector<ChunkTask> left;
      for (const auto& t : o.tasks) {
        if (!judged[t.user]) left.push_back(t);
      }
      if (left.empty()) continue;
      Status ost = ReadChunks(backend_, o.object, left, options_.io_bytes,
                              [&](const ChunkTask& t, const uint8_t* data, const std::string& problem) -> Status {
                                judge(o.object, t, data, problem);
                                return Status::OK();
                              });
      if (ost.ok()) continue;
      for (const auto& t : left) {
        if (!judged[t.user]) judge(o.object, t, nullptr, ost.ToString());
      }
    }
    return report;
  }

 private:
  // The plan's objects with their chunks, in order, for ReadChunksAcross.
  std::vector<ObjectChunks> StreamOf(const ReadPlan& plan) const {
    std::vector<ObjectChunks> objects;
    for (const auto& [key, tasks] : plan.per_object) {
      objects.push_back(ObjectChunks{loaded_.manifests[key.first].objects[key.second].name, tasks});
    }
    return objects;
  }

  ReadPlan Plan(std::optional<uint32_t> rank) const {
    ReadPlan plan;
    for (size_t i = 0; i < items_.size(); ++i) {
      const ItemInfo& item = items_[i];
      if (rank && item.rank != *rank) continue;
      const ManifestItem& mi = *mitems_[i];
      uint64_t pos = 0;
      for (uint64_t c = 0; c < mi.chunks.size(); ++c) {
        plan.places.push_back(ChunkPlace{&item, &mi, item.rank, c, pos});
        pos += mi.chunks[c].length;
      }
    }
    // Tasks are created after `places` stops growing, so pointers stay valid.
    for (size_t k = 0; k < plan.places.size(); ++k) {
      const ChunkPlace& p = plan.places[k];
      const ChunkRef& ref = p.mitem->chunks[p.chunk_index];
      plan.per_object[{p.rank, ref.object}].push_back(ChunkTask{&ref, k});
    }
    for (auto& [key, tasks] : plan.per_object) {
      std::stable_sort(tasks.begin(), tasks.end(), [](const ChunkTask& a, const ChunkTask& b) {
        return a.ref->offset < b.ref->offset;
      });
    }
    return plan;
  }

  // A bad chunk: served from elsewhere by on_bad_, or the Corruption error.
  Status Recover(const ChunkPlace& p, const std::string& object, const ChunkRef& ref,
                 const std::string& problem, std::vector<uint8_t>* out) const {
    Status bad = BadChunkStatus(p, object, ref, problem);
    if (!on_bad_) return bad;
    out->resize(ref.length);
    Status st = on_bad_(*p.item, p.chunk_index, p.item_offset, ref.length, object, problem, out->data());
    if (!st.ok()) return Status::Corruption(bad.message() + "; no other copy: " + st.message());
    return Status::OK();
  }

  Status BadChunkStatus(const ChunkPlace& p, const std::string& object, const ChunkRef& ref,
                        const std::string& problem) const {
    return Status::Corruption(Label(info_.name, info_.step) + ": item '" + p.item->key +
                              "' (rank " + std::to_string(p.rank) + ") chunk " +
                              std::to_string(p.chunk_index) + " at " + object + " offset " +
                              std::to_string(ref.offset) + " length " +
                              std::to_string(ref.length) + ": " + problem + SharedNote(object));
  }

  // For a chunk this step shares with another (an incremental save's base):
  // which step's object it lies in, so that both steps are named.
  std::string SharedNote(const std::string& object) const {
    auto owner = StepOfDataObject(info_.name, object);
    if (!owner || *owner == info_.step) return "";
    return " (a chunk " + Label(info_.name, info_.step) + " shares with step " + std::to_string(*owner) +
           ", whose object holds it)";
  }

  Backend& backend_;
  StoreOptions options_;
  LoadedCheckpoint loaded_;
  CheckpointInfo info_;
  std::vector<ItemInfo> items_;
  std::vector<const ManifestItem*> mitems_;
  std::unordered_map<std::string, size_t> by_key_;
  BadChunkHandler on_bad_;
};

}  // namespace

Result<std::unique_ptr<CheckpointReader>> NewCheckpointReader(Backend& backend,
                                                              const StoreOptions& options,
                                                              LoadedCheckpoint loaded,
                                                              BadChunkHandler on_bad) {
  return std::unique_ptr<CheckpointReader>(
      new Reader(backend, options, std::move(loaded), std::move(on_bad)));
}

Result<VerifyReport> VerifyCheckpoint(Backend& backend, const StoreOptions& options,
                                      const LoadedCheckpoint& loaded) {
  Reader reader(backend, options, loaded);
  return reader.Verify();
}

Status CheckDataObjects(Backend& backend, const LoadedCheckpoint& loaded) {
  // Where each object's last chunk ends: a shorter object lost bytes.
  std::map<std::string, uint64_t> needed;
  for (const auto& m : loaded.manifests) {
    for (const auto& o : m.objects) needed[o.name] = std::max(needed[o.name], o.size);
  }
  if (needed.empty()) return Status::OK();
  std::vector<std::string> names;
  for (const auto& [n, size] : needed) names.push_back(n);
  ASSIGN_OR_RETURN(auto found, backend.Stat(names));
  std::map<std::string, uint64_t> sizes;
  for (const auto& o : found) sizes[o.name] = o.size;
  for (const auto& [n, size] : needed) {
    auto it = sizes.find(n);
    if (it == sizes.end()) return Status::Corruption("data object " + n + " is missing");
    if (it->second < size) {
      return Status::Corruption("data object " + n + " is " + std::to_string(it->second) +
                                " bytes, its manifest names " + std::to_string(size));
    }
  }
  return Status::OK();
}

}  // namespace sluice
