#include "checkpoint/checkpoint_writer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <set>
#include <thread>
#include <unordered_set>

#include "checkpoint/away_from_slow.h"
#include "format/commit_record.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "io/crc32c.h"
#include "engine/stream_writer.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/commit_coordinator.h"
#include "checkpoint/latest_hint.h"
#include "checkpoint/step_commit.h"
#include "checkpoint/writer_registry.h"
#include "format/limits.h"
#include "io/wall_clock.h"

namespace sluice {
namespace {

class MemorySource final : public ItemSource {
 public:
  MemorySource(const void* data, uint64_t size) : p_(static_cast<const uint8_t*>(data)), left_(size) {}
  Result<size_t> Read(void* buf, size_t len) override {
    size_t n = static_cast<size_t>(std::min<uint64_t>(len, left_));
    std::memcpy(buf, p_, n);
    p_ += n;
    left_ -= n;
    return n;
  }
 private:
  const uint8_t* p_;
  uint64_t left_;
};

// Pointers per rank and step before a writer gives up (gc removes those of
// writers that are gone).

std::string CheckpointLabel(const CheckpointId& id) { return sluice::CheckpointLabel(id.name, id.step); }

// What a writer does: the whole protocol on one store, or one of the two
// halves of a host-local tier 0's save (checkpoint_writer.h).
enum class Role { kWhole, kPart, kRelay };

// Whether a writer commits the step, and so claims its `COMMIT` when it
// begins (CommitClaimant): rank 0 of a whole save or of a relay. A part's
// writer commits nothing (its relay does); other ranks wait for rank 0.
bool Commits(uint32_t rank, Role role) { return role != Role::kPart && rank == 0; }

class Writer final : public RankWriter {
 public:
  Writer(Backend& backend, const StoreOptions& options, const CheckpointId& id, uint32_t rank,
         uint32_t world, const SaveOptions& save, std::unique_ptr<StepCommit> step, Role role)
      : role_(role),
        backend_(backend),
        save_(save),
        options_(options),
        id_(id),
        rank_(rank),
        world_(world),
        writer_id_(step->writer_id()),
        data_(backend, [this](uint32_t seq) { return DataObject(id_.name, id_.step, rank_, writer_id_, seq); },
              options.object_bytes, options.io_bytes, options.chunk_bytes),
        step_(std::move(step)) {}

  ~Writer() override { Retire(); }

  void SetExpectedBytes(uint64_t total_bytes) override { data_.SetExpectedBytes(total_bytes); }

  Status AddItem(std::string_view key, std::string_view metadata, uint64_t size,
                 ItemSource& source) override {
    RETURN_IF_ERROR(sticky_);
    if (finished_) return Status::InvalidArgument("AddItem after Commit");
    RETURN_IF_ERROR(ValidateItem(key, metadata));
    if (!keys_.insert(std::string(key)).second) {
      return Status::InvalidArgument("duplicate item key '" + std::string(key) + "'");
    }
    ManifestItem item;
    item.key = std::string(key);
    item.metadata = std::string(metadata);
    item.size = size;
    // A claim refused because the step is committed: nothing to write.
    // (Such a writer skipped the check at its creation: NewWriter.)
    if (step_->RefusedAsCommitted()) {
      sticky_ = Status::AlreadyExists(CheckpointLabel(id_) + " is already committed");
      return sticky_;
    }
    Status st = data_.Append(size, source, &item.chunks);
    if (!st.ok()) {
      sticky_ = st.WithContext("save item '" + item.key + "'");
      return sticky_;
    }
    manifest_.items.push_back(std::move(item));
    return Status::OK();
  }

  Status AddItem(std::string_view key, std::string_view metadata, const void* data,
                 uint64_t size) override {
    MemorySource src(data, size);
    return AddItem(key, metadata, size, src);
  }

  Result<SaveStats> Commit() override {
    return CommitAfter([&]() -> Status {
      RETURN_IF_ERROR(data_.Finish().WithContext(CheckpointLabel(id_)));
      manifest_.objects = data_.objects();
      return Status::OK();
    });
  }

  std::string DataObjectName(uint32_t seq) const override {
    return DataObject(id_.name, id_.step, rank_, writer_id_, seq);
  }

