// FileBackend: objects as files under a root directory of any mounted
// filesystem (ext4, XFS, btrfs, ZFS, CephFS, tmpfs, ...).
//
// Data objects are written with O_DIRECT through io_uring, preallocated with
// fallocate, and made durable with fdatasync plus an fsync of their
// directory. Where O_DIRECT is refused the backend falls back to buffered
// I/O; where io_uring is refused, to a pool of pread/pwrite threads. Publish
// is write-temp, fsync, rename-without-replace, fsync-directory.
//
// URI query options (all optional):
//   io=auto|uring|threads   I/O engine (auto: io_uring, else threads)
//   direct=auto|on|off      O_DIRECT (auto: on where the filesystem takes it)
//   qd=N                    operations in flight per object (default 16)
//
// Thread-safety: as Backend.
#ifndef SLUICE_BACKENDS_FILE_FILE_BACKEND_H_
#define SLUICE_BACKENDS_FILE_FILE_BACKEND_H_

#include <memory>
#include <string>

#include "sluice/backend.h"

namespace sluice {

// `path` is the root directory; `query` the URI's query string (no '?').
Result<std::unique_ptr<Backend>> OpenFileBackend(const std::string& uri, const std::string& path,
                                                 const std::string& query, bool create_if_missing);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_FILE_FILE_BACKEND_H_
