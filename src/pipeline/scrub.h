// Scrub: reads every committed checkpoint on every tier at a capped rate,
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
#ifndef SLUICE_PIPELINE_SCRUB_H_
#define SLUICE_PIPELINE_SCRUB_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "format/scrub_record.h"
#include "sluice/backend.h"
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

// What the scrubs recorded on this tier: the last result of each copy (an
// empty record if there is none or it does not decode).
ScrubRecord ReadScrubStatus(Backend& backend);

}  // namespace sluice

#endif  // SLUICE_PIPELINE_SCRUB_H_
