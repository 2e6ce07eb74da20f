#include "backends/file/file_backend.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "backends/file/file_directory.h"
#include "backends/file/file_object.h"
#include "backends/uri_query.h"
#include "sluice/aligned_buffer.h"
#include "io/io_engine.h"

namespace sluice {
namespace {

constexpr const char* kProbePrefix = ".sluice-probe.";  // ProbeDirect's named fallback

constexpr size_t kDirectAlignment = 4096;
constexpr uint64_t kMaxSmallObjectBytes = 256ull << 20;  // records are far smaller

}  // namespace

// mkdir -p, fsyncing the parent of every directory it creates so that the
// new entries survive a crash once the files inside are synced.
Status MakeFileStoreDirs(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return Status::IOError(dir + " exists and is not a directory");
    return Status::OK();
  }
  if (errno != ENOENT) return Status::FromErrno(errno, "stat " + dir);
  std::string parent = ParentOf(dir);
  if (parent != dir) RETURN_IF_ERROR(MakeFileStoreDirs(parent));
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::FromErrno(errno, "mkdir " + dir);
  }
  return FsyncDir(parent);
}

namespace {

Status MakeDirs(const std::string& dir) { return MakeFileStoreDirs(dir); }

std::string RandomSuffix() {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^
                                          (static_cast<uint64_t>(::getpid()) << 32));
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

Status WriteAllFd(int fd, const char* p, size_t n, const std::string& what) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "write " + what);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

}  // namespace

Result<FileOptions> ParseFileQuery(const std::string& uri, const std::string& query,
                                   const std::function<bool(const std::string&)>& other, std::string* rest) {
  FileOptions o;
  RETURN_IF_ERROR(ForEachQueryOption(query, [&](const std::string& key, const std::string& val) -> Status {
    auto bad = [&](const char* expect) {
      return Status::InvalidArgument("store URI '" + uri + "': option " + key + "='" + val +
                                     "' (expected " + expect + ")");
    };
    if (key == "io") {
      if (val == "auto") o.io = IoEngineKind::kAuto;
      else if (val == "uring") o.io = IoEngineKind::kUring;
      else if (val == "threads") o.io = IoEngineKind::kThreads;
      else return bad("auto, uring or threads");
    } else if (key == "direct") {
      if (val == "auto") o.direct = FileOptions::Direct::kAuto;
      else if (val == "on" || val == "1" || val == "true") o.direct = FileOptions::Direct::kOn;
      else if (val == "off" || val == "0" || val == "false") o.direct = FileOptions::Direct::kOff;
      else return bad("auto, on or off");
    } else if (key == "qd") {
      ASSIGN_OR_RETURN(o.queue_depth, ParseUnsignedOption(uri, key, val, 1, 4096));
    } else if (other(key)) {
      *rest += (rest->empty() ? "" : "&") + key + "=" + val;
    } else {
      return Status::InvalidArgument("store URI '" + uri + "': unknown option '" + key +
                                     "' (file stores take io, direct, qd, dirs, hedge, hedge_extra, "
                                     "hedge_floor_ms)");
    }
    return Status::OK();
  }));
  return o;
}

namespace {

class FileBackend final : public FileDirectory {
 public:
  FileBackend(std::string uri, std::string root, FileOptions opts, bool direct,
              std::string engine_name)
      : uri_(std::move(uri)), root_(std::move(root)), opts_(opts), direct_(direct) {
    caps_.io_alignment = direct ? kDirectAlignment : 1;
    caps_.max_object_bytes = UINT64_MAX;
    caps_.atomic_publish_if_absent = true;
    caps_.io_path = engine_name + (direct ? ", O_DIRECT" : ", buffered") + ", qd " +
                    std::to_string(opts.queue_depth);
    caps_.child_listing = &children_;
  }

  const BackendCaps& caps() const override { return caps_; }

  // ChildListing: one readdir of the prefix's directory.
  class Children final : public ChildListing {
   public:
    explicit Children(const FileBackend& b) : b_(b) {}
    Result<std::vector<std::string>> ListChildren(const std::string& prefix) const override {
      if (!prefix.empty() && prefix.back() != '/') {
        return Status::InvalidArgument("list prefix '" + prefix + "' must end in '/'");
      }
      std::vector<std::string> out;
      const std::string dir = prefix.empty() ? b_.root_ : b_.root_ + "/" + prefix;
      DIR* d = ::opendir(dir.c_str());
      if (d == nullptr) {
        if (errno == ENOENT || errno == ENOTDIR) return out;
        return Status::FromErrno(errno, "list " + dir);
      }
      while (dirent* e = ::readdir(d)) {
        std::string_view n = e->d_name;
        if (n == "." || n == ".." || IsTemporary(n)) continue;
        out.emplace_back(n);
      }
      ::closedir(d);
      return out;
    }

