#include "backends/file/multi_dir_layout.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "backends/hedge_state.h"
#include "backends/uri_query.h"
#include "io/fnv1a.h"

namespace sluice {
namespace {

constexpr const char* kLayoutFile = ".sluice-dirs";    // in the home: the other directories
constexpr const char* kMarkerFile = ".sluice-dir-of";  // in each other directory: its home and index
constexpr const char* kLayoutMagic = "sluice multi-directory store v1";
constexpr size_t kMaxDirectories = 64;
using Clock = std::chrono::steady_clock;

}  // namespace

Result<MultiDirOptions> ParseMultiDirQuery(const std::string& uri, const std::string& query) {
  MultiDirOptions o;
  RETURN_IF_ERROR(ForEachQueryOption(query, [&](const std::string& key, const std::string& val) -> Status {
    if (key == "dirs") {
      size_t pos = 0;
      while (pos <= val.size()) {
        size_t comma = val.find(',', pos);
        std::string d = val.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        while (d.size() > 1 && d.back() == '/') d.pop_back();
        if (d.empty() || d.front() != '/') {
          return Status::InvalidArgument("store URI '" + uri + "': dirs='" + val +
                                         "' (expected absolute directories separated by ',')");
        }
        o.dirs.push_back(d);
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
      if (o.dirs.size() + 1 > kMaxDirectories) {
        return Status::InvalidArgument("store URI '" + uri + "': more than " + std::to_string(kMaxDirectories) +
                                       " directories");
      }
    } else {
      HedgeUriOptions h{o.hedge, o.hedge_extra, o.hedge_floor_ms};
      ASSIGN_OR_RETURN(bool taken, ParseHedgeUriOption(uri, key, val, &h));
      if (taken) {
        o.hedge = h.hedge;
        o.hedge_extra = h.extra;
        o.hedge_floor_ms = h.floor_ms;
      }
    }
    return Status::OK();
  }));
  return o;
}

namespace {

std::string Absolute(const std::string& path) {
  std::string p = path;
  if (p.empty() || p.front() != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd) != nullptr) p = std::string(cwd) + "/" + p;
  }
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

Result<std::optional<std::string>> ReadIfExists(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return Status::FromErrno(errno, "open " + path);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status st = Status::FromErrno(errno, "read " + path);
      ::close(fd);
      return st;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (1 << 20)) break;
  }
  ::close(fd);
  return std::optional<std::string>(std::move(out));
}

std::string NewStoreId();

// Writes `path` whole and durably: a temporary beside it, synced, renamed.
Status WriteFileDurably(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + NewStoreId();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status st = Status::FromErrno(errno, "write " + tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return st;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status st = Status::FromErrno(errno, "fsync " + tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status st = Status::FromErrno(errno, "rename " + tmp);
    ::unlink(tmp.c_str());
    return st;
  }
  const std::string dir = path.substr(0, path.rfind('/'));
  int d = ::open(dir.empty() ? "/" : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) return Status::FromErrno(errno, "open directory " + dir);
  int rc = ::fsync(d);
  int err = errno;
  ::close(d);
  if (rc != 0) return Status::FromErrno(err, "fsync directory " + dir);
  return Status::OK();
}


// Writes `path` whole and durably if it does not exist: a temporary beside
// it, synced, linked into place (AlreadyExists if it is there).
Status WriteFileExclusively(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".new." + NewStoreId();
  RETURN_IF_ERROR(WriteFileDurably(tmp, bytes));
  const int rc = ::link(tmp.c_str(), path.c_str());
  const int err = errno;
  ::unlink(tmp.c_str());
  if (rc != 0) return Status::FromErrno(err, "publish " + path);
  const std::string dir = path.substr(0, path.rfind('/'));
  int d = ::open(dir.empty() ? "/" : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) return Status::FromErrno(errno, "open directory " + dir);
  const int synced = ::fsync(d);
  const int sync_err = errno;
  ::close(d);
  if (synced != 0) return Status::FromErrno(sync_err, "fsync directory " + dir);
  return Status::OK();
}

// True when `dir` holds nothing but what a filesystem or sluice keeps in a
// fresh directory (lost+found, O_DIRECT probes).
Result<bool> HoldsNothing(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::FromErrno(errno, "list " + dir);
  bool empty = true;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    // (sluice's own: O_DIRECT probes, a marker being written.)
    if (n == "." || n == ".." || n == "lost+found" || n.rfind(kStoreFilePrefix, 0) == 0) continue;
    empty = false;
    break;
  }
  ::closedir(d);
  return empty;
}