  Result<std::optional<BaseIndex>> ReferenceBase() override {
    if (!save_.incremental) return std::optional<BaseIndex>();
    return sluice::ReferenceBase(backend_, id_.name, id_.step, rank_, writer_id_);
  }

  void Abandon(const Status& why) override {
    if (failure_.ok()) failure_ = why;
    Retire();
  }

  const Published& published() const override { return published_; }
  const std::string& writer_id() const override { return writer_id_; }

  Result<SaveStats> CommitPublished(const Published& published) override {
    if (role_ != Role::kRelay) return Status::InvalidArgument("CommitPublished on a writer that is not a relay");
    return CommitAfter([&]() -> Status {
      ASSIGN_OR_RETURN(manifest_, DecodeManifest(published.bytes, "manifest " + published.object));
      if (manifest_.name != id_.name || manifest_.step != id_.step || manifest_.rank != rank_ ||
          manifest_.world != world_ || manifest_.writer_id != writer_id_ ||
          published.object != ManifestObject(id_.name, id_.step, rank_, writer_id_)) {
        return Status::InvalidArgument("manifest " + published.object + " is not this relay's");
      }
      published_ = published;
      return Status::OK();
    });
  }

  Result<SaveStats> CommitWritten(std::vector<ManifestItem> items,
                                  std::vector<DataObjectRef> objects) override {
    if (!finished_ && !manifest_.items.empty()) return Status::InvalidArgument("CommitWritten after AddItem");
    return CommitAfter([&]() -> Status {
      manifest_.items = std::move(items);
      manifest_.objects = std::move(objects);
      return Status::OK();
    });
  }

 private:
  // The commit of either kind: `complete` makes the data durable and fills
  // the manifest's objects, then the manifest is published and committed.
  template <typename F>
  Result<SaveStats> CommitAfter(F complete) {
    if (finished_) return Status::InvalidArgument("Commit called twice");
    finished_ = true;
    // Whatever the outcome, this writer is done when Commit returns, and no
    // write from the caller's memory is in flight any more.
    // A part writer that succeeded keeps its lock until it is destroyed.
    struct RetireOnReturn {
      Writer* w;
      bool keep_lock = false;
      ~RetireOnReturn() {
        if (keep_lock) {
          w->data_.WaitOutWrites();
        } else {
          w->Retire();
        }
      }
    } retire{this};
    Result<SaveStats> result = [&]() -> Result<SaveStats> {
      RETURN_IF_ERROR(sticky_);
      // Refuse early if someone committed since this writer was created:
      // no point publishing. A writer that commits skips the read: its claim
      // says so (below), and the read would be one more wait on the fixed
      // name's placement, which may be slow.
      if (!step_->commits()) {
        if (ReadCommitRecord(backend_, id_.name, id_.step).ok()) {
          return Status::AlreadyExists(CheckpointLabel(id_) + " is already committed");
        }
      }
      RETURN_IF_ERROR(complete());
      // A claim refused for a committed step: before the manifest is
      // published, so that this writer's data goes with it (Retire).
      if (step_->Committed()) {
        return Status::AlreadyExists(CheckpointLabel(id_) + " is already committed");
      }
      return PublishAndCommit();
    }();
    if (!result.ok()) failure_ = result.status();  // for Retire's abort note
    retire.keep_lock = result.ok() && role_ == Role::kPart;
    return result;
  }

