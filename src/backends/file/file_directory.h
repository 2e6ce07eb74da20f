// One directory of a file store, as the multi-directory store
// (multi_dir_backend.h) builds on it: a FileBackend over one root.
//
// Internal to src/backends/file.
#ifndef SLUICE_BACKENDS_FILE_FILE_DIRECTORY_H_
#define SLUICE_BACKENDS_FILE_FILE_DIRECTORY_H_

#include <memory>
#include <string>

#include "io/io_engine.h"
#include "sluice/backend.h"

namespace sluice {

// Files a store keeps in its directories' roots beside its objects; never
// listed as objects.
inline constexpr const char* kStoreFilePrefix = ".sluice-";

struct FileOptions {
  IoEngineKind io = IoEngineKind::kAuto;
  enum class Direct { kAuto, kOn, kOff } direct = Direct::kAuto;
  unsigned queue_depth = 16;
};

class FileDirectory : public Backend {
 public:
  // The directory, without a trailing '/'.
  virtual const std::string& root() const = 0;
};

// `root` without a trailing '/'; `uri` names the store in messages.
Result<std::unique_ptr<FileDirectory>> OpenFileDirectory(const std::string& uri, const std::string& root,
                                                         const FileOptions& options, bool create_if_missing);

// mkdir -p, fsyncing the parent of every directory it creates.
Status MakeFileStoreDirs(const std::string& dir);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_FILE_FILE_DIRECTORY_H_
