#include "io/crc32c.h"

#include <isa-l/crc.h>

namespace sluice {

// ISA-L's crc32_iscsi takes and returns the raw (non-inverted) register, so
// the standard CRC32C init/final inversions are applied here; the result is
// the textbook CRC32C ("123456789" -> 0xE3069283).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t len) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t state = ~crc;
  // crc32_iscsi takes an int length: feed very large buffers in pieces.
  constexpr size_t kMaxPiece = 1u << 30;
  while (len > 0) {
    size_t n = len < kMaxPiece ? len : kMaxPiece;
    state = crc32_iscsi(const_cast<unsigned char*>(p), static_cast<int>(n), state);
    p += n;
    len -= n;
  }
  return ~state;
}

}  // namespace sluice
