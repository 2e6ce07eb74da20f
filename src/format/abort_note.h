// AbortNote: what a rank of a multi-rank save publishes when it gives up
// before its manifest is published (its write failed, it was abandoned), so
// that the other ranks of the same attempt stop waiting for it at once
// instead of after the rank timeout. One per (step, attempt): the first
// failure's reason is enough. See doc/format.md, "Commit protocol".
//
// Thread-safety: values and pure functions.
#ifndef SLUICE_FORMAT_ABORT_NOTE_H_
#define SLUICE_FORMAT_ABORT_NOTE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice {

constexpr std::string_view kAbortNoteMagic = "SLUICEAB";

struct AbortNote {
  std::string attempt;  // the save attempt it ends (never empty)
  uint32_t rank = 0;    // the rank that gave up
  std::string reason;   // why, for the other ranks' errors
  int64_t created_unix_ms = 0;
};

std::string EncodeAbortNote(const AbortNote& note);
Result<AbortNote> DecodeAbortNote(std::string_view bytes, const std::string& what);

}  // namespace sluice

#endif  // SLUICE_FORMAT_ABORT_NOTE_H_
