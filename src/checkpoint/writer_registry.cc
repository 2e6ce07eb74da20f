#include "checkpoint/writer_registry.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <mutex>
#include <set>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "checkpoint/away_from_slow.h"
#include "format/layout.h"
#include "io/wall_clock.h"

namespace sluice {
namespace {

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

std::string BootId() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

// Field 22 of /proc/<pid>/stat (after the parenthesised command name, which
// may itself hold spaces); 0 if the process does not exist.
uint64_t ProcessStartTicks(uint32_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return 0;
  }
  return std::strtoull(field.c_str(), nullptr, 10);
}

// The writer ids this process holds locks for. A lock written by this very
// process but no longer in the set was released, even if removing its object
// failed (a store that was down): it must not block this process's own retry
// of the same step, and gc may reclaim it.
// A multiset: one id may hold two locks (a host's tier-0 part writer and its
// relay writer on the shared tier, checkpoint/parts.h); releasing one keeps
// the other held.
std::mutex held_mu;
std::multiset<std::string>& Held() {
  static std::multiset<std::string> held;
  return held;
}
void Unhold(std::string_view id) {
  std::lock_guard<std::mutex> g(held_mu);
  auto it = Held().find(std::string(id));
  if (it != Held().end()) Held().erase(it);
}

WriterState StateOfLock(const WriterLock& lock, std::string_view writer) {
  if (!lock.host.empty() && lock.host == HostName()) {
    // Same host: the writer is alive only in this boot, as the very process
    // that wrote the lock (not another that reused its pid).
    if (lock.boot_id != BootId()) return WriterState::kGone;
    if (::kill(static_cast<pid_t>(lock.pid), 0) != 0 && errno != EPERM) return WriterState::kGone;
    if (lock.pid_start != 0 && ProcessStartTicks(lock.pid) != lock.pid_start) return WriterState::kGone;
    if (lock.pid == static_cast<uint32_t>(getpid())) {
      std::lock_guard<std::mutex> g(held_mu);
      return Held().count(std::string(writer)) ? WriterState::kAlive : WriterState::kGone;
    }
    return WriterState::kAlive;
  }
  return NowUnixMs() - lock.start_unix_ms > kUnknownWriterStaleMs ? WriterState::kGone
                                                                  : WriterState::kAlive;
}

}  // namespace

std::string NewWriterIdAwayFromSlow(Backend& backend, std::string_view name, uint64_t step,
                                    std::optional<uint32_t> manifest_rank) {
  constexpr uint32_t kCandidates = 1024;
  std::vector<std::string> ids;  // drawn as they are asked for
  const uint32_t k = PickAwayFromSlow(backend, kCandidates, [&](uint32_t i) {
    while (ids.size() <= i) ids.push_back(NewWriterId());
    std::vector<std::string> records = {WriterLockObject(name, step, ids[i]), WriterRefsObject(name, step, ids[i])};
    if (manifest_rank) records.push_back(ManifestObject(name, step, *manifest_rank, ids[i]));
    return records;
  });
  return k < ids.size() ? ids[k] : NewWriterId();
}

Status AcquireWriterLock(Backend& backend, std::string_view name, uint64_t step,
                         std::string_view writer) {
  const auto pid = static_cast<uint32_t>(getpid());
  WriterLock lock{HostName(), BootId(), pid, ProcessStartTicks(pid), NowUnixMs()};
  {
    std::lock_guard<std::mutex> g(held_mu);
    Held().insert(std::string(writer));
  }
  Status st = backend.PublishIfAbsent(WriterLockObject(name, step, writer), EncodeWriterLock(lock))
                  .WithContext("register writer");
  if (!st.ok()) Unhold(writer);
  return st;
}

void ReleaseWriterLock(Backend& backend, std::string_view name, uint64_t step,
                       std::string_view writer) {
  Unhold(writer);
  (void)backend.Remove(WriterLockObject(name, step, writer));
}

Status AcquireObjectLock(Backend& backend, const std::string& object, std::string_view holder) {
  const auto pid = static_cast<uint32_t>(getpid());
  const WriterLock mine{HostName(), BootId(), pid, ProcessStartTicks(pid), NowUnixMs()};
  {
    std::lock_guard<std::mutex> g(held_mu);
    Held().insert(std::string(holder));
  }
  Status st;
  for (int attempt = 0; attempt < 3; ++attempt) {
    st = backend.PublishIfAbsent(object, EncodeWriterLock(mine));
    if (!st.IsAlreadyExists()) break;
    auto bytes = backend.ReadSmall(object);
    if (bytes.status().IsNotFound()) continue;  // released meanwhile
    if (!bytes.ok()) {
      st = bytes.status();
      break;
    }
    auto theirs = DecodeWriterLock(*bytes, "lock " + object);
    // A live holder's lock stays. A dead one's (or garbage) is removed and
    // the publish retried; of two takers, the exclusive publish picks one.
    const bool this_process = theirs.ok() && theirs->host == mine.host && theirs->boot_id == mine.boot_id &&
                              theirs->pid == pid && theirs->pid_start == mine.pid_start;
    if (theirs.ok() && (this_process || StateOfLock(*theirs, "") == WriterState::kAlive)) {
      st = Status::AlreadyExists("held by pid " + std::to_string(theirs->pid) + " on host " + theirs->host +
                               " since unix ms " + std::to_string(theirs->start_unix_ms) + " (" + object +
                               ")");
      break;
    }
    Status removed = backend.Remove(object);
    if (!removed.ok() && !removed.IsNotFound()) {
      st = removed;
      break;
    }
  }
  if (!st.ok()) Unhold(holder);
  return st;
}

void ReleaseObjectLock(Backend& backend, const std::string& object, std::string_view holder) {
  Unhold(holder);
  (void)backend.Remove(object);
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
  return StateOfLock(*lock, writer);
}

}  // namespace sluice
