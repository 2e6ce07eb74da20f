// ScrubRecord: what scrub keeps in a store about its work, so that a killed
// scrub resumes where it stopped and `ls` can show when each copy was last
// checked and how it was found.
//   scrub/progress  (the first tier of a scrub) the pass under way: which
//                   checkpoints it has finished; removed when the pass ends
//   scrub/status    (every tier) the last result for each checkpoint copy
//                   on that tier
// Both are published whole (Backend::Replace), so a crash leaves the old
// record or the new one. A record that does not decode is treated as absent:
// it costs a re-read, never a skipped check. See doc/format.md.
//
// Thread-safety: values and pure functions.
#ifndef SLUICE_FORMAT_SCRUB_RECORD_H_
#define SLUICE_FORMAT_SCRUB_RECORD_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice {

constexpr std::string_view kScrubRecordMagic = "SLUICESC";

struct ScrubEntry {
  std::string name;
  uint64_t step = 0;
  std::string state;       // "ok", "repaired", "unrepairable", "bad" (found, not repaired)
  int64_t unix_ms = 0;     // when this copy's check ended
  std::string detail;      // why, for anything but ok (at most 1 KiB kept)
};

struct ScrubRecord {
  std::string pass;        // random id of the pass that wrote it
  std::string scope;       // which tiers and names the pass covers
  int64_t started_unix_ms = 0;
  std::vector<ScrubEntry> entries;
};

std::string ScrubProgressObject();  // "scrub/progress"
std::string ScrubStatusObject();    // "scrub/status"
std::string ScrubLockObject();      // "scrub/lock"
// Where a record is written before it replaces the one above.
std::string ScrubStagingObject(std::string_view object, std::string_view writer);

std::string EncodeScrubRecord(const ScrubRecord& record);
Result<ScrubRecord> DecodeScrubRecord(std::string_view bytes, const std::string& what);

}  // namespace sluice

#endif  // SLUICE_FORMAT_SCRUB_RECORD_H_
