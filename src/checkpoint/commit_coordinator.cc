#include "checkpoint/commit_coordinator.h"

#include <chrono>
#include <map>
#include <thread>

namespace sluice {
namespace {

// The first object of `plan` that is missing or short; empty if none.
// (Stat of the named objects, not a List of the step: on RADOS a List walks
// every placement group.)
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

Status PublishCommit(Backend& backend, const CommitPlan& plan, std::string* existing) {
  ASSIGN_OR_RETURN(std::string missing, FirstMissing(backend, plan));
  if (!missing.empty()) {
    return Status::IOError(plan.label + ": " + missing + " is missing or short; not committing");
  }
  Status st = backend.PublishIfAbsent(plan.commit_object, plan.commit_bytes);
  if (st.IsAlreadyExists()) {
    if (existing != nullptr) {
      auto there = backend.ReadSmall(plan.commit_object);
      if (there.ok()) *existing = std::move(there).value();
    }
    return Status::AlreadyExists(plan.label + " was committed by another writer first");
  }
  RETURN_IF_ERROR(st.WithContext(plan.label + ": publish commit record"));
  // Close the window between the check and the publish: if a concurrent rm
  // or gc removed anything the commit names, withdraw it rather than leave
  // a torn checkpoint visible.
  // Only a definite answer withdraws it: a check that itself fails (a
  // store briefly unreachable) is retried, and if it keeps failing the
  // commit stands and the error is returned, as a reader would find any
  // damage the check could not.
  Result<std::string> after = std::string();
  for (int wait_ms : {0, 50, 200, 800}) {
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    after = FirstMissing(backend, plan);
    if (after.ok()) break;
  }
  if (!after.ok()) {
    return after.status().WithContext(plan.label + ": published, but the committed objects could not be checked again");
  }
  if (!after->empty()) {
    (void)backend.Remove(plan.commit_object);
    return Status::IOError(plan.label + ": " + *after +
                           " was removed while committing (a concurrent rm or gc?); the commit was withdrawn");
  }
  return Status::OK();
}

}  // namespace sluice
