#include "item_sources.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>

#include "sluice/stream_copy.h"

namespace sluice::cli {
namespace {

// Entries that are not regular files, each with why ("a symlink"): all of
// them are named (up to kRefusalsNamed), not only the first.
struct Refusals {
  std::vector<std::string> named;
  size_t count = 0;
};
constexpr size_t kRefusalsNamed = 8;

Status ScanDir(const std::string& root, const std::string& rel, std::vector<TreeFile>* out, Refusals* refused) {
  std::string dir = rel.empty() ? root : root + "/" + rel;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::FromErrno(errno, "cannot read directory " + dir);
  Status result;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    std::string key = rel.empty() ? n : rel + "/" + n;
    std::string path = root + "/" + key;
    struct stat st;
    if (::fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      result = Status::FromErrno(errno, "cannot stat " + path);
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      result = ScanDir(root, key, out, refused);
      if (!result.ok()) break;
      continue;
    }
    const char* kind = S_ISLNK(st.st_mode) ? "a symlink" : S_ISCHR(st.st_mode) ? "a character device"
                       : S_ISBLK(st.st_mode) ? "a block device" : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISSOCK(st.st_mode) ? "a socket" : nullptr;
    if (kind != nullptr) {
      if (refused->named.size() < kRefusalsNamed) refused->named.push_back(path + " (" + kind + ")");
      ++refused->count;
      continue;
    }
    if (Status k = ValidateItemKey(key); !k.ok()) {
      result = Status::InvalidArgument("refusing " + path + ": " + k.message());
      break;
    }
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      result = Status::FromErrno(errno, "refusing " + path + ": cannot open it for reading");
      break;
    }
    ::close(fd);
    out->push_back(TreeFile{key, path, static_cast<uint64_t>(st.st_size), st.st_mode & 07777});
  }
  ::closedir(d);
  return result;
}

constexpr size_t kPoolBytes = 8u << 20;

const uint8_t* Pool() {
  static const uint8_t* pool = [] {
    auto* p = new uint8_t[kPoolBytes + (1u << 20)];  // slack for reads that run over the end
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < kPoolBytes + (1u << 20); i += 8) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;  // xorshift64
      std::memcpy(p + i, &x, 8);
    }
    return p;
  }();
  return pool;
}

}  // namespace

Result<std::vector<TreeFile>> ScanTree(const std::string& root) {
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) return Status::FromErrno(errno, "--from " + root);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument("--from " + root + " is not a directory");
  std::vector<TreeFile> out;
  // "./state/" and "./state" name the same tree: paths get one slash.
  std::string dir = root;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  Refusals refused;
  RETURN_IF_ERROR(ScanDir(dir, "", &out, &refused));
  if (refused.count > 0) {
    std::string list;
    for (const auto& r : refused.named) list += (list.empty() ? "" : ", ") + r;
    if (refused.count > refused.named.size()) {
      list += " and " + std::to_string(refused.count - refused.named.size()) + " more";
    }
    return Status::InvalidArgument("refusing " + std::to_string(refused.count) + " entr" +
                                   (refused.count == 1 ? "y" : "ies") + " under --from " + dir +
                                   " that are not regular files (only regular files are saved): " + list);
  }
  std::sort(out.begin(), out.end(), [](const TreeFile& a, const TreeFile& b) { return a.key < b.key; });
  return out;
}

// A source holds its file open only while it is being read: a save of a
// tree of any number of files keeps a bounded number of descriptors (one
// per copy thread), whatever RLIMIT_NOFILE is.
Result<std::unique_ptr<FileSource>> FileSource::Open(const TreeFile& file) {
  return std::unique_ptr<FileSource>(new FileSource(file));
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

Status FileSource::OpenFile() {
  // Opened when first read, after the scan: a path swapped meanwhile for
  // a FIFO or device must neither block the save nor be read.
  fd_ = ::open(file_.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd_ < 0) return Status::FromErrno(errno, "open " + file_.path);
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    return Status::InvalidArgument(file_.path + " is no longer a regular file");
  }
  // A regular file: read it blocking (some FUSE filesystems would answer a
  // non-blocking read with EAGAIN).
  (void)::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  return Status::OK();
}

// Checks that the file ended where it was declared to end, and closes it.
Status FileSource::CheckAndClose() {
  struct stat st;
  Status result;
  if (::fstat(fd_, &st) != 0) {
    result = Status::FromErrno(errno, "stat " + file_.path);
  } else if (static_cast<uint64_t>(st.st_size) != file_.size) {
    result = Status::IOError(file_.path + " changed size while being saved (" +
                             std::to_string(file_.size) + " -> " + std::to_string(st.st_size) + " bytes)");
  }
  ::close(fd_);
  fd_ = -1;
  closed_ = true;
  return result;
}