  Result<SaveStats> PublishAndCommit() {
    const std::string label = CheckpointLabel(id_);
    std::string encoded;
    std::string manifest_name;
    if (role_ == Role::kRelay) {
      // The part's manifest, byte for byte: the part record on the host's
      // tier 0 is this store's commit record, which names its size and crc.
      encoded = published_.bytes;
      manifest_name = published_.object;
    } else {
      manifest_.name = id_.name;
      manifest_.step = id_.step;
      manifest_.rank = rank_;
      manifest_.world = world_;
      manifest_.writer_id = writer_id_;
      manifest_.attempt = save_.attempt;
      manifest_.created_unix_ms = NowUnixMs();
      manifest_.chunk_bytes = options_.chunk_bytes;
      encoded = EncodeManifest(manifest_);
      manifest_name = ManifestObject(id_.name, id_.step, rank_, writer_id_);
    }
    // Set before publishing: a publish that fails late (the directory fsync)
    // may still have made the manifest visible, and then our data must stay.
    manifest_published_ = true;
    Status published = backend_.PublishIfAbsent(manifest_name, encoded);
    if (published.IsAlreadyExists() && role_ == Role::kRelay) {
      // Ours from an earlier try of this relay, if its bytes match.
      auto there = backend_.ReadSmall(manifest_name);
      if (there.ok() && *there == encoded) published = Status::OK();
    }
    RETURN_IF_ERROR(published.WithContext(label));
    if (role_ == Role::kPart) published_ = Published{manifest_name, encoded};

    SaveStats stats;
    stats.bytes = manifest_.TotalBytes();
    stats.items = manifest_.items.size();
    for (const auto& it : manifest_.items) stats.chunks += it.chunks.size();
    for (uint32_t o = 0; o < manifest_.objects.size(); ++o) stats.objects += manifest_.IsReference(o) ? 0 : 1;

    if (role_ == Role::kPart) return stats;  // committed elsewhere, by a relay
    if (rank_ == 0) {
      RETURN_IF_ERROR(step_->CommitAsCoordinator(manifest_name, encoded, manifest_));
      stats.committed = true;
      // Best effort: a hint not written, or overwritten by a concurrent save
      // of another step, only costs the next save a listing or an older base.
      // Written beside the release of the writer lock (Retire waits for
      // both): neither needs the other, and each may wait on a slow placement.
      // It carries the commit record, so that the next save need not read it
      // before building on this step (latest_hint.h).
      try {
        hint_written_ = std::async(std::launch::async, [this] {
          PublishLatestHint(backend_, id_.name, id_.step, step_->committed_record(), step_->committed_seal());
        });
      } catch (...) {  // no thread (or memory) to be had: written here
        PublishLatestHint(backend_, id_.name, id_.step, step_->committed_record(), step_->committed_seal());
      }
    } else {
      RETURN_IF_ERROR(step_->PointAndWait(manifest_name));
    }
    return stats;
  }

  // Ends this writer's part: a writer that failed or was abandoned before
  // publishing its manifest removes its own data objects (nobody can
  // reference them; after the manifest is published rank 0 may still commit
  // it, so that is left to gc). Then the writer lock goes: from here on gc
  // may reclaim what of ours is not committed, and rank 0 ignores our
  // manifest.
  void Retire() {
    if (retired_) return;
    retired_ = true;
    // First: a write still in flight would read memory the caller may free
    // once we return, and on RADOS it would create an object again after
    // RemoveOwnData removed it.
    data_.WaitOutWrites();
    if (!manifest_published_) {
      RemoveOwnData();
      step_->PublishAbort(failure_);
    }
    // The claim (kept if this writer committed, taken back otherwise), then
    // the lock.
    step_->End();
    if (hint_written_.valid()) hint_written_.wait();
  }

  void RemoveOwnData() {
    auto listed = backend_.List(StepPrefix(id_.name, id_.step) + "data/");
    if (!listed.ok()) return;
    for (const auto& o : *listed) {
      if (o.name.find(writer_id_) != std::string::npos) (void)backend_.Remove(o.name);
    }
  }

