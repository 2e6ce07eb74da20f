// WriterLock: the record a writer publishes under its step's "writers/"
// prefix for as long as it may still commit or be committed. Garbage
// collection leaves a step with a live writer alone, and rank 0 ignores
// manifests whose writer is gone or known dead (a crashed earlier attempt).
//
// Thread-safety: values and pure functions.
#ifndef SLUICE_FORMAT_WRITER_LOCK_H_
#define SLUICE_FORMAT_WRITER_LOCK_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice {

constexpr std::string_view kWriterLockMagic = "SLUICEWL";

struct WriterLock {
  std::string host;        // gethostname() of the writer
  std::string boot_id;     // the host's boot id: a lock from an earlier boot is dead
  uint32_t pid = 0;
  uint64_t pid_start = 0;  // the process's start time (clock ticks since boot): defeats pid reuse
  int64_t start_unix_ms = 0;
};

std::string EncodeWriterLock(const WriterLock& lock);
Result<WriterLock> DecodeWriterLock(std::string_view bytes, const std::string& what);

}  // namespace sluice

#endif  // SLUICE_FORMAT_WRITER_LOCK_H_
