// Writer locks: a writer publishes one for its step before writing anything
// and removes it when it is done (committed, or failed and cleaned up). See
// format/writer_lock.h for who reads them and why.
//
// Liveness: a lock from this host is dead if it is from an earlier boot, or
// its process is gone (or the pid now belongs to a younger process). A lock
// from another host cannot be checked; it counts as alive until it is older
// than kUnknownWriterStaleMs.
//
// Thread-safety: thread-safe (no state of its own).
#ifndef SLUICE_CHECKPOINT_WRITER_REGISTRY_H_
#define SLUICE_CHECKPOINT_WRITER_REGISTRY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "format/writer_lock.h"
#include "sluice/backend.h"

namespace sluice {

constexpr int64_t kUnknownWriterStaleMs = 24ll * 3600 * 1000;

// A new writer id (NewWriterId) for (name, step) whose records (lock,
// references and, for `manifest_rank`, manifest: each written and waited
// for on its own) keep away from placements the backend found slow
// (Placement::Slow). The id is random anyway: choosing among
// candidates costs only hashing (a few microseconds each). After 1024 the
// candidate with the fewest slow records is taken (how many qualify on
// RADOS: doc/ceph.md).
std::string NewWriterIdAwayFromSlow(Backend& backend, std::string_view name, uint64_t step,
                                    std::optional<uint32_t> manifest_rank);

Status AcquireWriterLock(Backend& backend, std::string_view name, uint64_t step,
                         std::string_view writer);
// Best effort: a lock left behind is reclaimed by gc once its writer is dead.
void ReleaseWriterLock(Backend& backend, std::string_view name, uint64_t step,
                       std::string_view writer);

enum class WriterState { kAlive, kGone };

// kGone if the lock is absent, unreadable garbage, from a dead process on
// this host, or stale; kAlive otherwise. Errors other than NotFound are
// returned (the caller must not guess).
Result<WriterState> WriterStateOf(Backend& backend, std::string_view name, uint64_t step,
                                  std::string_view writer);

// A lock in one named object, for work that must not run twice at once on
// a store (scrub, rebuild): the same record and liveness rules as a writer
// lock. A lock whose holder is gone is taken over. AlreadyExists, naming
// the holder (host, pid, since when), while a live one holds it; any other
// error is the backend's.
Status AcquireObjectLock(Backend& backend, const std::string& object, std::string_view holder);
// Best effort, as ReleaseWriterLock.
void ReleaseObjectLock(Backend& backend, const std::string& object, std::string_view holder);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_WRITER_REGISTRY_H_
