// One directory of a file store, as the multi-directory store
// (multi_dir_backend.h) builds on it: a FileBackend over one root, plus the
// object files themselves, so that one object's copies in several
// directories can share one I/O engine.
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
  // Creates the file of object `name` for writing (exclusively, with
  // O_DIRECT where the directory takes it, preallocated to `size_hint`):
  // a descriptor the caller closes. AlreadyExists if the name exists.
  virtual Result<int> CreateObjectFile(const std::string& name, uint64_t size_hint) = 0;
  // Sets the object's length and makes it durable, as
  // WritableObject::Finish does. REQUIRES: no I/O in flight on `fd`.
  virtual Status FinishObjectFile(int fd, const std::string& name, uint64_t final_size) = 0;
};

// `root` without a trailing '/'; `uri` names the store in messages.
Result<std::unique_ptr<FileDirectory>> OpenFileDirectory(const std::string& uri, const std::string& root,
                                                         const FileOptions& options, bool create_if_missing);

// mkdir -p, fsyncing the parent of every directory it creates.
Status MakeFileStoreDirs(const std::string& dir);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_FILE_FILE_DIRECTORY_H_
