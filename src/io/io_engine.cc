#include "io/io_engine.h"

#include <string>

namespace sluice {

Result<std::unique_ptr<IoEngine>> MakeIoEngine(IoEngineKind kind, unsigned queue_depth) {
  if (queue_depth == 0 || queue_depth > 4096) {
    return Status::InvalidArgument("queue depth " + std::to_string(queue_depth) +
                                   " outside 1..4096");
  }
  if (kind == IoEngineKind::kThreads) return MakeThreadEngine(queue_depth);
  auto uring = MakeUringEngine(queue_depth);
  if (uring.ok() || kind == IoEngineKind::kUring) return uring;
  // io_uring refused (seccomp, old kernel, io_uring_disabled sysctl).
  return MakeThreadEngine(queue_depth);
}

}  // namespace sluice
