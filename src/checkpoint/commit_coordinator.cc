#include "checkpoint/commit_coordinator.h"

#include <chrono>
#include <map>

#include "checkpoint/away_from_slow.h"
#include "checkpoint/checkpoint_reader.h"
#include "format/commit_record.h"
#include "format/layout.h"
#include "io/wall_clock.h"

namespace sluice {
namespace {

// The claim's bytes for `seal`, the seal of (name, step).
std::string ClaimBytes(std::string_view name, uint64_t step, const std::string& seal) {
  return EncodeCommitClaim(CommitClaim{std::string(name), step, seal, NowUnixMs()});
}

// Claims `COMMIT` of (name, step) for `seal`, now.
CommitClaimant::Outcome Claim(Backend& backend, const std::string& name, uint64_t step, const std::string& seal) {
  Status st = backend.PublishIfAbsent(CommitObject(name, step), ClaimBytes(name, step, seal));
  if (st.ok()) return CommitClaimant::Outcome::kOurs;
  if (st.IsAlreadyExists() && ReadCommitRecord(backend, name, step).ok()) return CommitClaimant::Outcome::kCommitted;
  return CommitClaimant::Outcome::kOther;
}

}  // namespace

CommitClaimant::CommitClaimant(Backend& backend, std::string name, uint64_t step, std::string_view writer)
    : backend_(backend), name_(std::move(name)), step_(step) {
  const uint32_t salt = PickAwayFromSlow(backend_, 256, [&](uint32_t k) {
    return std::vector<std::string>{SealObject(name_, step_, writer, k)};
  });
  seal_ = SealObject(name_, step_, writer, salt);
  try {
    outcome_ = std::async(std::launch::async, [this] { return Claim(backend_, name_, step_, seal_); }).share();
  } catch (...) {  // no thread (or memory) to be had: claimed here
    std::promise<Outcome> now;
    now.set_value(Claim(backend_, name_, step_, seal_));
    outcome_ = now.get_future().share();
  }
}

CommitClaimant::~CommitClaimant() {
  if (!outcome_.valid() || outcome_.get() != Outcome::kOurs || keep_) return;
  if (!backend_.PublishIfAbsent(seal_, std::string(kFencedSeal)).ok()) return;  // sealed, or cannot tell
  // The fence goes too where the claim could not: a claim left unfenced is
  // sealed by the next writer of the step; a fenced one waits for gc.
  (void)backend_.Remove(CommitObject(name_, step_));
  (void)backend_.Remove(seal_);
}

bool CommitClaimant::RefusedAsCommitted() {
  return outcome_.wait_for(std::chrono::seconds(0)) == std::future_status::ready &&
         outcome_.get() == Outcome::kCommitted;
}

CommitClaimant::Outcome CommitClaimant::Wait() { return outcome_.get(); }

namespace {

// The first object of `plan` that is missing or short; empty if none.
// (Stat of the named objects, not a List of the step: a List may wait on
// every placement of the store.)
Result<std::string> FirstMissing(Backend& backend, const CommitPlan& plan) {
  std::vector<std::string> names;
  names.reserve(plan.objects.size());
  for (const auto& n : plan.objects) names.push_back(n.object);
  ASSIGN_OR_RETURN(auto found, backend.Stat(names));
  std::map<std::string, uint64_t> present;
  for (const auto& o : found) present[o.name] = o.size;
  for (const auto& n : plan.objects) {
    auto it = present.find(n.object);
    if (it == present.end() || it->second < n.min_bytes) {
      return n.object + (n.owner.empty() ? "" : " of " + n.owner);
    }
  }
  return std::string();
}

}  // namespace

namespace {

// Publishes the record at the seal of the claim at `COMMIT`: the caller's
// own (claimed now if its claim in the background did not land), else the
// one another writer left there. `*where` gets the seal published, `*claim`
// the claim's bytes when it was another writer's.
Status PublishRecord(Backend& backend, const CommitPlan& plan, std::string* where, std::string* claim,
                     std::string* existing) {
  auto parsed = ParseObjectName(plan.commit_object);
  if (!parsed) return Status::InvalidArgument("not a commit record's name: " + plan.commit_object);
  *where = plan.seal;
  Status claimed = plan.claimed ? Status::OK()
                                : backend.PublishIfAbsent(plan.commit_object,
                                                          ClaimBytes(parsed->name, parsed->step, plan.seal));
  if (claimed.IsAlreadyExists()) {
    // A record (a store written before every commit was claimed), or a
    // claim: of a writer still running, or of one that died before its
    // seal. Either way, whoever publishes the seal first commits.
    auto there = backend.ReadSmall(plan.commit_object);
    if (!there.ok()) {
      if (there.status().IsNotFound()) {  // removed since (gc or rm of a dead claim): the next try may publish
        return Status::Unavailable(plan.label + ": its commit record came and went while committing");
      }
      return there.status().WithContext(plan.label + ": read the commit record there");
    }
    if (!IsCommitClaim(*there)) {
      if (existing != nullptr) *existing = std::move(there).value();
      return Status::AlreadyExists(plan.label + " was committed by another writer first");
    }
    ASSIGN_OR_RETURN(CommitClaim found, DecodeClaimOf(parsed->name, parsed->step, *there));
    *where = found.seal;
    *claim = std::move(there).value();
  } else {
    RETURN_IF_ERROR(claimed.WithContext(plan.label + ": claim its commit record"));
  }
  Status st = backend.PublishIfAbsent(*where, plan.commit_bytes);
  if (st.IsAlreadyExists()) {
    auto there = backend.ReadSmall(*where);
    // A fence (or one removed just now, with its claim).
    if ((there.ok() && *there == kFencedSeal) || there.status().IsNotFound()) {
      return Status::Unavailable(plan.label + ": the claim at its commit record is being removed (by gc or rm; a save "
                                 "that died left it); save the step again once that is done");
    }
    if (existing != nullptr && there.ok()) *existing = std::move(there).value();
    return Status::AlreadyExists(plan.label + " was committed by another writer first");
  }
  return st.WithContext(plan.label + ": publish commit record");
}

}  // namespace

// Nothing the record names can go while this writer lives (doc/format.md,
// "Why a commit is final"), so the objects are not checked again. A claim
// another writer left is not this writer's to protect: gc and rm remove a
// dead claim with its fence, so a writer that read the claim before that
// could seal a seal whose claim is gone. It reads the claim once after its
// seal: there and unchanged, the commit stands (a fence from now on fails,
// and gc then leaves the step, rm refuses it); gone or replaced, it takes
// its seal back.
Status PublishCommit(Backend& backend, const CommitPlan& plan, std::string* existing, std::string* published_at) {
  ASSIGN_OR_RETURN(std::string missing, FirstMissing(backend, plan));
  if (!missing.empty()) {
    return Status::IOError(plan.label + ": " + missing + " is missing or short; not committing");
  }
  std::string published, claim;
  RETURN_IF_ERROR(PublishRecord(backend, plan, &published, &claim, existing));
  if (!claim.empty()) {
    auto now = backend.ReadSmall(plan.commit_object);
    if (!now.ok() && !now.status().IsNotFound()) {
      return now.status().WithContext(plan.label + ": sealed another writer's claim, but could not read the claim again");
    }
    if (!now.ok() || *now != claim) {
      (void)backend.Remove(published);
      return Status::IOError(plan.label + ": the claim it sealed was removed meanwhile (gc or rm of a save that died); "
                             "the seal was withdrawn and nothing is committed");
    }
  }
  if (published_at != nullptr) *published_at = published;
  return Status::OK();
}

}  // namespace sluice