   private:
    const FileBackend& b_;
  };
  const std::string& uri() const override { return uri_; }

  const std::string& root() const override { return root_; }

  Result<std::unique_ptr<WritableObject>> Create(const std::string& name, const CreateOptions& options) override {
    ASSIGN_OR_RETURN(int raw_fd, CreateObjectFile(name, options.size_hint));
    Fd fd(raw_fd);
    ASSIGN_OR_RETURN(auto engine, MakeIoEngine(opts_.io, opts_.queue_depth));
    return NewFileWritable(PathOf(name), name, fd.release(), std::move(engine));
  }

  // Creates the file of object `name` for writing (exclusively, with
  // O_DIRECT where the store takes it, preallocated to `size_hint`): a
  // descriptor the caller closes. AlreadyExists if the name exists.
  Result<int> CreateObjectFile(const std::string& name, uint64_t size_hint) {
    RETURN_IF_ERROR(CheckName(name));
    std::string path = PathOf(name);
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (direct_ ? O_DIRECT : 0);
    ASSIGN_OR_RETURN(int raw_fd, CreateFile(path, flags, "create object " + name));
    Fd fd(raw_fd);
    if (size_hint > 0) {
      // Preallocation keeps the file's extents contiguous and makes ENOSPC
      // show up here, before any byte is written. It sets the file's size
      // too: an O_DIRECT write past the size is done synchronously by
      // ext4, one at a time (FALLOC_FL_KEEP_SIZE cost a hedged save half its
      // speed, slow_dir_test).
      if (::fallocate(fd.get(), 0, 0, static_cast<off_t>(size_hint)) != 0 &&
          errno != EOPNOTSUPP && errno != ENOSYS) {
        Status st = Status::FromErrno(errno, "preallocate " + std::to_string(size_hint) +
                                                 " bytes for object " + name);
        ::unlink(path.c_str());
        return st;
      }
    }
    return fd.release();
  }

  Result<std::unique_ptr<ReadableObject>> Open(const std::string& name, const OpenOptions& options) override {
    RETURN_IF_ERROR(CheckName(name));
    std::string path = PathOf(name);
    int flags = O_RDONLY | O_CLOEXEC | (direct_ ? O_DIRECT : 0);
    Fd fd(::open(path.c_str(), flags));
    if (fd.get() < 0) return Status::FromErrno(errno, "open object " + name);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat object " + name);
    ASSIGN_OR_RETURN(auto engine, MakeIoEngine(opts_.io, opts_.queue_depth));
    const uint64_t size = options.known_size.value_or(static_cast<uint64_t>(st.st_size));
    return NewFileReadable(name, fd.release(), size, std::move(engine));
  }

  Status PublishIfAbsent(const std::string& name, std::string_view bytes) override {
    RETURN_IF_ERROR(CheckName(name));
    std::string path = PathOf(name);
    std::string dir = ParentOf(path);
    std::string tmp = path + ".tmp." + RandomSuffix();
    {
      ASSIGN_OR_RETURN(int raw_fd, CreateFile(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                                              "create " + name + " (temporary)"));
      Fd fd(raw_fd);
      Status st = WriteAllFd(fd.get(), bytes.data(), bytes.size(), name + " (temporary)");
      if (st.ok() && ::fsync(fd.get()) != 0) st = Status::FromErrno(errno, "fsync " + name);
      if (!st.ok()) {
        ::unlink(tmp.c_str());
        return st;
      }
    }
    // renameat2(RENAME_NOREPLACE) makes "create if absent" atomic: of two
    // publishers exactly one succeeds, and readers see the whole file or none.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
      int err = errno;
      if (err == EINVAL || err == ENOSYS) {
        // Filesystem without RENAME_NOREPLACE: link() is just as exclusive.
        if (::link(tmp.c_str(), path.c_str()) != 0) {
          err = errno;
        } else {
          err = 0;
        }
        ::unlink(tmp.c_str());
      } else {
        ::unlink(tmp.c_str());
      }
      if (err == EEXIST) return Status::AlreadyExists("object " + name + " already exists");
      if (err != 0) return Status::FromErrno(err, "publish " + name);
    }
    return FsyncDir(dir);
  }

