// A file store over several directories, one per device (e.g. each NVMe
// drive of a host): file:///nvme0/ckpt?dirs=/nvme1/ckpt,/nvme2/ckpt.
//
// The first directory is the store's home: it holds every published
// record (manifests, commit records, locks) and a record of the store's
// layout (.sluice-dirs), so that later opens need no dirs= and one that
// names other directories is refused. Each other directory holds a marker
// naming the home and its own index, so that it is never opened as a store
// of its own (garbage collection there would find none of the records that
// name its objects).
//
// Data objects are spread over the directories by its Placement
// (sluice/backend.h), through which the write queue names them: each goes
// to the directory with the fewest objects being written, away from
// directories found slow. An object placed in directory k > 0 is stored
// under its name with "-d<k>" before its extension, and every operation
// finds an object's directory from its name alone (a name with no such
// suffix, or with k past the last directory, lives in the home), so names
// copied to another store (a drain) or read back need nothing else.
//
// Hedged writes (hedge=on, the default): as on RADOS (doc/ceph.md), the
// write queue writes an object whose write is late past a deadline derived
// from recent write latencies (hedge_floor_ms, 3x the median) again, whole,
// into another directory. Extra bytes are bounded by hedge_extra. Objects
// are at most 64 MiB here, so that a hedge rewrites at most that, and each
// object's buffers are held until it is finished. hedge=off spreads
// objects all the same and holds nothing.
//
// Its layout (which directories, recorded where) is multi_dir_layout.h.
//
// Internal to src/backends/file.
#ifndef SLUICE_BACKENDS_FILE_MULTI_DIR_BACKEND_H_
#define SLUICE_BACKENDS_FILE_MULTI_DIR_BACKEND_H_

#include <memory>
#include <string>

#include "backends/file/file_directory.h"
#include "backends/file/multi_dir_layout.h"
#include "sluice/backend.h"

namespace sluice {

// Objects are at most this large, so that each is held whole (a hedge
// writes it again) and no hedge rewrites more.
inline constexpr uint64_t kMultiDirMaxObjectBytes = 64ull << 20;

Result<std::unique_ptr<Backend>> OpenMultiDirFileBackend(const std::string& uri, const std::string& home,
                                                         const std::string& query, const FileOptions& options,
                                                         bool create_if_missing);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_FILE_MULTI_DIR_BACKEND_H_
