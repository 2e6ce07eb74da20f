#include "checkpoint/step_commit.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/rank_gatherer.h"
#include "checkpoint/references.h"
#include "checkpoint/replicas.h"
#include "checkpoint/writer_registry.h"
#include "format/abort_note.h"
#include "format/commit_record.h"
#include "format/layout.h"
#include "format/limits.h"
#include "io/crc32c.h"
#include "sluice/names.h"
#include "io/wall_clock.h"

namespace sluice {
namespace {

std::string Label(const CheckpointId& id) { return CheckpointLabel(id.name, id.step); }

}  // namespace

Result<std::unique_ptr<StepCommit>> StepCommit::Begin(Backend& backend, const CheckpointId& id,
                                                      std::string writer_id, StepCommitOptions options) {
  if (writer_id.empty()) writer_id = NewWriterIdAwayFromSlow(backend, id.name, id.step, options.rank);
  // Registered before anything is written (the claim included), so that gc
  // never mistakes this writer's objects for garbage nor takes its claim.
  RETURN_IF_ERROR(AcquireWriterLock(backend, id.name, id.step, writer_id).WithContext(Label(id)));
  return std::unique_ptr<StepCommit>(new StepCommit(backend, id, std::move(writer_id), std::move(options)));
}

StepCommit::StepCommit(Backend& backend, const CheckpointId& id, std::string writer_id, StepCommitOptions options)
    : backend_(backend), id_(id), writer_id_(std::move(writer_id)), options_(std::move(options)) {
  if (options_.commits) claim_ = std::make_unique<CommitClaimant>(backend_, id_.name, id_.step, writer_id_);
}

StepCommit::~StepCommit() { End(); }

void StepCommit::End() {
  if (ended_) return;
  ended_ = true;
  // The claim, still in flight where the writer failed early, lands while
  // the lock is held; a commit that did not happen takes it back, so that a
  // failed writer leaves the step as if never claimed, unless a retry will
  // seal it.
  if (claim_ != nullptr && (committed_ || options_.keep_claim_on_failure)) claim_->KeepClaim();
  claim_.reset();
  ReleaseWriterLock(backend_, id_.name, id_.step, writer_id_);
}

Status StepCommit::ProtectSteps(const std::set<uint64_t>& steps) {
  return PublishWriterRefs(backend_, id_.name, id_.step, writer_id_, steps);
}

Status StepCommit::Publish(CommitPlan plan, std::string* existing) {
  if (claim_ == nullptr) return Status::InvalidArgument(Label(id_) + ": a writer that does not commit cannot publish");
  plan.seal = claim_->seal();
  plan.claimed = claim_->Wait() == CommitClaimant::Outcome::kOurs;
  Status st = PublishCommit(backend_, plan, existing, &committed_seal_);
  if (st.ok()) {
    committed_ = true;
    committed_record_ = std::move(plan.commit_bytes);
  }
  return st;
}

Status StepCommit::PublishPeerCommit(const PeerCommitRecord& record) {
  if (record.commit.name != id_.name || record.commit.step != id_.step) {
    return Status::InvalidArgument(Label(id_) + ": a peer commit of " +
                                   CheckpointLabel(record.commit.name, record.commit.step));
  }
  const std::string object = PeerCommitObject(id_.name, id_.step);
  Status st = backend_.PublishIfAbsent(object, EncodePeerCommitRecord(record));
  if (!st.IsAlreadyExists()) return st;
  ASSIGN_OR_RETURN(PeerCommitRecord there, ReadPeerCommit(backend_, id_.name, id_.step));
  if (there.attempt == record.attempt && SameManifests(there.commit, record.commit)) return Status::OK();
  return Status::AlreadyExists(Label(id_) + " has a peer commit of another save (attempt " + there.attempt +
                               ") in " + backend_.uri());
}

bool StepCommit::RefusedAsCommitted() { return claim_ != nullptr && claim_->RefusedAsCommitted(); }

bool StepCommit::Committed() { return claim_ != nullptr && claim_->Wait() == CommitClaimant::Outcome::kCommitted; }

void StepCommit::PublishAbort(const Status& why) {
  if (!options_.abort_notes) return;
  PublishAbortNote(backend_, id_, options_.attempt, options_.rank,
                   why.ok() ? "it gave up before publishing its manifest" : why.ToString());
}

Status StepCommit::CheckNoAbort() {
  if (!options_.abort_notes) return Status::OK();
  auto bytes = backend_.ReadSmall(AbortNoteObject(id_.name, id_.step, options_.attempt));
  if (!bytes.ok()) return Status::OK();  // none, or not readable now: asked again next poll
  auto note = DecodeAbortNote(*bytes, "abort note");
  if (!note.ok() || note->attempt != options_.attempt) return Status::OK();  // another attempt's
  return Status::IOError("rank " + std::to_string(note->rank) + " gave up (" + note->reason +
                         "); the checkpoint is left uncommitted");
}

// The interval stays short (at most 50 ms): every rank's save time includes
// the wait for the last rank, and a long sleep past that moment would be
// pure added stall. One poll (a Stat of a few names) is cheap.
template <typename F>
Status StepCommit::Poll(F done, const std::string& what_on_timeout) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.rank_timeout_ms);
  auto interval = std::chrono::microseconds(1000);
  for (;;) {
    ASSIGN_OR_RETURN(bool finished, done());
    if (finished) return Status::OK();
    if (std::chrono::steady_clock::now() >= deadline) return Status::Unavailable(what_on_timeout);
    std::this_thread::sleep_for(interval);
    interval = std::min(interval * 3 / 2, std::chrono::microseconds(50'000));
  }
}

Status StepCommit::CommitAsCoordinator(const std::string& own_name, const std::string& own_bytes,
                                       const Manifest& own) {
  const std::string label = Label(id_);
  RankGatherer gatherer(backend_, id_, options_.world, options_.attempt,
                        RankManifest{own_name, own_bytes.size(), Crc32c(own_bytes.data(), own_bytes.size()), own});
  Status waited = Poll(
      [&]() -> Result<bool> {
        if (options_.world > 1) RETURN_IF_ERROR(CheckNoAbort());
        return gatherer.Gather();
      },
      "");
  if (!waited.ok()) {
    // No commit will come: the ranks waiting for it are told at once.
    PublishAbort(waited);
    if (waited.code() != StatusCode::kUnavailable) return waited.WithContext(label);
    return Status::Unavailable(label + ": rank(s) " + gatherer.Missing() + " of " + std::to_string(options_.world) +
                               " published no manifest within " + std::to_string(options_.rank_timeout_ms / 1000) +
                               " s; the checkpoint is left uncommitted");
  }
  auto plan = gatherer.Plan(label, NowUnixMs());
  if (!plan.ok()) {
    PublishAbort(plan.status());
    return Status::InvalidArgument(label + ": " + plan.status().message() + "; not committing");
  }
  plan->seal = claim_->seal();
  plan->claimed = claim_->Wait() == CommitClaimant::Outcome::kOurs;
  // (A claim that failed: COMMIT holds another writer's record or claim, or
  // the publish failed, and perhaps landed. PublishCommit claims again or
  // reads what is there, and seals whichever claim it finds, ours included.)
  std::string published;
  RETURN_IF_ERROR(PublishCommit(backend_, *plan, nullptr, &published));
  committed_ = true;
  committed_record_ = std::move(plan->commit_bytes);
  committed_seal_ = std::move(published);
  return Status::OK();
}

// Earlier writers of the same rank (a crashed attempt) may hold the first
// pointers.
Result<std::string> StepCommit::PublishRankPointer(const std::string& manifest_name) {
  for (uint32_t k = 0; k < limits::kMaxRankPointers; ++k) {
    std::string pointer = RankPointerObject(id_.name, id_.step, options_.rank, k);
    Status st = backend_.PublishIfAbsent(pointer, manifest_name);
    if (st.ok()) return pointer;
    if (!st.IsAlreadyExists()) return st.WithContext(Label(id_) + ": publish rank pointer");
  }
  return Status::Unavailable(Label(id_) + ": rank " + std::to_string(options_.rank) + " has " +
                             std::to_string(limits::kMaxRankPointers) +
                             " manifest pointers from earlier writers already (gc removes them once "
                             "no writer of the step is alive)");
}

Status StepCommit::WaitForCommit(const std::string& own_name) {
  const std::string label = Label(id_);
  bool listed_us = false;
  auto check = [&]() -> Result<bool> {
    auto record = ReadCommitRecord(backend_, id_.name, id_.step);
    if (!record.ok()) {
      if (!record.status().IsNotFound()) return record.status();
      RETURN_IF_ERROR(CheckNoAbort());
      return false;
    }
    ASSIGN_OR_RETURN(CommitRecord rec, DecodeCommitRecord(record->bytes, label + " commit record"));
    listed_us = options_.rank < rec.ranks.size() && rec.ranks[options_.rank].manifest == own_name;
    return true;
  };
  Status st = Poll(check, label + ": rank 0 did not commit within " + std::to_string(options_.rank_timeout_ms / 1000) +
                              " s; this rank's manifest is published but uncommitted");
  if (!st.ok() && st.code() != StatusCode::kUnavailable) return st.WithContext(label);
  RETURN_IF_ERROR(st);
  if (!listed_us) {
    return Status::AlreadyExists(label + " was committed with another writer's rank " +
                                 std::to_string(options_.rank) + " data");
  }
  return Status::OK();
}

void PublishAbortNote(Backend& backend, const CheckpointId& id, const std::string& attempt, uint32_t rank,
                      const std::string& reason) {
  AbortNote note;
  note.attempt = attempt;
  note.rank = rank;
  note.reason = reason;
  note.created_unix_ms = NowUnixMs();
  (void)backend.PublishIfAbsent(AbortNoteObject(id.name, id.step, attempt), EncodeAbortNote(note));
}

Status StepCommit::PointAndWait(const std::string& own_name) {
  ASSIGN_OR_RETURN(std::string pointer, PublishRankPointer(own_name));
  Status waited = WaitForCommit(own_name);
  // Rank 0 is done with it once a commit exists; gc takes what a crash
  // leaves.
  if (waited.ok()) (void)backend_.Remove(pointer);
  return waited;
}

}  // namespace sluice