  Result<std::string> ReadSmall(const std::string& name) override {
    RETURN_IF_ERROR(CheckName(name));
    std::string path = PathOf(name);
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return Status::FromErrno(errno, "open object " + name);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat object " + name);
    if (static_cast<uint64_t>(st.st_size) > kMaxSmallObjectBytes) {
      return Status::Corruption("object " + name + " is " + std::to_string(st.st_size) +
                                " bytes, more than any record can be");
    }
    std::string out(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::pread(fd.get(), out.data() + done, out.size() - done,
                          static_cast<off_t>(done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "read object " + name);
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    out.resize(done);
    return out;
  }

  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
    if (!prefix.empty() && prefix.back() != '/') {
      return Status::InvalidArgument("list prefix '" + prefix + "' must end in '/'");
    }
    std::vector<ObjectInfo> out;
    // A missing prefix directory lists as empty, but a missing root means
    // the store is gone: callers (retention, gc) must not read that as "holds
    // nothing".
    struct stat st;
    if (::stat(root_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Status::Unavailable("list " + uri_ + ": the store directory " + root_ +
                                 " no longer exists (removed or unmounted?)");
    }
    RETURN_IF_ERROR(Walk(prefix, &out));
    return out;
  }

  Result<std::vector<ObjectInfo>> Stat(const std::vector<std::string>& names) override {
    // As in List: a store that is gone is not a store whose objects are gone.
    struct stat root;
    if (::stat(root_.c_str(), &root) != 0 || !S_ISDIR(root.st_mode)) {
      return Status::Unavailable("stat in " + uri_ + ": the store directory " + root_ +
                                 " no longer exists (removed or unmounted?)");
    }
    std::vector<ObjectInfo> out;
    for (const auto& name : names) {
      RETURN_IF_ERROR(CheckName(name));
      struct stat st;
      // fstatat, as List's walk: one call, so an object's mtime reads the
      // same by either path (gc compares them against one cutoff).
      if (::fstatat(AT_FDCWD, PathOf(name).c_str(), &st, 0) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) continue;
        return Status::FromErrno(errno, "stat object " + name);
      }
      if (!S_ISREG(st.st_mode)) continue;
      int64_t ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
      out.push_back(ObjectInfo{name, static_cast<uint64_t>(st.st_size), ms});
    }
    return out;
  }

  Status Remove(const std::string& name) override {
    RETURN_IF_ERROR(CheckName(name));
    std::string path = PathOf(name);
    if (::unlink(path.c_str()) != 0) return Status::FromErrno(errno, "remove object " + name);
    // An unlink is durable only once its directory is synced. A directory
    // that a concurrent Remove or gc pruned meanwhile went with the entry.
    Status synced = FsyncDir(ParentOf(path));
    if (!synced.ok() && !synced.IsNotFound()) return synced;
    // Prune directories left empty, up to (not including) the root.
    std::string dir = ParentOf(path);
    while (dir.size() > root_.size() && ::rmdir(dir.c_str()) == 0) dir = ParentOf(dir);
    return Status::OK();
  }

  Status Replace(const std::string& staged, const std::string& target) override {
    RETURN_IF_ERROR(CheckName(staged));
    RETURN_IF_ERROR(CheckName(target));
    const std::string from = PathOf(staged), to = PathOf(target);
    // rename(2) replaces the target atomically; the staged file was written
    // and synced by its writer (Finish). Parents are made as CreateFile does.
    RETURN_IF_ERROR(MakeDirs(ParentOf(to)));
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return Status::FromErrno(errno, "replace object " + target + " with " + staged);
    }
    RETURN_IF_ERROR(FsyncDir(ParentOf(to)));
    if (ParentOf(from) != ParentOf(to)) {
      Status synced = FsyncDir(ParentOf(from));
      if (!synced.ok() && !synced.IsNotFound()) return synced;
    }
    return Status::OK();
  }

