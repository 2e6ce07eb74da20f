#include "pipeline/writer_registry.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "format/layout.h"

namespace sluice {
namespace {

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Status AcquireWriterLock(Backend& backend, std::string_view name, uint64_t step,
                         std::string_view writer) {
  WriterLock lock{HostName(), static_cast<uint32_t>(getpid()), NowUnixMs()};
  return backend.PublishIfAbsent(WriterLockObject(name, step, writer), EncodeWriterLock(lock))
      .WithContext("register writer");
}

void ReleaseWriterLock(Backend& backend, std::string_view name, uint64_t step,
                       std::string_view writer) {
  (void)backend.Remove(WriterLockObject(name, step, writer));
}

WriterState StateOfLock(const WriterLock& lock) {
  if (!lock.host.empty() && lock.host == HostName()) {
    if (::kill(static_cast<pid_t>(lock.pid), 0) == 0 || errno == EPERM) return WriterState::kAlive;
    return WriterState::kGone;
  }
  return NowUnixMs() - lock.start_unix_ms > kUnknownWriterStaleMs ? WriterState::kGone
                                                                  : WriterState::kAlive;
}

Result<WriterState> WriterStateOf(Backend& backend, std::string_view name, uint64_t step,
                                  std::string_view writer) {
  std::string object = WriterLockObject(name, step, writer);
  auto bytes = backend.ReadSmall(object);
  if (!bytes.ok()) {
    if (bytes.status().IsNotFound()) return WriterState::kGone;
    return bytes.status();
  }
  auto lock = DecodeWriterLock(*bytes, "writer lock " + object);
  if (!lock.ok()) return WriterState::kGone;
  return StateOfLock(*lock);
}

}  // namespace sluice
