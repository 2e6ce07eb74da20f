// Maintenance of a store's copies across its tiers: scrub (verify every
// copy, repair a bad one from a good one) and rebuild (refill a lost tier),
// as `sluice scrub` and `sluice rebuild` run them, and as a Pipeline runs
// them in the background (sluice/pipeline.h). Each works on backends the
// caller opened (sluice/backend.h), fastest tier first.
//
// Scrub reads every committed checkpoint on every tier at a capped rate,
// checks its commit record, manifests and every chunk, and rewrites a bad
// copy from a good one on another tier.
//
// A copy is good only when all of it verified in this scrub. A repair
// rewrites only what is bad on the damaged tier, each object written beside
// it under the step's repair/ prefix (the bytes verified chunk by chunk on
// the way, through the one read stream and write queue) and then swapped in
// whole (Backend::Replace), data objects first and the commit record last.
// A good copy is never changed, a copy no other tier holds good is never
// changed either (it is named unrepairable), and nothing is ever deleted.
//
// Crash safety: the scrub keeps its progress in the first tier
// (scrub/progress, format/scrub_record.h), each checkpoint recorded once
// it is done on every tier, so a killed scrub resumes after the last one it
// finished. A repair interrupted by a kill leaves the bad object as it was
// (or already replaced whole) and a staged object that gc removes; the next
// scrub finds the copy bad again and repairs it. One scrub at a time holds a
// tier (scrub/lock); a second is refused.
//
// Thread-safety: Scrub runs on the caller's thread; the backends must be
// thread-safe as any backend is.
//
// Rebuild is the resilver: it repopulates a tier that was lost (an empty or
// replaced directory, a reformatted disk, a recreated RADOS pool) from the
// other tiers: the newest keep_last committed steps of each name, newest
// first, each copied verbatim and every chunk verified on the way (the
// drain's path: the one read stream into the one write queue, committed with
// the same atomic publish), its writes paced by a token bucket so that the
// training job keeps the device.
//
// A killed rebuild leaves only uncommitted objects in the step it was
// copying (gc removes them); the next rebuild copies that step again.
// Restores meanwhile read whichever tier holds a committed copy.
//
// Thread-safety: Rebuild runs on the caller's thread.
#ifndef SLUICE_MAINTENANCE_H_
#define SLUICE_MAINTENANCE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sluice/backend.h"
#include "sluice/status.h"
#include "sluice/store.h"

namespace sluice {

// One checkpoint's copy on one tier, as the scrub found and left it.
struct ScrubCopyResult {
  std::string name;
  uint64_t step = 0;
  size_t tier = 0;
  // "ok"; "repaired" (it was bad and was rewritten from `source`);
  // "unrepairable" (bad, and no other tier holds a good copy, or the repair
  // failed: reason); "bad" (found bad, repair not asked for); "failed" (the
  // tier could not be read: reason).
  std::string state;
  std::string reason;
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  std::vector<BadChunk> bad;           // bad chunks found (when the records loaded)
  std::vector<std::string> rewritten;  // objects replaced from the good copy
  std::optional<size_t> source;        // the tier repaired from
};

struct ScrubOptions {
  std::string name;                 // only this checkpoint name; empty: all
  uint64_t rate_bytes_per_sec = 0;  // per tier, reads and repair writes together; 0: no cap
  bool repair = true;
  StoreOptions store;               // io_bytes: size of each read and write
  const std::atomic<bool>* stop = nullptr;  // stop after the checkpoint under way (optional)
  // Called before each checkpoint; may block (a background scrub waits
  // there while saves and drains run). Optional.
  std::function<void()> yield;
  // Called with each copy's result as soon as it is known. Optional.
  std::function<void(const ScrubCopyResult&)> on_copy;
};

struct ScrubReport {
  std::vector<ScrubCopyResult> copies;
  std::vector<std::string> tier_errors;  // tiers that could not be scrubbed (or not all of it), and why
  uint64_t bytes = 0;                    // bytes read and verified
  double seconds = 0;
  bool resumed = false;   // went on with a pass a killed scrub left
  size_t skipped = 0;     // checkpoints that pass had finished
  bool stopped = false;   // ended by `stop` before the pass was done
  bool ok() const;        // every copy ok or repaired, and no tier error
};

// Scrubs the tiers (fastest first). Unavailable if another scrub holds one
// of them; nothing is read then.
Result<ScrubReport> Scrub(const std::vector<Backend*>& tiers, const ScrubOptions& options);

struct RebuildStep {
  std::string name;
  uint64_t step = 0;
  // "rebuilt" (copied from `source`), "present" (already committed intact
  // there), "damaged" (a damaged copy is there: scrub repairs it, rebuild
  // leaves it), "failed" (reason).
  std::string state;
  size_t source = 0;
  std::string reason;
  uint64_t bytes = 0;
  double seconds = 0;
};

struct RebuildOptions {
  size_t target = 0;                // index of the tier to repopulate
  uint32_t keep_last = 1;           // newest steps of each name to restore there; 0: all
  std::string name;                 // only this name; empty: all
  uint64_t rate_bytes_per_sec = 0;  // cap on writes into the target; 0: none
  StoreOptions store;               // io_bytes
  const std::atomic<bool>* stop = nullptr;  // optional
  // Called as each step is done. Optional.
  std::function<void(const RebuildStep&)> on_step;
};

struct RebuildReport {
  std::vector<RebuildStep> steps;
  std::vector<std::string> tier_errors;  // source tiers that could not be listed
  uint64_t bytes = 0;
  double seconds = 0;
  bool stopped = false;
  bool ok() const;  // nothing failed
};

Result<RebuildReport> Rebuild(const std::vector<Backend*>& tiers, const RebuildOptions& options);

// What Rebuild would restore on `target`: true when it holds no committed
// step of any name while another tier holds some (a lost tier).
bool TierLooksLost(const std::vector<Backend*>& tiers, size_t target);

// The tiers of a command that works over several (scrub), opened from
// `uris`, fastest first: a tier that cannot be opened stands in as failed
// (each call on it retries the open, at most once a second, and fails as
// Unavailable until it succeeds), so that the command goes on with the
// others. InvalidArgument for a bad URI; when no tier opens, the first
// tier's open error.
struct OpenedTiers {
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> tiers;  // owned's, in order
};
Result<OpenedTiers> OpenTiersGoingOnWithoutFailed(const std::vector<std::string>& uris);

}  // namespace sluice

#endif  // SLUICE_MAINTENANCE_H_