  Status ReclaimLeftovers(const std::string& prefix, uint64_t min_age_ms) override {
    if (!prefix.empty() && prefix.back() != '/') {
      return Status::InvalidArgument("prefix '" + prefix + "' must end in '/'");
    }
    if (!prefix.empty()) RETURN_IF_ERROR(CheckName(prefix.substr(0, prefix.size() - 1)));
    const std::string dir = prefix.empty() ? root_ : root_ + "/" + prefix.substr(0, prefix.size() - 1);
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
    RemoveStaleProbes(now_ms - static_cast<int64_t>(min_age_ms));
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return Status::OK();
      return Status::FromErrno(errno, "open directory " + dir);
    }
    bool unused = false;
    return PruneEmptyDirsAt(fd, dir, now_ms - static_cast<int64_t>(min_age_ms), &unused);  // closes fd
  }

 private:
  // Removes probe files (ProbeDirect's named fallback) a killed process left in the root.
  void RemoveStaleProbes(int64_t cutoff_ms) {
    DIR* d = ::opendir(root_.c_str());
    struct stat st;
    while (dirent* e = d != nullptr ? ::readdir(d) : nullptr) {
      if (std::strncmp(e->d_name, kProbePrefix, std::strlen(kProbePrefix)) == 0 &&
          ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
          st.st_mtim.tv_sec * 1000ll + st.st_mtim.tv_nsec / 1000000 <= cutoff_ms) {
        (void)::unlinkat(::dirfd(d), e->d_name, 0);
      }
    }
    if (d != nullptr) ::closedir(d);
  }

  // Object names map to paths under the root: no absolute names, no empty,
  // "." or ".." components (a checkpoint named "run..2" is fine).
  Status CheckName(const std::string& name) const {
    bool bad = name.empty() || name.front() == '/' || name.back() == '/' ||
               name.find('\0') != std::string::npos;
    size_t start = 0;
    while (!bad && start <= name.size()) {
      size_t slash = name.find('/', start);
      std::string_view comp(name.data() + start, (slash == std::string::npos ? name.size() : slash) - start);
      bad = comp.empty() || comp == "." || comp == "..";
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    if (bad) return Status::InvalidArgument("invalid object name '" + name + "'");
    return Status::OK();
  }
  std::string PathOf(const std::string& name) const { return root_ + "/" + name; }

  // open(O_CREAT) with its parent directories made first. Remove() prunes
  // directories that become empty, so a concurrent gc can remove the parent
  // between MakeDirs and open: then make it again.
  // Directories are made below the store's root only: a root that vanished
  // (removed, or a mount point whose filesystem went away) is an error, not
  // something to recreate, since writes would then land on whatever
  // filesystem lies underneath.
  Result<int> CreateFile(const std::string& path, int flags, const std::string& what) const {
    for (int attempt = 0;; ++attempt) {
      struct stat st;
      if (::stat(root_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        return Status::Unavailable(what + ": the store directory " + root_ +
                                   " no longer exists (removed or unmounted?)");
      }
      Status made = MakeDirs(ParentOf(path));
      if (!made.ok()) {
        if (made.IsNotFound() && attempt < 5) continue;  // a parent went meanwhile
        return made;
      }
      int fd = ::open(path.c_str(), flags, 0644);
      if (fd >= 0) return fd;
      if (errno != ENOENT || attempt >= 5) return Status::FromErrno(errno, what);
    }
  }

  // A publish's temporary file (PublishIfAbsent writes "<name>.tmp.<random>"
  // and renames it into place; names with ".tmp." are refused above this
  // layer, so no object is ever taken for one).
  static bool IsTemporary(std::string_view file_name) {
    return file_name.find(".tmp.") != std::string_view::npos;
  }

  // Post-order: removes temporaries last modified at or before `tmp_cutoff_ms`
  // and the empty directories below the directory open as `fd` (named `dir`
  // in messages); sets `*empty` when `fd`'s directory holds nothing
  // afterwards.
  // Everything is relative to directory descriptors and nothing follows a
  // symlink, so no directory outside the store is ever touched. rmdir()
  // refuses a directory that is not empty, so a file created meanwhile is
  // never lost; a writer whose fresh directory goes makes it again
  // (CreateFile). Takes ownership of `fd`.
  Status PruneEmptyDirsAt(int fd, const std::string& dir, int64_t tmp_cutoff_ms, bool* empty) {
    *empty = false;
    DIR* d = ::fdopendir(fd);
    if (d == nullptr) {
      ::close(fd);
      return Status::FromErrno(errno, "list " + dir);
    }
    Status result;
    bool holds_anything = false;
    while (dirent* e = ::readdir(d)) {
      std::string_view n = e->d_name;
      if (n == "." || n == "..") continue;
      struct stat st;
      if (::fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;
        result = Status::FromErrno(errno, "stat " + dir + "/" + std::string(n));
        break;
      }
      if (!S_ISDIR(st.st_mode)) {
        const int64_t mtime_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
        if (S_ISREG(st.st_mode) && IsTemporary(n) && mtime_ms <= tmp_cutoff_ms &&
            ::unlinkat(dirfd(d), e->d_name, 0) == 0) {
          continue;
        }
        holds_anything = true;
        continue;
      }
      int child = ::openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child < 0) {
        if (errno == ENOENT) continue;
        holds_anything = true;  // replaced by something else meanwhile: leave it
        continue;
      }
      bool child_empty = false;
      result = PruneEmptyDirsAt(child, dir + "/" + std::string(n), tmp_cutoff_ms, &child_empty);
      if (!result.ok()) break;
      if (child_empty && ::unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) == 0) continue;
      // Not empty, or refused (ENOTEMPTY: a writer got there first; EBUSY:
      // a mount point; EACCES): it stays.
      holds_anything = true;
    }
    ::closedir(d);
    *empty = result.ok() && !holds_anything;
    return result;
  }

  Status Walk(const std::string& rel_dir, std::vector<ObjectInfo>* out) {
    std::string dir = rel_dir.empty() ? root_ : root_ + "/" + rel_dir;
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
      if (errno == ENOENT || errno == ENOTDIR) return Status::OK();
      return Status::FromErrno(errno, "list " + dir);
    }
    Status result;
    while (dirent* e = ::readdir(d)) {
      std::string_view n = e->d_name;
      if (n == "." || n == "..") continue;
      std::string rel = rel_dir + std::string(n);
      struct stat st;
      if (::fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;  // removed while listing
        result = Status::FromErrno(errno, "stat " + rel);
        break;
      }
      if (S_ISDIR(st.st_mode)) {
        result = Walk(rel + "/", out);
        if (!result.ok()) break;
      } else if (S_ISREG(st.st_mode) && !IsTemporary(n) &&
                 !(rel_dir.empty() && n.rfind(kStoreFilePrefix, 0) == 0)) {
        // (The store's own files in the root, e.g. a multi-directory
        // store's layout record, are not objects.)
        int64_t ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
        out->push_back(ObjectInfo{rel, static_cast<uint64_t>(st.st_size), ms});
      }
    }
    ::closedir(d);
    return result;
  }

  std::string uri_;
  std::string root_;
  FileOptions opts_;
  bool direct_;
  BackendCaps caps_;
  Children children_{*this};
};

