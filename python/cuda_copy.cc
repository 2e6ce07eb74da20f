#include "cuda_copy.h"

#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>

namespace sluice::cuda {
namespace {

// The few driver types and constants used, as cuda.h declares them (the
// driver's ABI; cuda.h itself is not needed to build).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
struct CUstream_st;
using CUcontext = CUctx_st*;
using CUstream = CUstream_st*;
constexpr CUresult kSuccess = 0;
constexpr unsigned kStreamNonBlocking = 0x1;
constexpr unsigned kHostRegisterPortable = 0x1;

struct Driver {
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext*);
  CUresult (*StreamCreate)(CUstream*, unsigned);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*MemHostRegister)(void*, size_t, unsigned);
  CUresult (*MemHostUnregister)(void*);
  CUresult (*GetErrorName)(CUresult, const char**);
};

std::string ErrorText(const Driver& d, CUresult r) {
  const char* name = nullptr;
  if (d.GetErrorName == nullptr || d.GetErrorName(r, &name) != kSuccess || name == nullptr) {
    return "CUDA error " + std::to_string(r);
  }
  return name;
}

// Loaded once; `why` says what failed when the driver is unusable.
const Driver* Load(Status* why) {
  static std::once_flag once;
  static Driver driver;
  static Status status;
  std::call_once(once, [] {
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = ::dlerror();
      status = Status::Unavailable(std::string("CUDA driver not found (libcuda.so.1): ") + (e ? e : "?"));
      return;
    }
    auto sym = [&](const char* name, auto& fn) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
      if (fn == nullptr && status.ok()) {
        status = Status::Unavailable(std::string("CUDA driver lacks ") + name);
      }
    };
    sym("cuInit", driver.Init);
    sym("cuDeviceGet", driver.DeviceGet);
    sym("cuDevicePrimaryCtxRetain", driver.PrimaryCtxRetain);
    sym("cuCtxPushCurrent_v2", driver.CtxPushCurrent);
    sym("cuCtxPopCurrent_v2", driver.CtxPopCurrent);
    sym("cuStreamCreate", driver.StreamCreate);
    sym("cuStreamSynchronize", driver.StreamSynchronize);
    sym("cuMemcpyDtoHAsync_v2", driver.MemcpyDtoHAsync);
    sym("cuMemHostRegister_v2", driver.MemHostRegister);
    sym("cuMemHostUnregister", driver.MemHostUnregister);
    sym("cuGetErrorName", driver.GetErrorName);
    if (!status.ok()) return;
    CUresult r = driver.Init(0);
    if (r != kSuccess) status = Status::Unavailable("cuInit: " + ErrorText(driver, r));
  });
  if (!status.ok()) {
    *why = status;
    return nullptr;
  }
  return &driver;
}

// A device's primary context and sluice's stream on it.
struct DeviceStream {
  CUcontext context = nullptr;
  CUstream stream = nullptr;
};

Result<DeviceStream*> StreamFor(const Driver& d, int device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<DeviceStream>> streams;
  std::lock_guard<std::mutex> lock(mu);
  auto found = streams.find(device);
  if (found != streams.end()) return found->second.get();
  auto s = std::make_unique<DeviceStream>();
  CUdevice dev = 0;
  CUresult r = d.DeviceGet(&dev, device);
  if (r == kSuccess) r = d.PrimaryCtxRetain(&s->context, dev);
  if (r == kSuccess) r = d.CtxPushCurrent(s->context);
  if (r == kSuccess) {
    r = d.StreamCreate(&s->stream, kStreamNonBlocking);
    CUcontext popped = nullptr;
    (void)d.CtxPopCurrent(&popped);
  }
  if (r != kSuccess) {
    return Status::Unavailable("CUDA device " + std::to_string(device) + ": " + ErrorText(d, r));
  }
  DeviceStream* out = s.get();
  streams.emplace(device, std::move(s));  // kept for the process's life
  return out;
}

Status Check(const Driver& d, CUresult r, const char* what) {
  if (r == kSuccess) return Status::OK();
  return Status::IOError(std::string(what) + ": " + ErrorText(d, r));
}

// Makes a device's context current on this thread for a scope, then puts
// back whatever was current: the caller's thread is torch's too, and its
// current device must not change under it.
class ContextScope {
 public:
  ContextScope(const Driver& d, CUcontext c) : d_(d), pushed_(d.CtxPushCurrent(c) == kSuccess) {}
  ~ContextScope() {
    CUcontext popped = nullptr;
    if (pushed_) (void)d_.CtxPopCurrent(&popped);
  }
  bool ok() const { return pushed_; }

 private:
  const Driver& d_;
  const bool pushed_;
};

// The loaded driver and `device`'s context and stream, or why not.
struct OnDevice {
  const Driver* d;
  DeviceStream* s;
};
Result<OnDevice> Device(int device) {
  Status why;
  const Driver* d = Load(&why);
  if (d == nullptr) return why;
  ASSIGN_OR_RETURN(DeviceStream * s, StreamFor(*d, device));
  return OnDevice{d, s};
}

Status PushFailed(int device) {
  return Status::IOError("cuCtxPushCurrent failed for CUDA device " + std::to_string(device));
}

}  // namespace

Status Available() {
  Status why;
  return Load(&why) != nullptr ? Status::OK() : why;
}

Status Pin(void* base, size_t bytes, int device) {
  ASSIGN_OR_RETURN(OnDevice on, Device(device));
  ContextScope scope(*on.d, on.s->context);
  if (!scope.ok()) return PushFailed(device);
  return Check(*on.d, on.d->MemHostRegister(base, bytes, kHostRegisterPortable), "cuMemHostRegister");
}

Status Unpin(void* base, int device) {
  ASSIGN_OR_RETURN(OnDevice on, Device(device));
  ContextScope scope(*on.d, on.s->context);
  return Check(*on.d, on.d->MemHostUnregister(base), "cuMemHostUnregister");
}

Status TensorSource::StartCopy(uint64_t offset, void* dst, size_t len) {
  if (offset > size_ || len > size_ - offset) {
    return Status::InvalidArgument("CUDA copy past the tensor's end");
  }
  ASSIGN_OR_RETURN(OnDevice on, Device(device_));
  // The thread that issues a copy needs the context current (cheap).
  ContextScope scope(*on.d, on.s->context);
  if (!scope.ok()) return PushFailed(device_);
  return Check(*on.d, on.d->MemcpyDtoHAsync(dst, address_ + offset, len, on.s->stream), "cuMemcpyDtoHAsync");
}

Status TensorSource::Wait() {
  // Without a stream no copy was ever started on it.
  ASSIGN_OR_RETURN(OnDevice on, Device(device_));
  // Synchronized even if the context cannot be pushed: the stream knows its
  // context, and a copy must never be left in flight.
  ContextScope scope(*on.d, on.s->context);
  return Check(*on.d, on.d->StreamSynchronize(on.s->stream), "cuStreamSynchronize");
}

}  // namespace sluice::cuda
