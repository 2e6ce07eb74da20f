#include "pipeline/tiered_reader.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "checkpoint/catalog.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/copies.h"
#include "checkpoint/parts.h"
#include "engine/object_copy.h"
#include "checkpoint/references.h"
#include "format/layout.h"
#include "io/crc32c.h"

namespace sluice {
namespace {

// A reader over the fastest committed copy that serves bad chunks from later
// tiers and then rewrites the bad objects from the good copy.
class TieredReader final : public CheckpointReader {
 public:
  TieredReader(std::vector<Store*> tiers, size_t primary, const std::string& name, uint64_t step,
               const StoreOptions& options, ReadRecovery* recovery, std::set<std::string> held_elsewhere)
      : tiers_(std::move(tiers)), primary_(primary), name_(name), step_(step), options_(options),
        recovery_(recovery), held_elsewhere_(std::move(held_elsewhere)) {}

  Status Init(LoadedCheckpoint loaded) {
    loaded_ = loaded;
    for (const auto& m : loaded.manifests) {
      for (const auto& it : m.items) {
        auto& crcs = chunk_crcs_[it.key];
        for (const auto& c : it.chunks) crcs.push_back(c.crc32c);
      }
    }
    ASSIGN_OR_RETURN(reader_, NewCheckpointReader(
                                  tiers_[primary_]->backend(), options_, std::move(loaded),
                                  [this](const ItemInfo& item, uint64_t chunk, uint64_t item_offset,
                                         uint64_t length, const std::string& object,
                                         const std::string& problem, uint8_t* out) {
                                    return Recover(item, chunk, item_offset, length, object, problem, out);
                                  }));
    return Status::OK();
  }

  const CheckpointInfo& info() const override { return reader_->info(); }
  const std::vector<ItemInfo>& items() const override { return reader_->items(); }
  Status ReadRange(std::string_view key, uint64_t offset, void* out, uint64_t len) override {
    Status st = reader_->ReadRange(key, offset, out, len);
    Repair();
    return st;
  }
  Status ReadAll(std::optional<uint32_t> rank, const ItemSink& sink) override {
    Status st = reader_->ReadAll(rank, sink);
    Repair();
    return st;
  }

 private:
  Status Recover(const ItemInfo& item, uint64_t chunk, uint64_t item_offset, uint64_t length,
                 const std::string& object, const std::string& problem, uint8_t* out) {
    Status last = held_elsewhere_.count(object)
                      ? Status::Unavailable("rank " + std::to_string(item.rank) + "'s part of " +
                                            CheckpointLabel(name_, step_) +
                                            " is held by other hosts, not here, and no later tier holds the step")
                      : Status::NotFound("no later tier holds a committed copy");
    for (size_t j = primary_ + 1; j < tiers_.size(); ++j) {
      if (!others_.count(j)) {
        auto r = tiers_[j]->OpenCheckpoint(name_, step_);
        if (!r.ok()) {
          others_[j] = nullptr;
          last = r.status();
        } else {
          others_[j] = std::move(r).value();
        }
      }
      if (others_[j] == nullptr) continue;
      Status st = others_[j]->ReadRange(item.key, item_offset, out, length);
      if (!st.ok()) {
        last = st;
        continue;
      }
      // That tier checked the bytes against its own manifest: they must
      // also be the chunk this checkpoint's commit names (a tier holding
      // another save of the step, after a removal there, is not a copy).
      auto crcs = chunk_crcs_.find(item.key);
      if (crcs == chunk_crcs_.end() || chunk >= crcs->second.size() ||
          Crc32c(out, length) != crcs->second[chunk]) {
        last = Status::Corruption("item '" + item.key + "' chunk " + std::to_string(chunk) + " on tier " +
                                  std::to_string(j) + " (" + tiers_[j]->backend().uri() +
                                  ") is not the chunk this tier's commit names (another save of the step?)");
        continue;
      }
      // Another host's rank of a part: read where it lives, nothing to repair.
      if (held_elsewhere_.count(object)) return Status::OK();
      if (recovery_ != nullptr) {
        recovery_->fallbacks.push_back(
            "item '" + item.key + "' chunk " + std::to_string(chunk) + ": " + problem + " in " +
            object + " on tier " + std::to_string(primary_) + " (" + tiers_[primary_]->backend().uri() +
            "); read from tier " + std::to_string(j) + " (" + tiers_[j]->backend().uri() + ")");
      }
      if (!to_repair_.count(object)) to_repair_[object] = j;
      return Status::OK();
    }
    return last;
  }

