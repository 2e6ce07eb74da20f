// Device-to-host copies of CUDA tensors straight into the staging arena.
//
// The CUDA driver API is loaded at run time (libcuda.so.1, which any process
// running CUDA torch has loaded already), so the module builds and runs on
// machines without CUDA; there every call here reports why it cannot work.
// Device pointers come from torch (tensor.data_ptr()), which allocates in
// each device's primary context: that is the context used here.
//
// Thread-safety: thread-safe.
#ifndef SLUICE_PYTHON_CUDA_COPY_H_
#define SLUICE_PYTHON_CUDA_COPY_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "sluice/item_source.h"
#include "sluice/status.h"

namespace sluice::cuda {

// OK when the driver could be loaded and initialized; else why not.
Status Available();

// Page-locks [base, base + bytes) for DMA from every device (portable), using
// `device`'s primary context; Unpin undoes it. Costs about a second per 10
// GiB, paid once per staging arena.
Status Pin(void* base, size_t bytes, int device);
Status Unpin(void* base, int device);

// One CUDA tensor's bytes, copied on sluice's own stream for `device` (one per
// device and process, non-blocking w.r.t. the legacy default stream). The
// caller makes sure the kernels that wrote the tensor have finished (Python
// synchronizes the tensor's stream before the snapshot).
class TensorSource final : public AsyncItemSource {
 public:
  TensorSource(int device, uint64_t device_address, uint64_t size)
      : device_(device), address_(device_address), size_(size) {}
  Status StartCopy(uint64_t offset, void* dst, size_t len) override;
  Status Wait() override;

 private:
  const int device_;
  const uint64_t address_;
  const uint64_t size_;
};

}  // namespace sluice::cuda

#endif  // SLUICE_PYTHON_CUDA_COPY_H_
