// sluice restore: checkpoint NAME@STEP -> files under DIR, every chunk verified.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "item_sources.h"
#include "output.h"
#include "store_flags.h"

namespace sluice::cli {
CommandSpec RestoreSpec() {
  CommandSpec s;
  s.name = "restore";
  s.usage = "restore (--store URI | --tier URI...) --name NAME [--step N|latest|latest-good] --to DIR [flags]";
  s.summary =
      "Recreates the files of a committed checkpoint under DIR, bit-exact, checking\n"
      "every chunk's crc32c. With several --tier, it reads the fastest tier holding\n"
      "a committed copy; a missing or bad chunk there is read from a later tier\n"
      "(said on stderr) and the bad copy is rewritten from the good one. A bad chunk\n"
      "with no good copy anywhere stops the restore with an error naming the item,\n"
      "chunk, data object and offset. Each file is written under a temporary\n"
      "name and renamed into place once complete, so a failed restore leaves no\n"
      "half-written file. Symlinks in DIR are never followed; files get their saved\n"
      "rwx bits (setuid, setgid and sticky bits are not restored).";
  s.flags = StoreFlagSpecs(false);
  s.flags.insert(s.flags.end(), {
      {"name", "NAME", "checkpoint name"},
      {"step", "N|latest|latest-good", "step to restore (default latest: the newest committed step, an error if it is damaged; latest-good: the newest intact one)"},
      {"to", "DIR", "directory to restore into (created if missing)"},
      {"rank", "R", "restore only rank R's items (default: all ranks)"},
      {"force", "", "restore into a non-empty DIR, overwriting files of the same names"},
      {"json", "", "print the result as one JSON object"},
  });
  return s;
}

namespace {

bool DirIsEmpty(const std::string& dir, bool* exists) {
  DIR* d = ::opendir(dir.c_str());
  *exists = d != nullptr;
  if (d == nullptr) return true;
  bool empty = true;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") { empty = false; break; }
  }
  ::closedir(d);
  return empty;
}

// Opens the directory that will hold root/key, making directories on the
// way, without following a symlink anywhere below root: with --force, DIR may
// already hold a symlink (say x -> /etc) that a key "x/passwd" must not write
// through. Returns the directory's fd; the key's last component is the file.
Result<int> OpenParentBeneath(const std::string& root, const std::string& key) {
  int dir = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return Status::FromErrno(errno, "open " + root);
  size_t start = 0;
  for (size_t slash; (slash = key.find('/', start)) != std::string::npos; start = slash + 1) {
    std::string comp = key.substr(start, slash - start);
    std::string so_far = root + "/" + key.substr(0, slash);
    if (::mkdirat(dir, comp.c_str(), 0755) != 0 && errno != EEXIST) {
      int err = errno;
      ::close(dir);
      return Status::FromErrno(err, "mkdir " + so_far);
    }
    int next = ::openat(dir, comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = errno;
    ::close(dir);
    if (next < 0) {
      return Status::FromErrno(err, (err == ELOOP || err == ENOTDIR)
                                        ? "refusing to restore through " + so_far + " (not a plain directory)"
                                        : "open directory " + so_far);
    }
    dir = next;
  }
  return dir;
}

std::string BaseName(const std::string& key) {
  size_t slash = key.find_last_of('/');
  return slash == std::string::npos ? key : key.substr(slash + 1);
}

// Writes restored items to files; keeps at most a few open at once.
//
// Files are written with O_DIRECT where the filesystem takes it: buffered
// writes cost about 2 s of kernel CPU per GiB on this kind of machine, which
// would make restore CPU-bound. Chunks arrive at item offsets that are
// multiples of the chunk size, so each one is copied into an aligned buffer
// (memcpy is ~5x faster than the page cache path) and written in place; the
// padded tail is trimmed with ftruncate. A file whose pieces do not line up
// (a chunk size that is not a multiple of 4 KiB) drops back to buffered I/O,
// and so do files under 1 MiB.
//
// Each file is written under a temporary name in its directory and renamed
// into place once all of its bytes are in and verified, so a restore that
// fails (or is killed) never leaves a half-written file under a real name;
// with --force, an existing file is replaced only by a complete one.
//
// Zero 4 KiB blocks are not written: the new file reads zeros there anyway,
// and the final ftruncate gives it its size, so a sparse source (whose holes
// were saved as zeros) is restored sparse. Only a piece whose first block is
// zero is looked at further; for almost any real data the first block is
// not, so the check costs one 4 KiB scan per piece.
class FileWriterSink {
 public:
  static constexpr size_t kAlign = 4096;
  static constexpr uint64_t kDirectMinBytes = 1 << 20;

  explicit FileWriterSink(std::string root) : root_(std::move(root)) {}
  ~FileWriterSink() {
    for (auto& [k, f] : open_) {
      ::close(f.fd);
      ::unlinkat(f.dir_fd, f.tmp.c_str(), 0);
      ::close(f.dir_fd);
    }
    std::free(bounce_);
  }

  Status Write(const ItemInfo& item, uint64_t offset, const void* data, size_t len) {
    auto it = open_.find(item.key);
    if (it == open_.end()) {
      const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
      // Only rwx bits: a checkpoint is data, and restoring setuid/setgid
      // bits from it (often as root) is a way to plant privileged programs.
      const mode_t mode = (ModeFromMetadata(item.metadata) & 0777) | 0200;
      ASSIGN_OR_RETURN(int dir_fd, OpenParentBeneath(root_, item.key));
      std::string tmp = ".sluice-restore." + std::to_string(::getpid()) + "." + std::to_string(++temp_seq_);
      // Small files go through the page cache: a synchronous O_DIRECT write
      // per tiny file costs a device round trip each.
      bool direct = item.size >= kDirectMinBytes;
      int fd = ::openat(dir_fd, tmp.c_str(), flags | (direct ? O_DIRECT : 0), mode);
      if (fd < 0 && direct && errno == EINVAL) {
        direct = false;  // the filesystem refuses O_DIRECT
        fd = ::openat(dir_fd, tmp.c_str(), flags, mode);
      }
      if (fd < 0) {
        Status st = Status::FromErrno(errno, "create a temporary file for " + root_ + "/" + item.key);
        ::close(dir_fd);
        return st;
      }
      it = open_.emplace(item.key, Open{fd, dir_fd, tmp, 0, ModeFromMetadata(item.metadata) & 0777, direct}).first;
    }
    Open& f = it->second;
    const std::string what = root_ + "/" + item.key;
    const bool last = offset + len == item.size;
    if (f.direct && (offset % kAlign != 0 || (len % kAlign != 0 && !last))) {
      ::fcntl(f.fd, F_SETFL, ::fcntl(f.fd, F_GETFL) & ~O_DIRECT);
      f.direct = false;
    }
    const auto* bytes = static_cast<const unsigned char*>(data);
    if (!ZeroBlock(bytes, std::min(len, kAlign))) {
      RETURN_IF_ERROR(WriteRun(f, bytes, len, offset, what));
    } else {
      // Starts with a zero block: write only the runs of blocks that are not
      // zero, leaving holes between them.
      size_t run = 0;
      bool in_run = false;
      for (size_t at = 0; at <= len; at += kAlign) {
        const bool zero = at == len || ZeroBlock(bytes + at, std::min(kAlign, len - at));
        if (!zero && !in_run) {
          run = at;
          in_run = true;
        } else if (zero && in_run) {
          RETURN_IF_ERROR(WriteRun(f, bytes + run, at - run, offset + run, what));
          in_run = false;
        }
        if (zero && at < len) holes_ += std::min(kAlign, len - at);
        if (at == len) break;
      }
      if (in_run) RETURN_IF_ERROR(WriteRun(f, bytes + run, len - run, offset + run, what));
    }
    f.written += len;
    bytes_ += len;
    if (f.written == item.size) {
      Status st;
      if (::ftruncate(f.fd, static_cast<off_t>(item.size)) != 0) st = Status::FromErrno(errno, "truncate " + what);
      ::fchmod(f.fd, f.mode);
      if (::close(f.fd) != 0 && st.ok()) st = Status::FromErrno(errno, "close " + what);
      if (st.ok() && ::renameat(f.dir_fd, f.tmp.c_str(), f.dir_fd, BaseName(item.key).c_str()) != 0) {
        st = Status::FromErrno(errno, "rename into place " + what);
      }
      if (!st.ok()) ::unlinkat(f.dir_fd, f.tmp.c_str(), 0);
      ::close(f.dir_fd);
      open_.erase(it);
      RETURN_IF_ERROR(st);
      ++files_;
    }
    return Status::OK();
  }
  uint64_t files() const { return files_; }
  uint64_t hole_bytes() const { return holes_; }
  uint64_t bytes() const { return bytes_; }

 private:
  struct Open {
    int fd;
    int dir_fd;
    std::string tmp;  // temporary name in dir_fd until complete
    uint64_t written;
    uint32_t mode;
    bool direct;
  };

  static bool ZeroBlock(const unsigned char* p, size_t n) {
    unsigned char any = 0;
    for (size_t i = 0; i < n; ++i) any |= p[i];  // vectorized: no exit inside the block
    return any == 0;
  }

  // Writes bytes at offset `offset` of the file; with O_DIRECT, through the
  // aligned buffer, padded to a block (the final ftruncate trims the tail).
  Status WriteRun(Open& f, const unsigned char* data, size_t len, uint64_t offset, const std::string& what) {
    if (!f.direct) return PwriteAll(f.fd, data, len, offset, what);
    size_t padded = (len + kAlign - 1) / kAlign * kAlign;
    RETURN_IF_ERROR(Bounce(padded));
    std::memcpy(bounce_, data, len);
    std::memset(static_cast<char*>(bounce_) + len, 0, padded - len);
    return PwriteAll(f.fd, bounce_, padded, offset, what);
  }

  static Status PwriteAll(int fd, const void* data, size_t len, uint64_t offset, const std::string& what) {
    const char* p = static_cast<const char*>(data);
    size_t done = 0;
    while (done < len) {
      ssize_t n = ::pwrite(fd, p + done, len - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "write " + what);
      }
      done += static_cast<size_t>(n);
    }
    return Status::OK();
  }

  Status Bounce(size_t size) {
    if (size <= bounce_size_) return Status::OK();
    std::free(bounce_);
    bounce_ = nullptr;
    bounce_size_ = 0;
    if (posix_memalign(&bounce_, kAlign, size) != 0) {
      return Status::IOError("cannot allocate a " + std::to_string(size) + "-byte restore buffer");
    }
    bounce_size_ = size;
    return Status::OK();
  }

  std::string root_;
  std::map<std::string, Open> open_;
  void* bounce_ = nullptr;
  size_t bounce_size_ = 0;
  uint64_t files_ = 0;
  uint64_t bytes_ = 0;
  uint64_t holes_ = 0;
  uint64_t temp_seq_ = 0;
};

}  // namespace