  void Repair() {
    // Each good tier's copy, loaded once for all the objects it repairs.
    std::map<size_t, Result<LoadedCheckpoint>> copies;
    for (const auto& [object, good] : to_repair_) {
      auto copy = copies.find(good);
      if (copy == copies.end()) copy = copies.emplace(good, LoadCheckpoint(tiers_[good]->backend(), name_, step_)).first;
      Status st = copy->second.ok() ? RepairOne(object, good, *copy->second) : copy->second.status();
      if (recovery_ != nullptr) {
        recovery_->repairs.push_back(
            (st.ok() ? "rewrote " : "could not rewrite ") + object + " on tier " +
            std::to_string(primary_) + " (" + tiers_[primary_]->backend().uri() + ") from tier " +
            std::to_string(good) + (st.ok() ? "" : ": " + st.ToString()));
      }
    }
    to_repair_.clear();
  }

  // Rewrites `object` on the primary tier from tier `good`'s copy (`there`)
  // of the same save, which may name it otherwise (checkpoint/copies.h). Written
  // beside the bad object (every chunk checked on the way), then swapped in
  // whole: the committed object is never half rewritten. A staged object a
  // crash leaves is garbage gc removes.
  Status RepairOne(const std::string& object, size_t good, const LoadedCheckpoint& there) {
    Backend& src = tiers_[good]->backend();
    if (!SameSave(loaded_, there)) return Status::Corruption("that tier holds another save of the step");
    const auto names = ObjectNamesAcross(loaded_, there);
    auto it = names.find(object);
    if (it == names.end()) return Status::NotFound("no object of that tier's copy corresponds to it");
    std::vector<ObjectToCopy> one;
    for (const auto& m : there.manifests) {
      for (auto& o : ObjectsToCopy(m)) {
        if (o.name == it->second && one.empty()) one.push_back(std::move(o));
      }
    }
    if (one.empty()) return Status::NotFound("no object of that tier's copy corresponds to it");
    RETURN_IF_ERROR(AddKnownChunks(src, name_, &one));
    CopyControl control;  // a foreground repair: not throttled
    control.io_bytes = options_.io_bytes;
    // Staged under a new name, placed and hedged like any data object.
    ObjectToCopy& o = one[0];
    o.dst_name = RepairStagingObject(name_, step_, NewWriterId(), object);
    o.placed = true;
    Backend& dst = tiers_[primary_]->backend();
    std::vector<std::string> stored;
    Status st = CopyObjects(src, dst, one, control, &stored);
    if (st.ok()) st = dst.Replace(stored[0], object);
    if (!st.ok()) (void)dst.Remove(stored.empty() ? o.dst_name : stored[0]);
    return st;
  }

