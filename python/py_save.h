// The _sluice binding's save path: SaveHandle, PendingCheckpoint and
// LazySnapshot (include/sluice/pipeline.h), as sluice_module.cc's Pipeline
// hands them out. Buffers handed in as raw addresses (tensor data pointers)
// stay valid because the binding holds their owners until the bytes are in
// staging: until Snapshot() returns, or a LazySnapshot's copy is done.
//
// Thread-safety: a PendingCheckpoint serializes its calls with a mutex (the
// C++ object belongs to one thread at a time, and Python threads run it
// concurrently once the GIL is released); a SaveHandle and a LazySnapshot
// may be used from any thread.
#ifndef SLUICE_PYTHON_PY_SAVE_H_
#define SLUICE_PYTHON_PY_SAVE_H_

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cuda_copy.h"
#include "py_support.h"
#include "sluice/pipeline.h"
#include "sluice/status.h"

namespace sluice::pyb {

namespace py = pybind11;

class PySaveHandle {
 public:
  explicit PySaveHandle(std::shared_ptr<SaveHandle> handle, std::shared_ptr<Pipeline> pipeline)
      : handle_(std::move(handle)), pipeline_(std::move(pipeline)) {}

  double stall_seconds() const { return handle_->stall_seconds(); }
  bool done() const { return handle_->done(); }
  void WaitTier(size_t tier) {
    Status st;
    {
      py::gil_scoped_release release;
      st = handle_->WaitTier(tier);
    }
    ThrowIfError(st);
  }
  void Wait() {
    Status st;
    {
      py::gil_scoped_release release;
      st = handle_->Wait();
    }
    ThrowIfError(st);
  }
  py::list Progress() const {
    py::list out;
    for (const auto& p : handle_->progress()) out.append(ProgressDict(p));
    return out;
  }
  // The manifest this rank's tier-0 write published (SaveHandle::WaitWritten).
  std::string WaitWritten() {
    Result<std::string> r = std::string();
    {
      py::gil_scoped_release release;
      r = handle_->WaitWritten();
    }
    return ValueOrThrow(std::move(r));
  }
  // SaveHandle::ReleasePart: the peer commit of this part ended.
  void ReleasePart() {
    py::gil_scoped_release release;
    handle_->ReleasePart();
  }
  std::string name() const { return handle_->id().name; }
  uint64_t step() const { return handle_->id().step; }
  py::list Backlog() const { return BacklogList(handle_->backlog()); }
  py::dict Stats() const {
    const SaveStats s = handle_->stats();
    py::dict d;
    d["bytes"] = s.bytes;
    d["items"] = s.items;
    d["chunks"] = s.chunks;
    d["objects"] = s.objects;
    d["referenced_bytes"] = s.referenced_bytes;
    if (s.referenced_bytes > 0) {
      d["base_step"] = s.base_step;
    } else {
      d["base_step"] = py::none();
    }
    return d;
  }

 private:
  std::shared_ptr<SaveHandle> handle_;
  std::shared_ptr<Pipeline> pipeline_;  // the handle's background work lives there
};

// A lazy snapshot: holds the caller's buffers (owners, device sources)
// until its copy is done, and the save's handle.
class PyLazySnapshot {
 public:
  PyLazySnapshot(std::shared_ptr<LazySnapshot> lazy, std::shared_ptr<Pipeline> pipeline, py::list owners,
                 std::vector<std::unique_ptr<cuda::TensorSource>> cuda_sources)
      : lazy_(std::move(lazy)), pipeline_(std::move(pipeline)),
        state_(std::make_shared<Held>(Held{std::move(owners), std::move(cuda_sources)})) {}

  PySaveHandle handle() const { return PySaveHandle(lazy_->handle(), pipeline_); }
  // Waits (without the GIL) until items `items` (indexes in the order they
  // were added) are in staging.
  void WaitItems(const std::vector<uint32_t>& items);
  // Waits until every item is in staging, then lets the buffers go.
  void WaitAll();
  bool copy_done() const { return lazy_->copy_done(); }
  double copy_seconds() const { return lazy_->copy_seconds(); }
  // None: commit; a message: fail the save with it (InvalidArgument).
  void Finish(std::optional<std::string> error);
  // Waits for the copy (without the GIL) before the buffers may go.
  ~PyLazySnapshot();
  PyLazySnapshot(PyLazySnapshot&&) = default;

 private:
  struct Held {
    py::list owners;
    std::vector<std::unique_ptr<cuda::TensorSource>> cuda_sources;
  };
  std::shared_ptr<LazySnapshot> lazy_;
  std::shared_ptr<Pipeline> pipeline_;
  std::shared_ptr<Held> state_;  // null once let go (and after a move)
};

class PyPendingCheckpoint {
 public:
  PyPendingCheckpoint(std::unique_ptr<PendingCheckpoint> pending, std::shared_ptr<Pipeline> pipeline)
      : pending_(std::move(pending)), pipeline_(std::move(pipeline)) {}

