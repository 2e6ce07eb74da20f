// The layout of a file store over several directories (multi_dir_backend.h):
// which directories it spans, recorded in its home (.sluice-dirs) and
// marked in each other one (.sluice-dir-of), and where an object's name
// says it lives. Opening checks both before anything is written.
//
// Internal to src/backends/file.
#ifndef SLUICE_BACKENDS_FILE_MULTI_DIR_LAYOUT_H_
#define SLUICE_BACKENDS_FILE_MULTI_DIR_LAYOUT_H_

#include <memory>
#include <string>
#include <vector>

#include "backends/file/file_directory.h"
#include "sluice/status.h"

namespace sluice {

// A multi-directory store's URI options.
struct MultiDirOptions {
  std::vector<std::string> dirs;  // the directories besides the home, as given
  bool hedge = true;
  double hedge_extra = 0.25;
  unsigned hedge_floor_ms = 100;
};
Result<MultiDirOptions> ParseMultiDirQuery(const std::string& uri, const std::string& query);

// True for the URI options the multi-directory store takes (dirs, hedge,
// hedge_extra, hedge_floor_ms).
bool IsMultiDirOption(const std::string& key);

// Whether `path` opens as a multi-directory store: `query` (its options
// only) names other directories, or the directory records that it is the
// home of one. InvalidArgument when `path` is another directory of a
// multi-directory store, or when `query` has hedging options for a
// single directory; IOError when `path` is no directory.
Result<bool> IsMultiDirStore(const std::string& path, const std::string& query);

// The directories of the store at `home` (home first), each opened, its
// layout recorded and its markers written when it is being made; what the
// URI and the records say, checked against each other. A directory of the
// layout that is missing (a device not mounted) is Unavailable.
struct MultiDirStore {
  std::vector<std::unique_ptr<FileDirectory>> dirs;
  MultiDirOptions options;
};
Result<MultiDirStore> OpenMultiDirLayout(const std::string& uri, const std::string& home, const std::string& query,
                                         const FileOptions& options, bool create_if_missing);

// The directory index a name's suffix gives ("a/r0-x-000001-d2.dat" -> 2);
// 0 for a name without one, and for k >= `dirs`.
size_t DirectoryOfName(const std::string& name, size_t dirs);
// `name` as stored in directory `k`: with "-d<k>" before its extension
// (k > 0).
std::string NameInDirectory(const std::string& name, size_t k);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_FILE_MULTI_DIR_LAYOUT_H_
