// IoEngine: asynchronous positional reads and writes on file descriptors.
// Two implementations: io_uring (UringEngine), and a pool of threads doing
// pread/pwrite for hosts where io_uring is unavailable (seccomp in
// containers, old kernels). An engine completes each request in full, except
// that a read may stop short at end of file; short transfers are resubmitted
// internally.
//
// Thread-safety: one thread at a time per engine.
#ifndef SLUICE_IO_IO_ENGINE_H_
#define SLUICE_IO_IO_ENGINE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "sluice/status.h"

namespace sluice {

struct IoRequest {
  int fd = -1;
  bool write = false;
  uint64_t offset = 0;
  void* buf = nullptr;
  size_t len = 0;
  uint64_t tag = 0;
};

// One completed request.
struct IoResult {
  uint64_t tag = 0;    // the request's tag
  size_t bytes = 0;    // bytes transferred (a read may stop short at end of file)
  Status status;       // per-request outcome
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  // REQUIRES: in_flight() < queue_depth().
  virtual Status Submit(const IoRequest& req) = 0;
  // Blocks for the next completion. REQUIRES: in_flight() > 0. The
  // completion's status carries -errno as a Status ("write at offset N: ...").
  virtual Result<IoResult> Reap() = 0;
  // As Reap, but gives up at `deadline`: an empty result then, with
  // nothing reaped. For callers that act when a request is late (a hedged
  // write). REQUIRES: in_flight() > 0.
  virtual Result<std::optional<IoResult>> ReapUntil(std::chrono::steady_clock::time_point deadline) = 0;
  virtual size_t in_flight() const = 0;
  virtual size_t queue_depth() const = 0;
  virtual std::string name() const = 0;
};

enum class IoEngineKind { kAuto, kUring, kThreads };

// kAuto tries io_uring and falls back to threads if the kernel refuses it.
// kUring fails with NotSupported rather than fall back.
Result<std::unique_ptr<IoEngine>> MakeIoEngine(IoEngineKind kind, unsigned queue_depth);

Result<std::unique_ptr<IoEngine>> MakeUringEngine(unsigned queue_depth);
std::unique_ptr<IoEngine> MakeThreadEngine(unsigned queue_depth);

}  // namespace sluice

#endif  // SLUICE_IO_IO_ENGINE_H_