// The layout record: the magic, "id <random>", then "dir <k> <path>" for
// k = 1..n-1. The marker: the magic, "id <same>", "home <path>", "index <k>".
struct Layout {
  std::string id;
  std::vector<std::string> dirs;  // besides the home
};

std::string EncodeLayout(const Layout& l) {
  std::string s = std::string(kLayoutMagic) + "\nid " + l.id + "\n";
  for (size_t k = 0; k < l.dirs.size(); ++k) s += "dir " + std::to_string(k + 1) + " " + l.dirs[k] + "\n";
  return s;
}

Result<Layout> DecodeLayout(const std::string& path, const std::string& bytes) {
  std::istringstream in(bytes);
  std::string line;
  auto bad = [&](const std::string& why) {
    return Status::Corruption("multi-directory store layout " + path + ": " + why);
  };
  if (!std::getline(in, line) || line != kLayoutMagic) return bad("not a layout record");
  Layout l;
  while (std::getline(in, line)) {
    if (line.rfind("id ", 0) == 0) {
      l.id = line.substr(3);
    } else if (line.rfind("dir ", 0) == 0) {
      const size_t sp = line.find(' ', 4);
      if (sp == std::string::npos || line.substr(4, sp - 4) != std::to_string(l.dirs.size() + 1)) {
        return bad("directories out of order");
      }
      l.dirs.push_back(line.substr(sp + 1));
    } else if (!line.empty()) {
      return bad("unknown line '" + line + "'");
    }
  }
  if (l.id.empty() || l.dirs.empty()) return bad("incomplete");
  return l;
}

struct Marker {
  std::string id, home;
  size_t index = 0;
};

Result<Marker> DecodeMarker(const std::string& path, const std::string& bytes) {
  std::istringstream in(bytes);
  std::string line;
  if (!std::getline(in, line) || line != kLayoutMagic) {
    return Status::Corruption("multi-directory store marker " + path + ": not a marker");
  }
  Marker m;
  while (std::getline(in, line)) {
    if (line.rfind("id ", 0) == 0) m.id = line.substr(3);
    if (line.rfind("home ", 0) == 0) m.home = line.substr(5);
    if (line.rfind("index ", 0) == 0) m.index = static_cast<size_t>(std::strtoul(line.c_str() + 6, nullptr, 10));
  }
  if (m.id.empty() || m.home.empty() || m.index == 0) {
    return Status::Corruption("multi-directory store marker " + path + ": incomplete");
  }
  return m;
}

std::string NewStoreId() {
  std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count()));
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

std::string JoinDirs(const std::vector<std::string>& dirs) {
  std::string s;
  for (const auto& d : dirs) s += (s.empty() ? "" : ",") + d;
  return s;
}


}  // namespace

bool IsMultiDirOption(const std::string& key) {
  return key == "dirs" || key == "hedge" || key == "hedge_extra" || key == "hedge_floor_ms";
}

size_t DirectoryOfName(const std::string& name, size_t dirs) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  size_t end = name.rfind('.');
  if (end == std::string::npos || end <= base) end = name.size();
  // "...-d<k>" right before the extension, k without leading zeros.
  size_t i = end;
  while (i > base && name[i - 1] >= '0' && name[i - 1] <= '9') --i;
  if (i == end || i - base < 2 || name[i - 1] != 'd' || name[i - 2] != '-' || name[i] == '0') return 0;
  if (end - i > 3) return 0;
  const size_t k = static_cast<size_t>(std::strtoul(name.substr(i, end - i).c_str(), nullptr, 10));
  return k < dirs ? k : 0;
}