  // `owner` is whatever keeps [address, address + size) alive (a tensor); it
  // is held until Snapshot() has copied the bytes.
  void AddAddress(const std::string& key, py::bytes metadata, uintptr_t address, uint64_t size,
                  py::object owner) {
    std::lock_guard<std::mutex> lock(mu_);
    RequireOpen();
    if (address == 0 && size != 0) {
      throw py::value_error("item '" + key + "': null address for " + std::to_string(size) + " bytes");
    }
    ThrowIfError(pending_->AddItem(key, std::string(metadata), AddressOf(address), size));
    owners_.append(owner);
  }

  // A CUDA tensor's bytes [address, address + size) on `device`, copied
  // device-to-host into staging on sluice's stream during Snapshot(), all
  // pieces in flight at once. The kernels that wrote them must have finished
  // by then. `owner` is held until Snapshot() returns.
  void AddCuda(const std::string& key, py::bytes metadata, uint64_t address, uint64_t size, int device,
               py::object owner) {
    std::lock_guard<std::mutex> lock(mu_);
    RequireOpen();
    if (address == 0 && size != 0) {
      throw py::value_error("item '" + key + "': null device address for " + std::to_string(size) + " bytes");
    }
    ThrowIfError(cuda::Available());
    cuda_sources_.push_back(std::make_unique<cuda::TensorSource>(device, address, size));
    ThrowIfError(pending_->AddItem(key, std::string(metadata), size, *cuda_sources_.back()));
    owners_.append(owner);
  }

  // Any C-contiguous buffer (bytes, bytearray, memoryview, numpy array).
  void AddBuffer(const std::string& key, py::bytes metadata, py::buffer data) {
    std::lock_guard<std::mutex> lock(mu_);
    RequireOpen();
    py::buffer_info info = data.request();
    if (!IsContiguous(info)) throw py::value_error("item '" + key + "': buffer is not C-contiguous");
    uint64_t size = static_cast<uint64_t>(info.size) * static_cast<uint64_t>(info.itemsize);
    ThrowIfError(pending_->AddItem(key, std::string(metadata), info.ptr, size));
    owners_.append(data);
  }

  PySaveHandle Snapshot() {
    std::lock_guard<std::mutex> lock(mu_);
    RequireOpen();
    std::optional<Result<std::shared_ptr<SaveHandle>>> handle;
    {
      py::gil_scoped_release release;
      handle.emplace(pending_->Snapshot());
    }
    pending_.reset();  // a PendingCheckpoint snapshots once
    cuda_sources_.clear();
    owners_ = py::list();
    return PySaveHandle(ValueOrThrow(std::move(*handle)), pipeline_);
  }

  // Snapshot() that returns before copying (LazySnapshot): the owners and
  // device sources go with the returned object, which holds them until the
  // copy is done.
  PyLazySnapshot SnapshotLazily() {
    std::lock_guard<std::mutex> lock(mu_);
    RequireOpen();
    std::optional<Result<std::shared_ptr<LazySnapshot>>> lazy;
    {
      py::gil_scoped_release release;
      lazy.emplace(pending_->SnapshotLazily());
    }
    pending_.reset();
    PyLazySnapshot out(ValueOrThrow(std::move(*lazy)), pipeline_, std::move(owners_), std::move(cuda_sources_));
    owners_ = py::list();
    cuda_sources_.clear();
    return out;
  }

  // Gives the save up before its snapshot: nothing is written, and its
  // writer lock goes now rather than whenever Python frees this object.
  void Abandon() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pending_) return;
    {
      py::gil_scoped_release release;  // the release is a store operation
      pending_.reset();
    }
    cuda_sources_.clear();
    owners_ = py::list();
  }

 private:
  static bool IsContiguous(const py::buffer_info& info) {
    py::ssize_t expected = info.itemsize;
    for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
      if (info.shape[d] > 1 && info.strides[d] != expected) return false;
      expected *= info.shape[d];
    }
    return true;
  }
  void RequireOpen() const {
    if (!pending_) throw py::value_error("this checkpoint was already snapshotted or abandoned");
  }

  std::mutex mu_;
  std::unique_ptr<PendingCheckpoint> pending_;
  std::vector<std::unique_ptr<cuda::TensorSource>> cuda_sources_;  // outlive pending_'s snapshot
  std::shared_ptr<Pipeline> pipeline_;
  py::list owners_;
};

// Registers SaveHandle, PendingCheckpoint and LazySnapshot on `m`.
void BindSave(py::module_& m);

}  // namespace sluice::pyb

#endif  // SLUICE_PYTHON_PY_SAVE_H_