// Asks the filesystem whether it takes O_DIRECT. Through an unnamed
// O_TMPFILE where the filesystem has them, so that a process killed here
// leaves nothing behind; else through a named probe file, which gc
// (ReclaimLeftovers) removes if a kill left it.
Result<bool> ProbeDirect(const std::string& root) {
  int tmp = ::open(root.c_str(), O_TMPFILE | O_WRONLY | O_DIRECT | O_CLOEXEC, 0600);
  if (tmp >= 0) {
    ::close(tmp);
    return true;
  }
  // No O_TMPFILE here, or no O_DIRECT: the named probe tells which.
  std::string probe = root + "/" + kProbePrefix + RandomSuffix();
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
  int err = errno;
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());  // a refusal may still have created it
  if (fd >= 0) return true;
  if (err == EINVAL || err == EOPNOTSUPP) return false;
  return Status::FromErrno(err, "probe O_DIRECT in " + root);
}

}  // namespace

Result<std::unique_ptr<FileDirectory>> OpenFileDirectory(const std::string& uri, const std::string& path,
                                                         const FileOptions& opts, bool create_if_missing) {
  std::string root = path;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) {
    if (errno != ENOENT || !create_if_missing) {
      return Status::FromErrno(errno, "store " + root);
    }
    RETURN_IF_ERROR(MakeDirs(root));
  } else if (!S_ISDIR(st.st_mode)) {
    // An operational error, as a missing store is (exit 1), not a usage error.
    return Status::IOError("store " + root + " is not a directory");
  }
  if (::access(root.c_str(), R_OK | X_OK) != 0) return Status::FromErrno(errno, "store " + root);

  bool direct = false;
  if (opts.direct != FileOptions::Direct::kOff) {
    auto probed = ProbeDirect(root);
    if (!probed.ok()) {
      // A read-only store cannot be probed by creating a file; read it buffered.
      if (opts.direct == FileOptions::Direct::kOn) return probed.status();
      direct = false;
    } else {
      direct = *probed;
    }
    if (!direct && opts.direct == FileOptions::Direct::kOn) {
      return Status::NotSupported("store " + root + ": the filesystem refuses O_DIRECT (direct=on)");
    }
  }
  // Probe the engine once so caps().io_path tells the truth.
  ASSIGN_OR_RETURN(auto engine, MakeIoEngine(opts.io, 1));
  std::string engine_name = engine->name();
  return std::unique_ptr<FileDirectory>(new FileBackend(uri, root, opts, direct, engine_name));
}

}  // namespace sluice