Result<bool> IsMultiDirStore(const std::string& path, const std::string& query) {
  ASSIGN_OR_RETURN(MultiDirOptions o, ParseMultiDirQuery("file://" + path, query));
  if (!o.dirs.empty()) return true;
  std::string root = path;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  // A path that is no directory is named as such, not by a file in it.
  struct stat st;
  if (::stat(root.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return Status::IOError("store " + root + " is not a directory");
  } else if (errno != ENOENT) {
    return Status::FromErrno(errno, "store " + root);
  }
  ASSIGN_OR_RETURN(auto layout, ReadIfExists(root + "/" + kLayoutFile));
  if (layout) return true;
  ASSIGN_OR_RETURN(auto marker, ReadIfExists(root + "/" + kMarkerFile));
  if (marker) {
    auto m = DecodeMarker(root + "/" + kMarkerFile, *marker);
    std::string whose = m.ok() ? "directory " + std::to_string(m->index) + " of the multi-directory store at " +
                                     m->home + " (open file://" + m->home + ")"
                               : "a directory of a multi-directory store";
    return Status::InvalidArgument("store " + root + " is " + whose +
                                   "; opened alone, none of its objects' records would be found");
  }
  if (query.find("hedge") != std::string::npos) {
    return Status::InvalidArgument("store URI 'file://" + path +
                                   "': hedge options apply to a store over several directories (dirs=)");
  }
  return false;
}

Result<MultiDirStore> OpenMultiDirLayout(const std::string& uri, const std::string& home_path,
                                         const std::string& query, const FileOptions& file_options,
                                         bool create_if_missing) {
  ASSIGN_OR_RETURN(MultiDirOptions options, ParseMultiDirQuery(uri, query));
  const std::string home = Absolute(home_path);
  for (auto& d : options.dirs) d = Absolute(d);
  ASSIGN_OR_RETURN(auto home_dir, OpenFileDirectory(uri, home, file_options, create_if_missing));
  // The home must not be another store's directory.
  ASSIGN_OR_RETURN(auto home_marker, ReadIfExists(home + "/" + kMarkerFile));
  if (home_marker) {
    return Status::InvalidArgument("store " + home + " is a directory of another multi-directory store (" +
                                   home + "/" + kMarkerFile + "); it cannot be the home of one");
  }
  const std::string layout_path = home + "/" + kLayoutFile;
  ASSIGN_OR_RETURN(auto recorded, ReadIfExists(layout_path));
  Layout layout;
  if (recorded) {
    ASSIGN_OR_RETURN(layout, DecodeLayout(layout_path, *recorded));
    if (!options.dirs.empty() && options.dirs != layout.dirs) {
      return Status::InvalidArgument("store URI '" + uri + "': dirs=" + JoinDirs(options.dirs) + ", but the store " +
                                     home + " spans " + JoinDirs(layout.dirs) + " (recorded in " + layout_path +
                                     "); name them in that order, or leave dirs= out");
    }
  } else {
    // The id follows from the home, so that processes making the store at
    // once, or one after a creation cut short, write the same markers.
    layout.id = Fnv1aHex(home);
    layout.dirs = options.dirs;
  }
  // A store being made (no layout yet) may make its directories; one that
  // exists never does: a missing directory is a device not mounted, and
  // objects written onto the disk beneath would vanish once it is.
  const bool creating = !recorded && create_if_missing;
  // Distinct directories: one named twice (or a link to another) would
  // take the same objects under two indexes.
  std::vector<std::unique_ptr<FileDirectory>> dirs;
  dirs.push_back(std::move(home_dir));
  std::vector<std::pair<dev_t, ino_t>> seen;
  std::vector<std::string> all = {home};
  all.insert(all.end(), layout.dirs.begin(), layout.dirs.end());
  for (size_t k = 0; k < all.size(); ++k) {
    if (k > 0) {
      auto d = OpenFileDirectory(uri, all[k], file_options, creating);
      if (!d.ok()) {
        Status st = d.status().WithContext("directory " + std::to_string(k) + " of the multi-directory store " + home);
        if (!d.status().IsNotFound()) return st;
        // A fault that can pass: the store is back once the device is.
        return Status::Unavailable(st.message() + " (a device not mounted? a replaced one is taken back once its "
                                                  "directory exists, empty)");
      }
      dirs.push_back(std::move(d).value());
    }
    struct stat st;
    if (::stat(all[k].c_str(), &st) != 0) return Status::FromErrno(errno, "store directory " + all[k]);
    for (const auto& [dev, ino] : seen) {
      if (dev == st.st_dev && ino == st.st_ino) {
        return Status::InvalidArgument("store URI '" + uri + "': directory " + all[k] + " is named twice");
      }
    }
    seen.emplace_back(st.st_dev, st.st_ino);
  }
  // Each other directory's marker names this store and its index; a
  // directory marked for another store, or another index, is refused, and
  // so is one that holds anything but has no marker. All are checked
  // before anything is written.
  std::vector<size_t> unmarked;
  for (size_t k = 1; k < all.size(); ++k) {
    const std::string marker_path = all[k] + "/" + kMarkerFile;
    ASSIGN_OR_RETURN(auto marker, ReadIfExists(marker_path));
    if (marker) {
      ASSIGN_OR_RETURN(Marker m, DecodeMarker(marker_path, *marker));
      const bool ours = m.id == layout.id;
      if (!ours || m.index != k) {
        return Status::InvalidArgument("store " + home + ": directory " + all[k] + " belongs to " +
                                       (ours ? "this store as directory " + std::to_string(m.index)
                                             : "another multi-directory store (home " + m.home + ")") +
                                       ", not to this one as directory " + std::to_string(k));
      }
    } else if (create_if_missing) {
      // A directory new to the store, or a replaced device's: taken only
      // when empty.
      ASSIGN_OR_RETURN(bool empty, HoldsNothing(all[k]));
      if (!empty) {
        return Status::InvalidArgument("store " + home + ": directory " + all[k] + " holds files but no marker (" +
                                       kMarkerFile + ") of this store; give directory " + std::to_string(k) +
                                       " an empty directory");
      }
      unmarked.push_back(k);
    }
  }
  for (size_t k : unmarked) {
    RETURN_IF_ERROR(WriteFileDurably(all[k] + "/" + kMarkerFile, std::string(kLayoutMagic) + "\nid " + layout.id +
                                                                     "\nhome " + home + "\nindex " +
                                                                     std::to_string(k) + "\n"));
  }
  // The layout last, exclusively: a creation cut short before it is done
  // again by the next open; of two at once, the one that loses must have
  // named the same directories.
  if (creating) {
    Status published = WriteFileExclusively(layout_path, EncodeLayout(layout));
    if (published.IsAlreadyExists()) {
      ASSIGN_OR_RETURN(auto theirs, ReadIfExists(layout_path));
      ASSIGN_OR_RETURN(Layout other, DecodeLayout(layout_path, theirs.value_or("")));
      if (other.dirs != layout.dirs) {
        return Status::InvalidArgument("store " + home + ": made meanwhile over " + JoinDirs(other.dirs) +
                                       ", not " + JoinDirs(layout.dirs));
      }
    } else {
      RETURN_IF_ERROR(published);
    }
  }
  return MultiDirStore{std::move(dirs), std::move(options)};
}

std::string NameInDirectory(const std::string& name, size_t k) {
  return k == 0 ? name : NameBeside(name, "-d" + std::to_string(k));
}

}  // namespace sluice
