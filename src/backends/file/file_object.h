// The objects of a file store (file_backend.h): asynchronous reads and
// writes of one object file through its own I/O engine, and the small
// file helpers the store shares with them.
//
// Internal to src/backends/file.
#ifndef SLUICE_BACKENDS_FILE_FILE_OBJECT_H_
#define SLUICE_BACKENDS_FILE_FILE_OBJECT_H_

#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>

#include "io/io_engine.h"
#include "sluice/backend.h"

namespace sluice {

// Closes an fd on scope exit unless released.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { if (fd_ >= 0) ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  int get() const { return fd_; }
  int release() { int f = fd_; fd_ = -1; return f; }
 private:
  int fd_;
};

// The directory part of `path` ("." for none).
inline std::string ParentOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// fsync of a directory, so that entries made in it survive a crash.
Status FsyncDir(const std::string& dir);

// The object file `path` (object `name`, for messages) being written
// through `fd`, which it owns; Finish truncates, fdatasyncs and fsyncs its
// directory.
std::unique_ptr<WritableObject> NewFileWritable(std::string path, std::string name, int fd,
                                                std::unique_ptr<IoEngine> engine);
// Object `name` being read through `fd` (owned), `size` bytes long.
std::unique_ptr<ReadableObject> NewFileReadable(std::string name, int fd, uint64_t size,
                                                std::unique_ptr<IoEngine> engine);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_FILE_FILE_OBJECT_H_
