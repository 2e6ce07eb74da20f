// The envelope shared by every metadata record (manifest, commit record):
//   magic[8] | version u32 | flags u32 | body_len u64 | body | crc32c u32
// The crc covers every byte before it. See doc/format.md.
//
// Thread-safety: pure functions.
#ifndef SLUICE_FORMAT_RECORD_FRAME_H_
#define SLUICE_FORMAT_RECORD_FRAME_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice {

constexpr uint32_t kFormatVersion = 1;
constexpr size_t kFrameOverhead = 8 + 4 + 4 + 8 + 4;

std::string FrameRecord(std::string_view magic8, std::string_view body,
                        uint32_t version = kFormatVersion);

// Checks magic, version, length and crc; returns the body. Corruption (or
// NotSupported for a newer version) naming `what` otherwise.
Result<std::string_view> UnframeRecord(std::string_view bytes, std::string_view magic8,
                                       const std::string& what);
// The same for a record kind with several versions: accepts 1..max_version
// and says which one it found.
Result<std::string_view> UnframeRecord(std::string_view bytes, std::string_view magic8,
                                       const std::string& what, uint32_t max_version,
                                       uint32_t* version);

}  // namespace sluice

#endif  // SLUICE_FORMAT_RECORD_FRAME_H_