  const Role role_;
  Backend& backend_;
  SaveOptions save_;
  StoreOptions options_;
  CheckpointId id_;
  uint32_t rank_;
  uint32_t world_;
  std::string writer_id_;
  StreamWriter data_;
  std::unique_ptr<StepCommit> step_;  // the lock, the claim, the gathering or the wait, abort notes
  Manifest manifest_;
  std::unordered_set<std::string> keys_;
  Status sticky_;
  bool finished_ = false;
  bool manifest_published_ = false;
  bool retired_ = false;
  std::future<void> hint_written_;  // the latest-step hint, written after the commit
  Status failure_;  // why Commit failed, or what Abandon was told
  Published published_;  // a part's manifest as published; a relay's to publish
};

}  // namespace

Result<std::unique_ptr<CheckpointWriter>> NewCheckpointWriter(Backend& backend,
                                                              const StoreOptions& options,
                                                              const CheckpointId& id,
                                                              uint32_t rank, uint32_t world,
                                                              const SaveOptions& save) {
  ASSIGN_OR_RETURN(auto w, NewRankWriter(backend, options, id, rank, world, save));
  return std::unique_ptr<CheckpointWriter>(std::move(w));
}

namespace {

// `check_committed`: refuse a step already committed (a writer that commits
// learns that from its claim instead).
Status ValidateWriter(Backend& backend, const StoreOptions& options, const CheckpointId& id, uint32_t rank,
                      uint32_t world, const SaveOptions& save, bool check_committed) {
  if (!backend.caps().atomic_publish_if_absent) {
    return Status::NotSupported("store " + backend.uri() + " cannot publish atomically");
  }
  RETURN_IF_ERROR(ValidateCheckpointName(id.name));
  if (save.attempt.size() > limits::kMaxAttemptBytes) {
    return Status::InvalidArgument("save attempt id longer than 128 bytes");
  }
  if (world == 0 || world > limits::kMaxWorld) {
    return Status::InvalidArgument("world size " + std::to_string(world) + " outside 1..1000000");
  }
  if (rank >= world) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " is not below world size " +
                                   std::to_string(world));
  }
  RETURN_IF_ERROR(options.Validate());
  if (!check_committed) return Status::OK();
  if (ReadCommitRecord(backend, id.name, id.step).ok()) {
    return Status::AlreadyExists(CheckpointLabel(id) + " is already committed");
  }
  return Status::OK();
}

Result<std::unique_ptr<RankWriter>> NewWriter(Backend& backend, const StoreOptions& options,
                                              const CheckpointId& id, uint32_t rank, uint32_t world,
                                              const SaveOptions& save, std::string writer_id, Role role) {
  // Checked here: a writer that does not commit (and so does not claim),
  // and any on a store without placements. One that commits where a
  // placement may be slow learns it from its claim instead, without a wait
  // in the slow placement's queue before its first write.
  const bool check_committed = !Commits(rank, role) || !NamesMayBeSlow(backend);
  RETURN_IF_ERROR(ValidateWriter(backend, options, id, rank, world, save, check_committed));
  StepCommitOptions commit;
  commit.rank = rank;
  commit.world = world;
  commit.attempt = save.attempt;
  commit.rank_timeout_ms = options.rank_timeout_ms;
  commit.commits = Commits(rank, role);
  // Only for an attempt id used by this save alone: a note of an earlier
  // launch with the same id would fail this one. A part writer's store is
  // its host's own: no other rank would read one.
  commit.abort_notes = role != Role::kPart && world > 1 && !save.attempt.empty() && save.attempt_is_unique;
  ASSIGN_OR_RETURN(auto step, StepCommit::Begin(backend, id, std::move(writer_id), std::move(commit)));
  return std::unique_ptr<RankWriter>(new Writer(backend, options, id, rank, world, save, std::move(step), role));
}

}  // namespace

Result<std::unique_ptr<RankWriter>> NewRankWriter(Backend& backend, const StoreOptions& options,
                                                  const CheckpointId& id, uint32_t rank,
                                                  uint32_t world, const SaveOptions& save) {
  return NewWriter(backend, options, id, rank, world, save, "", Role::kWhole);
}

Result<std::unique_ptr<RankWriter>> NewPartWriter(Backend& local, Backend& shared, const StoreOptions& options,
                                                  const CheckpointId& id, uint32_t rank,
                                                  uint32_t world, const SaveOptions& save) {
  return NewWriter(local, options, id, rank, world, save, NewWriterIdAwayFromSlow(shared, id.name, id.step, rank),
                   Role::kPart);
}

Result<std::unique_ptr<RankWriter>> NewRelayWriter(Backend& shared, const StoreOptions& options,
                                                   const CheckpointId& id, uint32_t rank,
                                                   uint32_t world, const SaveOptions& save,
                                                   const std::string& writer_id) {
  return NewWriter(shared, options, id, rank, world, save, writer_id, Role::kRelay);
}

}  // namespace sluice
