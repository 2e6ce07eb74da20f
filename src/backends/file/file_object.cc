#include "backends/file/file_object.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <utility>

namespace sluice {

Status FsyncDir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return Status::FromErrno(errno, "open directory " + dir);
  if (::fsync(fd.get()) != 0) return Status::FromErrno(errno, "fsync directory " + dir);
  return Status::OK();
}

namespace {

// The asynchronous I/O both object kinds share: one fd, one engine, errors
// named after the object.
class FileObjectIo {
 public:
  FileObjectIo(std::string name, int fd, std::unique_ptr<IoEngine> engine)
      : name_(std::move(name)), fd_(fd), engine_(std::move(engine)) {}

  Status Start(bool write, uint64_t offset, void* buf, size_t len, uint64_t tag) {
    return engine_->Submit(IoRequest{fd_.get(), write, offset, buf, len, tag}).WithContext(name_);
  }
  Result<IoCompletion> Reap() {
    ASSIGN_OR_RETURN(IoResult r, engine_->Reap());
    return Completion(r);
  }
  Result<std::optional<IoCompletion>> ReapUntil(std::chrono::steady_clock::time_point deadline) {
    ASSIGN_OR_RETURN(std::optional<IoResult> r, engine_->ReapUntil(deadline));
    if (!r) return std::optional<IoCompletion>();
    return std::optional<IoCompletion>(Completion(*r));
  }
  size_t in_flight() const { return engine_->in_flight(); }
  size_t queue_depth() const { return engine_->queue_depth(); }
  int fd() const { return fd_.get(); }
  const std::string& name() const { return name_; }

 private:
  IoCompletion Completion(const IoResult& r) const {
    IoCompletion c;
    c.tag = r.tag;
    c.bytes = r.bytes;
    c.status = r.status.WithContext("object " + name_);
    return c;
  }

  std::string name_;
  Fd fd_;
  std::unique_ptr<IoEngine> engine_;
};

class FileWritable final : public WritableObject {
 public:
  FileWritable(std::string path, std::string name, int fd, std::unique_ptr<IoEngine> engine)
      : path_(std::move(path)), io_(std::move(name), fd, std::move(engine)) {}

  Status StartWrite(uint64_t offset, const void* data, size_t len, uint64_t tag) override {
    return io_.Start(true, offset, const_cast<void*>(data), len, tag);
  }
  Result<IoCompletion> Reap() override { return io_.Reap(); }
  Result<std::optional<IoCompletion>> ReapUntil(std::chrono::steady_clock::time_point deadline) override {
    return io_.ReapUntil(deadline);
  }
  size_t in_flight() const override { return io_.in_flight(); }
  size_t queue_depth() const override { return io_.queue_depth(); }

  Status Finish(uint64_t final_size) override {
    if (io_.in_flight() != 0) return Status::InvalidArgument("Finish with I/O in flight");
    if (::ftruncate(io_.fd(), static_cast<off_t>(final_size)) != 0) {
      return Status::FromErrno(errno, "truncate " + io_.name());
    }
    if (::fdatasync(io_.fd()) != 0) return Status::FromErrno(errno, "fdatasync " + io_.name());
    return FsyncDir(ParentOf(path_));
  }

  Status Discard() override {
    if (io_.in_flight() != 0) return Status::InvalidArgument("Discard with I/O in flight");
    if (::unlink(path_.c_str()) != 0 && errno != ENOENT) return Status::FromErrno(errno, "remove " + io_.name());
    return Status::OK();
  }

 private:
  std::string path_;
  FileObjectIo io_;
};

class FileReadable final : public ReadableObject {
 public:
  FileReadable(std::string name, int fd, uint64_t size, std::unique_ptr<IoEngine> engine)
      : io_(std::move(name), fd, std::move(engine)), size_(size) {}

  uint64_t size() const override { return size_; }
  Status StartRead(uint64_t offset, void* buf, size_t len, uint64_t tag) override {
    return io_.Start(false, offset, buf, len, tag);
  }
  Result<IoCompletion> Reap() override { return io_.Reap(); }
  size_t in_flight() const override { return io_.in_flight(); }
  size_t queue_depth() const override { return io_.queue_depth(); }

 private:
  FileObjectIo io_;
  uint64_t size_;
};

}  // namespace

std::unique_ptr<WritableObject> NewFileWritable(std::string path, std::string name, int fd,
                                                std::unique_ptr<IoEngine> engine) {
  return std::make_unique<FileWritable>(std::move(path), std::move(name), fd, std::move(engine));
}

std::unique_ptr<ReadableObject> NewFileReadable(std::string name, int fd, uint64_t size,
                                                std::unique_ptr<IoEngine> engine) {
  return std::make_unique<FileReadable>(std::move(name), fd, size, std::move(engine));
}

}  // namespace sluice
