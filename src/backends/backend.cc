// The default behaviour the Backend interface gives every driver.
#include "sluice/backend.h"

#include "io/crc32c.h"

namespace sluice {

uint32_t WritableObject::ChecksumForWrite(uint32_t crc, const void* data, size_t len) {
  return Crc32cExtend(crc, data, len);
}

}  // namespace sluice
