// ItemSource: where a save pulls one item's bytes from, in order.
//
// Thread-safety: a source is read by one thread at a time.
#ifndef SLUICE_ITEM_SOURCE_H_
#define SLUICE_ITEM_SOURCE_H_

#include <cstddef>
#include <cstdint>

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

// Bytes a memcpy cannot reach, e.g. a GPU tensor's: the snapshot hands the
// source each staging slot to fill, and the source fills it itself, possibly
// asynchronously (a device-to-host DMA). The snapshot waits for every copy it
// started before it returns or lets a writer read those bytes, so the caller's
// memory is free again once Snapshot() returns, as for any item.
//
// Thread-safety: StartCopy and Wait may be called from several threads at once.
class AsyncItemSource {
 public:
  virtual ~AsyncItemSource() = default;
  // Starts copying the item's bytes [offset, offset + len) to `dst` (host
  // memory in the staging arena). May return before the bytes have landed.
  virtual Status StartCopy(uint64_t offset, void* dst, size_t len) = 0;
  // Returns once every copy started so far has landed: an error if any failed.
  virtual Status Wait() = 0;
};

}  // namespace sluice

#endif  // SLUICE_ITEM_SOURCE_H_
