// A store walk: one listing of a store (or of one checkpoint name in it),
// grouped by (name, step), with each step's writer locks and refs records as
// the listing found them. Whole-store operations (gc, ls, rm's sweep of
// leftovers) work from one walk instead of listing again per step: on RADOS
// every listing walks the whole pool, so a listing per step makes an
// operation quadratic in the steps a store holds.
//
// A walk is not a snapshot (no backend lists atomically): an object created
// while it runs may or may not be in it. Callers that remove what a walk
// found judge again, after it, what may have started since (see gc).
//
// Thread-safety: the functions hold no state; a Steps value is plain data.
#ifndef SLUICE_CHECKPOINT_STORE_WALK_H_
#define SLUICE_CHECKPOINT_STORE_WALK_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "sluice/backend.h"

namespace sluice {

struct StepObjects {
  bool has_commit = false;  // `COMMIT` listed (a record, or a claim: sealed or not)
  bool has_part = false;    // a part record (parts.h)
  std::vector<ObjectInfo> objects;
  std::set<uint32_t> manifest_ranks;
  std::vector<std::string> lock_writers;  // writers/<writer>.lock listed
  std::vector<std::string> refs_writers;  // writers/<writer>.refs listed
  uint64_t data_bytes = 0;
  int64_t newest_ms = 0;
};

using StepKey = std::pair<std::string, uint64_t>;  // (name, step)
using Steps = std::map<StepKey, StepObjects>;

// One List of `name`'s objects (every name's, when `name` is empty), grouped
// by step. `hints`, where given, gets the latest-step hints listed
// (LatestHintObject).
Result<Steps> WalkSteps(Backend& backend, std::string_view name, std::vector<ObjectInfo>* hints = nullptr);

// The steps `name` has anything under, newest first, from one short listing
// of the name's children where the backend has one (ChildListing); nullopt
// where it has none (then only a walk can tell).
Result<std::optional<std::vector<uint64_t>>> StepsOfName(Backend& backend, std::string_view name);

// Whether a listed object is a data object ("data/..." under its step).
bool IsDataObject(const std::string& object);

// True if any writer whose lock the walk listed in this step is, or may be,
// still running (its lock read now; unreadable counts as alive).
bool AnyListedWriterAlive(Backend& backend, const StepKey& key, const StepObjects& step);

// The steps that live writers' refs records (references.h) found by a walk
// name, per checkpoint name: those steps' objects may be about to be named
// by a commit. `all` when a record of a live writer could not be read.
struct LiveRefs {
  bool all = false;
  std::set<uint64_t> steps;
  bool Names(uint64_t step) const { return all || steps.count(step) > 0; }
};
std::map<std::string, LiveRefs> LiveRefsOf(Backend& backend, const Steps& steps);

// Runs f(0) .. f(n-1) on up to kWalkThreads threads and returns when all
// did: the per-step reads of a walk's steps, which on a remote store are
// round trips each, independent of one another.
constexpr size_t kWalkThreads = 16;
template <typename F>
void ForEachParallel(size_t n, F f) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) f(i);
  };
  std::vector<std::thread> threads;
  const size_t count = std::min(kWalkThreads, n);
  for (size_t t = 1; t < count; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
}

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_STORE_WALK_H_