Result<size_t> FileSource::Read(void* buf, size_t len) {
  if (closed_) return Status::InvalidArgument("read " + file_.path + " past its end");
  if (fd_ < 0) RETURN_IF_ERROR(OpenFile());
  size_t want = static_cast<size_t>(std::min<uint64_t>(len, file_.size - offset_));
  size_t done = 0;
  while (done < want) {
    ssize_t n = ::pread(fd_, static_cast<char*>(buf) + done, want - done, static_cast<off_t>(offset_ + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read " + file_.path);
    }
    if (n == 0) {
      return Status::IOError(file_.path + " shrank while being saved (now " +
                             std::to_string(offset_ + done) + " bytes, was " +
                             std::to_string(file_.size) + ")");
    }
    done += static_cast<size_t>(n);
  }
  // Drop what was read from the page cache: a tree larger than memory should
  // not push the training job's pages out.
  if ((offset_ + done) / (64u << 20) != offset_ / (64u << 20) || offset_ + done == file_.size) {
    ::posix_fadvise(fd_, 0, static_cast<off_t>(offset_ + done), POSIX_FADV_DONTNEED);
  }
  offset_ += done;
  if (offset_ == file_.size) {
    close_status_ = CheckAndClose();
    RETURN_IF_ERROR(close_status_);
  }
  return done;
}

Status FileSource::Close() {
  if (!closed_) {
    // Never read to its end (an empty file): check it the same way.
    if (fd_ < 0) RETURN_IF_ERROR(OpenFile());
    close_status_ = CheckAndClose();
  }
  return close_status_;
}

SyntheticSource::SyntheticSource(uint64_t seed, uint64_t size)
    : pos_((seed * 0x9E3779B97F4A7C15ull) % kPoolBytes), left_(size) {}

Result<size_t> SyntheticSource::Read(void* buf, size_t len) {
  const uint8_t* pool = Pool();
  size_t n = static_cast<size_t>(std::min<uint64_t>(len, left_));
  size_t done = 0;
  while (done < n) {
    size_t piece = std::min<size_t>(n - done, kPoolBytes - static_cast<size_t>(pos_));
    StreamCopy(static_cast<uint8_t*>(buf) + done, pool + pos_, piece);
    done += piece;
    // Step to a different rotation each lap so the stream does not repeat
    // with an 8 MiB period.
    pos_ = (pos_ + piece) % kPoolBytes;
    if (pos_ == 0) pos_ = 4099;
  }
  left_ -= n;
  return n;
}

uint64_t SyntheticChangeStep(uint64_t item, uint64_t items, double fraction, uint64_t step) {
  if (fraction <= 0 || items == 0) return 0;
  const uint64_t window = std::min<uint64_t>(items, static_cast<uint64_t>(std::ceil(fraction * static_cast<double>(items))));
  // Step t changes items [t*window, t*window + window) mod items. The window
  // sweeps every item within items/window steps, so the search is short.
  const uint64_t period = (items + window - 1) / window + 1;
  for (uint64_t back = 0; back <= period && back <= step; ++back) {
    const uint64_t t = step - back;
    const uint64_t start = static_cast<uint64_t>((static_cast<unsigned __int128>(t) * window) % items);
    if ((item + items - start) % items < window) return t;
  }
  return 0;
}

std::vector<uint64_t> SplitSizes(uint64_t total, uint64_t items) {
  std::vector<uint64_t> out;
  if (items == 0) return out;
  uint64_t each = total / items;
  for (uint64_t i = 0; i < items; ++i) out.push_back(each);
  out.back() += total - each * items;
  return out;
}

std::string FileMetadata(uint32_t mode) {
  char buf[32];
  snprintf(buf, sizeof buf, "mode=%04o", mode & 07777);
  return buf;
}

uint32_t ModeFromMetadata(const std::string& metadata) {
  if (metadata.size() != 9 || metadata.rfind("mode=", 0) != 0) return 0644;
  uint32_t m = 0;
  for (size_t i = 5; i < 9; ++i) {
    char c = metadata[i];
    if (c < '0' || c > '7') return 0644;
    m = m * 8 + static_cast<uint32_t>(c - '0');
  }
  return m;
}

}  // namespace sluice::cli