int CmdRestore(int argc, char** argv) {
  const CommandSpec spec = RestoreSpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  auto args = CheckpointArgsFromFlags(flags);
  if (!args.ok()) return Fail(args.status(), true);
  auto to = flags.Require("to");
  if (!to.ok()) return Fail(to.status(), true);
  std::optional<uint32_t> rank;
  if (flags.Has("rank")) {
    auto r = flags.GetU64("rank", 0);
    if (!r.ok() || *r > 1'000'000) return Fail(Status::InvalidArgument("--rank must be a rank number"), true);
    rank = static_cast<uint32_t>(*r);
  }
  bool exists = false;
  if (!DirIsEmpty(*to, &exists) && !flags.Has("force")) {
    return Fail(Status::AlreadyExists("--to " + *to + " is not empty (use --force to restore into it)"));
  }

  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  auto pipeline = Pipeline::Open(args->pipeline);
  if (!pipeline.ok()) return FailStoreOpen(pipeline.status());
  // Reads the fastest tier with a committed copy; a bad or missing chunk
  // there is read from a later tier, and the bad copy rewritten.
  ReadRecovery recovery;
  auto reader = OpenCheckpointFromFlags(**pipeline, args->name, args->step, args->latest_good, &recovery);
  auto report_recovery = [&] {
    for (const auto& f : recovery.fallbacks) std::fprintf(stderr, "sluice: fallback: %s\n", f.c_str());
    for (const auto& r : recovery.repairs) std::fprintf(stderr, "sluice: repair: %s\n", r.c_str());
  };
  if (!reader.ok()) {
    report_recovery();
    return Fail(reader.status());
  }
  const CheckpointInfo& info = (*reader)->info();
  if (rank && *rank >= info.ranks) {
    // Operational (1): the command line is fine; this checkpoint has fewer ranks.
    return Fail(Status::InvalidArgument("--rank " + std::to_string(*rank) + ": " +
                                        CheckpointLabel(args->name, info.step) + " has " + std::to_string(info.ranks) +
                                        " rank(s), 0 to " + std::to_string(info.ranks - 1)));
  }
  uint64_t total = 0;
  for (const auto& it : (*reader)->items()) {
    if (!rank || it.rank == *rank) total += it.size;
  }
  if (Status st = MakeDirs(*to); !st.ok()) return Fail(st);
  FileWriterSink sink(*to);
  Progress progress("restore", total);
  Status st = (*reader)->ReadAll(rank, [&](const ItemInfo& item, uint64_t off, const void* data, size_t len) {
    progress.Add(len);
    return sink.Write(item, off, data, len);
  });
  progress.Done();
  report_recovery();
  if (!st.ok()) return Fail(st);
  const double secs = SecondsSince(t0);
  if (args->json) {
    PrintJson({{"name", info.name}, {"step", info.step}, {"bytes", sink.bytes()}, {"items", sink.files()},
               {"hole_bytes", sink.hole_bytes()}, {"seconds", secs},
               {"bytes_per_second", secs > 0 ? sink.bytes() / secs : 0}, {"cpu_seconds", ProcessCpuSeconds() - cpu0},
               {"to", *to}, {"fallbacks", recovery.fallbacks.size()}, {"repairs", recovery.repairs.size()}});
  } else {
    std::printf("restored %s@%llu: %llu items, %s in %.2f s (%s) into %s, all chunks verified\n",
                info.name.c_str(), static_cast<unsigned long long>(info.step),
                static_cast<unsigned long long>(sink.files()), HumanBytes(sink.bytes()).c_str(), secs,
                HumanRate(secs > 0 ? sink.bytes() / secs : 0).c_str(), to->c_str());
  }
  return kExitOk;
}

}  // namespace sluice::cli
