// What the _sluice binding's classes (sluice_module.cc) share: the one
// place a Status becomes a Python exception, the conversions of pipeline
// state into Python dicts, the staging arena's CUDA pin, the Pipeline's
// options as Python passes them, and the module's process-wide functions.
//
// Thread-safety: every function here needs the GIL, except where it says
// otherwise.
#ifndef SLUICE_PYTHON_PY_SUPPORT_H_
#define SLUICE_PYTHON_PY_SUPPORT_H_

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cuda_copy.h"
#include "sluice/pipeline.h"
#include "sluice/status.h"
#include "sluice/store.h"

namespace sluice::pyb {

namespace py = pybind11;

// Raises the Python exception for `st` (sluice.NotFoundError, ...) unless
// it is OK.
void ThrowIfError(const Status& st);

template <typename T>
T ValueOrThrow(Result<T> r) {
  ThrowIfError(r.status());
  return std::move(r).value();
}

// Creates sluice.Error and its subclasses in `m` (once, at import).
void RegisterErrors(py::module_& m);
// cuda_available(), metrics(), metrics_text().
void BindProcessFunctions(py::module_& m);

inline void* AddressOf(uintptr_t address) { return reinterpret_cast<void*>(address); }
py::dict ProgressDict(const TierProgress& p);
py::list BacklogList(const std::vector<TierBacklog>& backlog);
py::dict InfoDict(const CheckpointInfo& info);

// The staging arena's page-locking for CUDA DMA, shared by a pipeline's
// staging callbacks and its Python wrapper.
struct StagingPin {
  std::mutex mu;
  std::optional<int> device;  // set by the first save of a CUDA tensor
  void* base = nullptr;       // the arena, once made
  uint64_t arena_bytes = 0;
  bool pinned = false;
  double seconds = 0;
  std::string error;

  // Under mu, with an arena and a device: page-locks it (once).
  void PinLocked() {
    if (pinned || base == nullptr || !device || !error.empty()) return;
    auto t0 = std::chrono::steady_clock::now();
    Status st = cuda::Pin(base, arena_bytes, *device);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    pinned = st.ok();
    error = st.ok() ? "" : st.ToString();
  }
};

// The process's staging pool as Python holds it: the pool, and the CUDA
// pin of its arena (one pin per arena, whichever pipeline pins it).
struct PyStagingPool {
  std::shared_ptr<StagingPool> pool;
  std::shared_ptr<StagingPin> pin;
};
// sluice._sluice.StagingPool(bytes, huge_pages, idle_release_seconds).
void BindStagingPool(py::module_& m);

struct BacklogArgs {
  std::vector<std::string> policy;  // per tier, or empty: the default
  bool one_for_all = false;         // policy was given as one string
  uint32_t max_steps = 0;
  uint64_t max_bytes = 0;
  std::string when = "wait";
};

// The Pipeline's options from the arguments Python's sluice.Pipeline passes
// (ValueError for inconsistent ones); `pin` gets the arena when it is made.
PipelineOptions MakeOptions(const std::vector<std::string>& tiers, uint64_t staging_bytes,
                            uint32_t copy_threads, uint32_t max_in_flight, uint64_t chunk_bytes,
                            uint64_t io_bytes, uint64_t object_bytes, uint64_t rank_timeout_ms,
                            bool create_if_missing, bool huge_pages, bool staging_at_open,
                            const std::vector<uint64_t>& rate_bytes_per_sec,
                            const std::vector<uint32_t>& keep_last, uint64_t scrub_rate_bytes_per_sec,
                            uint64_t rebuild_rate_bytes_per_sec, uint32_t rebuild_keep_last,
                            const BacklogArgs& backlog, bool tier0_per_host,
                            const std::shared_ptr<StagingPin>& pin);

}  // namespace sluice::pyb

#endif  // SLUICE_PYTHON_PY_SUPPORT_H_
