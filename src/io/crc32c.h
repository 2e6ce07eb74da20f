// CRC32C (Castagnoli), hardware accelerated through ISA-L's crc32_iscsi.
// Every chunk, manifest and commit record is protected by it.
//
// Thread-safety: pure functions.
#ifndef SLUICE_IO_CRC32C_H_
#define SLUICE_IO_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace sluice {

// Extends `crc` (0 for a fresh computation) over `len` bytes. Extending a
// crc over consecutive pieces gives the crc of their concatenation.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t len);
inline uint32_t Crc32c(const void* data, size_t len) { return Crc32cExtend(0, data, len); }

}  // namespace sluice

#endif  // SLUICE_IO_CRC32C_H_