  std::vector<Store*> tiers_;
  size_t primary_;
  std::string name_;
  uint64_t step_;
  StoreOptions options_;
  ReadRecovery* recovery_;
  std::unique_ptr<CheckpointReader> reader_;
  std::map<size_t, std::unique_ptr<CheckpointReader>> others_;
  std::map<std::string, size_t> to_repair_;  // object -> tier with a good copy
  LoadedCheckpoint loaded_;  // the primary's copy
  std::set<std::string> held_elsewhere_;  // objects of ranks the primary's part does not hold
  std::map<std::string, std::vector<uint32_t>> chunk_crcs_;  // item key -> its chunks' crc32c
};

// Tier `k`'s part of (name, step) combined with the first later tier's
// whole copy (parts.h), and the objects of the ranks the part lacks.
// NotFound if tier `k` holds no part; an error naming tier `k` if no later
// tier's copy loads or matches.
Result<LoadedCheckpoint> LoadPartOnTiers(const std::vector<Store*>& stores, size_t k, const std::string& name,
                                         uint64_t step, const ManifestsElsewhere& elsewhere,
                                         std::set<std::string>* held_elsewhere, LoadedCheckpoint* held_here) {
  ASSIGN_OR_RETURN(LoadedPart part, LoadPart(stores[k]->backend(), name, step));
  Status why = Status::NotFound("no later tier is given");
  for (size_t j = k + 1; j < stores.size(); ++j) {
    auto whole = LoadCheckpoint(stores[j]->backend(), name, step);
    if (!whole.ok()) {
      why = whole.status().WithContext("tier " + std::to_string(j));
      continue;
    }
    ASSIGN_OR_RETURN(LoadedCheckpoint combined, CombinePart(part, *whole));
    held_here->commit = part.commit;
    for (uint32_t r = 0; r < combined.manifests.size(); ++r) {
      if (part.manifests.count(r)) {
        held_here->manifests.push_back(combined.manifests[r]);
        continue;
      }
      for (const auto& o : combined.manifests[r].objects) held_elsewhere->insert(o.name);
    }
    return combined;
  }
  if (part.Whole()) {
    // Peer replicas and the host's own ranks: every rank is here (a safe
    // step no later tier holds yet, or one restored from peers).
    ASSIGN_OR_RETURN(LoadedCheckpoint alone, WholePart(part));
    *held_here = alone;
    return alone;
  }
  if (k == 0 && !elsewhere.empty()) {
    // A safe step whose other ranks other hosts hold (a collective restore
    // from peers): they are listed from the manifests those hosts sent.
    ASSIGN_OR_RETURN(LoadedCheckpoint listed, PartWithManifestsElsewhere(part, elsewhere, held_elsewhere));
    held_here->commit = part.commit;
    for (const auto& [rank, m] : part.manifests) held_here->manifests.push_back(m);
    return listed;
  }
  return Status::Unavailable("holds only a part of " + CheckpointLabel(name, step) + " (" +
                             std::to_string(part.manifests.size()) + " of its " + std::to_string(part.commit.world) +
                             " ranks), and the rest cannot be read from a later tier: " + why.ToString());
}

}  // namespace

Result<std::unique_ptr<CheckpointReader>> OpenTieredReader(std::vector<Store*> tiers, size_t primary,
                                                           const std::string& name, uint64_t step,
                                                           const StoreOptions& options,
                                                           ReadRecovery* recovery,
                                                           LoadedCheckpoint loaded,
                                                           std::set<std::string> held_elsewhere) {
  auto reader = std::make_unique<TieredReader>(std::move(tiers), primary, name, step, options, recovery,
                                               std::move(held_elsewhere));
  RETURN_IF_ERROR(reader->Init(std::move(loaded)));
  return std::unique_ptr<CheckpointReader>(std::move(reader));
}

Result<std::unique_ptr<CheckpointReader>> OpenOnTiers(const std::vector<Store*>& stores, std::string_view name,
                                                      std::optional<uint64_t> step, const StoreOptions& options,
                                                      ReadRecovery* recovery, const ManifestsElsewhere& elsewhere) {
  RETURN_IF_ERROR(ValidateCheckpointName(name));
  const std::string n(name);
  Status first;
  if (!step) {
    // The newest step committed anywhere, damaged or not: a damaged newest
    // step is reported below, never passed over for an older one.
    std::optional<uint64_t> best;
    for (Store* s : stores) {
      auto newest = NewestCommittedStep(s->backend(), n);
      if (newest.ok()) {
        best = best ? std::max(*best, newest->step) : newest->step;
      } else if (first.ok() || first.IsNotFound()) {
        first = newest.status();
      }
    }
    // A safe step (peer replicas, doc/peer.md) newer than any commit, when
    // tier 0, the only tier a peer commit is published to, holds every
    // rank of it.
    auto safe = NewestWholeSafeStep(stores[0]->backend(), n, best);
    if (safe.ok() && *safe) best = *safe;
    if (!best) return first.ok() ? Status::NotFound("no committed checkpoint named '" + n + "'") : first;
    step = best;
    first = Status::OK();
  }
  // A copy whose data objects are missing is still opened (its readable
  // chunks are read there, the rest from a later tier), but only if some
  // tier holds an intact copy: otherwise the restore could only fail
  // part-way, and it fails here instead, naming the step.
  std::string damage;
  bool any_intact = false;
  const size_t fallbacks_before = recovery != nullptr ? recovery->fallbacks.size() : 0;
  std::optional<size_t> primary;
  std::optional<LoadedCheckpoint> primary_loaded;
  std::set<std::string> primary_held_elsewhere;
  for (size_t k = 0; k < stores.size(); ++k) {
    auto loaded = LoadCheckpoint(stores[k]->backend(), n, *step);
    // A host's part (parts.h): its ranks from here, the rest from a later tier.
    std::set<std::string> held_elsewhere;
    LoadedCheckpoint held_here;
    bool part = false;
    if (loaded.status().IsNotFound()) {
      auto combined = LoadPartOnTiers(stores, k, n, *step, elsewhere, &held_elsewhere, &held_here);
      if (combined.status().code() == StatusCode::kUnavailable) {
        // Not damage: the rest lives on a tier that cannot be read now.
        if (first.ok() || first.IsNotFound()) first = combined.status().WithContext("tier " + std::to_string(k));
        continue;
      }
      if (!combined.status().IsNotFound()) {
        loaded = std::move(combined);
        part = true;
      }
    }
    if (!loaded.ok()) {
      if (!loaded.status().IsNotFound()) {
        damage += (damage.empty() ? "" : "; ") + ("tier " + std::to_string(k) + ": " + loaded.status().message());
        if (recovery != nullptr && k + 1 < stores.size()) {
          recovery->fallbacks.push_back("tier " + std::to_string(k) + " (" + stores[k]->backend().uri() +
                                        "): " + loaded.status().ToString() + "; trying the next tier");
        }
      }
      if (first.ok() || (first.IsNotFound() && !loaded.status().IsNotFound())) first = loaded.status();
      continue;
    }
    Status data = CheckDataObjects(stores[k]->backend(), part ? held_here : *loaded);
    if (data.ok()) {
      any_intact = true;
    } else {
      damage += (damage.empty() ? "" : "; ") + ("tier " + std::to_string(k) + ": " + data.message());
    }
    if (!primary) {
      primary = k;
      primary_loaded = std::move(loaded).value();
      primary_held_elsewhere = std::move(held_elsewhere);
    }
    if (any_intact) break;
  }
  if (!any_intact && !damage.empty()) {
    if (recovery != nullptr) recovery->fallbacks.resize(fallbacks_before);  // the error says it all
    return Status::Corruption(CheckpointLabel(n, *step) + " is damaged on every tier that holds it (" + damage +
                              "); --step latest-good restores the newest intact step instead");
  }
  if (!primary) return first;
  return OpenTieredReader(stores, *primary, n, *step, options, recovery, std::move(*primary_loaded),
                          std::move(primary_held_elsewhere));
}

Result<uint64_t> LatestGoodStepOnTiers(const std::vector<Store*>& stores, std::string_view name) {
  RETURN_IF_ERROR(ValidateCheckpointName(name));
  std::optional<uint64_t> best;
  Status first;
  for (Store* s : stores) {
    auto good = sluice::LatestGoodStep(s->backend(), name);
    if (good.ok()) {
      best = best ? std::max(*best, *good) : *good;
    } else if (first.ok() || first.IsNotFound()) {
      first = good.status();
    }
  }
  if (best) return *best;
  return first.ok() ? Status::NotFound("no intact committed checkpoint named '" + std::string(name) + "'") : first;
}

}  // namespace sluice
