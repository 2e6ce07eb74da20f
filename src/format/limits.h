// Limits: every bound the format and the layers above it enforce, in one
// place beside doc/format.md, so that no two files can disagree on one.
// Decoders refuse records past them as Corruption; entry points refuse
// options and arguments past them as InvalidArgument.
#ifndef SLUICE_FORMAT_LIMITS_H_
#define SLUICE_FORMAT_LIMITS_H_

#include <cstdint>

namespace sluice::limits {

// Names, keys and metadata (sluice/names.h).
inline constexpr uint64_t kMaxNameBytes = 255;
inline constexpr uint64_t kMaxKeyBytes = 4096;
inline constexpr uint64_t kMaxMetadataBytes = 16ull << 20;
inline constexpr uint64_t kMaxAttemptBytes = 128;

// Ranks of one checkpoint, and how many manifest pointers one rank may
// leave (gc removes those of writers that are gone).
inline constexpr uint32_t kMaxWorld = 1'000'000;
inline constexpr uint32_t kMaxRankPointers = 10'000;

// Layout of data (StoreOptions).
inline constexpr uint64_t kMaxChunkBytes = 256ull << 20;
inline constexpr uint64_t kMinIoBytes = 4096;  // and a multiple of it
inline constexpr uint64_t kMaxIoBytes = 256ull << 20;
inline constexpr uint64_t kMinObjectBytes = 1ull << 20;

}  // namespace sluice::limits

#endif  // SLUICE_FORMAT_LIMITS_H_
