// ItemSource: where a save pulls one item's bytes from, in order.
//
// Thread-safety: a source is read by one thread at a time.
#ifndef SLUICE_ITEM_SOURCE_H_
#define SLUICE_ITEM_SOURCE_H_

#include <cstddef>

#include "sluice/status.h"

namespace sluice {

// Supplies an item's bytes in order. Read() fills up to `len` bytes of `buf`
// and returns how many it wrote; it must deliver exactly the size declared to
// AddItem in total.
class ItemSource {
 public:
  virtual ~ItemSource() = default;
  virtual Result<size_t> Read(void* buf, size_t len) = 0;
};

}  // namespace sluice

#endif  // SLUICE_ITEM_SOURCE_H_
