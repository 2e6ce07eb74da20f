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

#include <functional>
#include <string>

#include "backends/file/file_directory.h"
#include "sluice/status.h"

namespace sluice {

// The options of a file:// URI's `query` (no '?') that one directory takes
// (io, direct, qd). Options for which `other` is true (a multi-directory
// store's) are appended to `rest`, in order; any other is InvalidArgument
// naming it. The registry (backend_registry.cc) then opens one directory
// (file_directory.h: OpenFileDirectory) or a store over several
// (multi_dir_backend.h), which builds on it.
Result<FileOptions> ParseFileQuery(const std::string& uri, const std::string& query,
                                   const std::function<bool(const std::string&)>& other, std::string* rest);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_FILE_FILE_BACKEND_H_
