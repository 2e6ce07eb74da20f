#include "backends/file/multi_dir_backend.h"

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
#include "io/fnv1a.h"
#include "backends/uri_query.h"
#include "io/aligned_buffer.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kLayoutFile = ".sluice-dirs";    // in the home: the other directories
constexpr const char* kMarkerFile = ".sluice-dir-of";  // in each other directory: its home and index
constexpr const char* kLayoutMagic = "sluice multi-directory store v1";
// Objects are at most this large, so that each is held in memory whole
// (a hedge writes it again) and no hedge rewrites more.
constexpr uint64_t kMaxObjectBytes = 64ull << 20;
constexpr size_t kMaxDirectories = 64;

struct MultiDirOptions {
  std::vector<std::string> dirs;  // the directories besides the home, as given
  bool hedge = true;
  double hedge_extra = 0.25;
  unsigned hedge_floor_ms = 100;
};

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

// Closes what a finished or abandoned object leaves with I/O still in
// flight (a hedge's loser on a slow device), off the writer's thread: the
// engine first (its destructor waits for the I/O), then the files and the
// memory the I/O used, then `on_closed`.
struct Leftover {
  std::unique_ptr<IoEngine> engine;
  std::vector<int> fds;
  std::vector<std::shared_ptr<AlignedBuffer>> memory;
  std::function<void()> on_closed;
  ~Leftover() {
    engine.reset();
    for (int fd : fds) ::close(fd);
    memory.clear();
    if (on_closed) on_closed();
  }
};

// One thread per leftover, so that one hung device's does not hold up the
// others'; the destructor waits for them all.
class LeftoverCloser {
 public:
  ~LeftoverCloser() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : closing_) c.thread.join();
  }
  void Add(std::unique_ptr<Leftover> l) {
    std::lock_guard<std::mutex> lock(mu_);
    // Threads that are done are joined here, so that they do not pile up.
    for (auto it = closing_.begin(); it != closing_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = closing_.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::shared_ptr<Leftover> owned(std::move(l));
    closing_.push_back(Closing{std::thread([owned, done]() mutable {
                                 owned.reset();
                                 done->store(true);
                               }),
                               done});
  }

 private:
  struct Closing {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex mu_;
  std::list<Closing> closing_;
};

// What the objects of one store share: where objects are being written
// (placement), the hedge state, and the closer of leftovers.
struct Shared {
  explicit Shared(size_t dirs, HedgeOptions h) : writing(dirs), hedge(h, nullptr) {}
  std::mutex mu;
  std::vector<size_t> writing;  // GUARDED_BY(mu): copies being written, per directory
  size_t next = 0;              // GUARDED_BY(mu): where ties start, so that they rotate
  HedgeState hedge;
  // Bytes held by leftovers whose writes are still in flight: past
  // kMaxLeftoverBytes no more hedges (a hung directory would otherwise
  // gather a loser per object).
  std::atomic<uint64_t> leftover_bytes{0};
  static constexpr uint64_t kMaxLeftoverBytes = 256ull << 20;
  LeftoverCloser closer;  // last: its threads finish before the rest goes

  // The directory for a new copy: the fewest copies being written, not
  // slow, none of `taken`; a slow one only when nothing else is left.
  // Sets *avoided when a directory with fewer was passed over as slow.
  std::optional<size_t> Place(const std::vector<size_t>& taken, bool avoid_slow, bool* avoided) {
    std::lock_guard<std::mutex> lock(mu);
    const size_t n = writing.size();
    std::optional<size_t> best, best_slow;
    for (size_t i = 0; i < n; ++i) {
      const size_t k = (next + i) % n;
      if (std::find(taken.begin(), taken.end(), k) != taken.end()) continue;
      const bool slow = avoid_slow && hedge.IsSlow(static_cast<uint32_t>(k));
      auto& pick = slow ? best_slow : best;
      if (!pick || writing[k] < writing[*pick]) pick = k;
    }
    std::optional<size_t> k = best ? best : best_slow;
    *avoided = best && best_slow && writing[*best_slow] < writing[*best];
    if (k) {
      ++writing[*k];
      next = (*k + 1) % n;
    }
    return k;
  }
  void Done(size_t k) {
    std::lock_guard<std::mutex> lock(mu);
    --writing[k];
  }
};

std::string NameInDirectory(const std::string& name, size_t k) {
  return k == 0 ? name : NameBeside(name, "-d" + std::to_string(k));
}

// A data object written into one directory or, hedged, into several; see
// the header. Every write is sent from a copy of the caller's bytes held
// here (with hedging on), so that a hedge can write them again and a
// loser's writes never read a buffer the caller has reused.
class SpreadWritable final : public WritableObject {
 public:
  SpreadWritable(std::vector<FileDirectory*> dirs, std::shared_ptr<Shared> shared, bool hedge,
                 std::string name, uint64_t size_hint, std::unique_ptr<IoEngine> engine, size_t depth)
      : dirs_(std::move(dirs)),
        shared_(std::move(shared)),
        hedge_(hedge),
        name_(std::move(name)),
        size_hint_(size_hint),
        engine_(std::move(engine)),
        depth_(depth) {}

  ~SpreadWritable() override {
    // A copy with writes still in flight counts as being written to its
    // directory until they are done: Place keeps new objects off a
    // directory that has not taken the last ones yet.
    std::vector<size_t> busy;
    for (const Copy& c : copies_) {
      if (c.pending > 0) {
        busy.push_back(c.dir);
      } else {
        shared_->Done(c.dir);
      }
    }
    auto left = std::make_unique<Leftover>();
    for (Copy& c : copies_) {
      if (c.fd >= 0) left->fds.push_back(c.fd);
    }
    uint64_t held = 0;
    for (Piece& p : pieces_) {
      if (p.memory) {
        held += p.memory->size();
        left->memory.push_back(std::move(p.memory));
      }
    }
    left->engine = std::move(engine_);
    if (left->engine && left->engine->in_flight() > 0) {
      shared_->leftover_bytes += held;
      Shared* shared = shared_.get();  // the closer, a member, finishes first
      left->on_closed = [shared, busy, held] {
        for (size_t dir : busy) shared->Done(dir);
        shared->leftover_bytes -= held;
      };
      shared_->closer.Add(std::move(left));
    } else {
      for (size_t dir : busy) shared_->Done(dir);
    }
  }

  // The first copy, in the directory Place picks. A name taken in the home
  // is refused, as Create would.
  Status Open() {
    return AddCopy(/*avoid_slow=*/true);
  }

  Status StartWrite(uint64_t offset, const void* data, size_t len, uint64_t tag) override {
    RETURN_IF_ERROR(sticky_);
    // The copy later writes go to failed: so does the object.
    if (copies_[target_].failed) sticky_ = copies_[target_].error;
    RETURN_IF_ERROR(sticky_);
    Piece p;
    p.offset = offset;
    p.len = len;
    p.tag = tag;
    if (hedge_) {
      ASSIGN_OR_RETURN(AlignedBuffer b, BufferPool::Take(std::max<size_t>(len, 1)));
      std::memcpy(b.data(), data, len);
      p.memory = std::shared_ptr<AlignedBuffer>(new AlignedBuffer(std::move(b)), [](AlignedBuffer* m) {
        BufferPool::Give(std::move(*m));
        delete m;
      });
      p.data = p.memory->data();
      held_bytes_ += len;
      if (held_bytes_ > kMaxObjectBytes) gave_up_ = true;  // too large to write again
      shared_->hedge.Submitted(len);
    } else {
      p.data = static_cast<const uint8_t*>(data);
    }
    pieces_.push_back(std::move(p));
    ++unreported_;
    Copy& c = copies_[target_];
    c.done.resize(pieces_.size(), false);
    c.sent.resize(pieces_.size());
    Status st = Send(target_, pieces_.size() - 1);
    if (!st.ok()) {
      --unreported_;
      pieces_.back().reported = true;
      sticky_ = st;
      gave_up_ = true;
    }
    return st;
  }

  Result<IoCompletion> Reap() override {
    if (unreported_ == 0) return Status::InvalidArgument("Reap with nothing in flight on " + name_);
    while (ready_.empty()) RETURN_IF_ERROR(Step());
    IoCompletion c = std::move(ready_.front());
    ready_.pop_front();
    --unreported_;
    return c;
  }

  size_t in_flight() const override { return unreported_; }
  size_t queue_depth() const override { return depth_; }

  Status Finish(uint64_t final_size) override {
    if (unreported_ != 0) return Status::InvalidArgument("Finish with I/O in flight");
    RETURN_IF_ERROR(sticky_);
    std::optional<size_t> winner;
    if (pieces_.empty()) winner = 0;
    while (!winner) {
      for (size_t c = 0; c < copies_.size() && !winner; ++c) {
        if (Complete(copies_[c])) winner = c;
      }
      if (winner) break;
      if (!AnyCopyCanComplete()) return FirstCopyError();
      RETURN_IF_ERROR(Step());
    }
    Copy& w = copies_[*winner];
    RETURN_IF_ERROR(dirs_[w.dir]->FinishObjectFile(w.fd, w.name, final_size));
    // The losers go now; their writes still in flight finish into the
    // removed files, which the closer closes once they have.
    for (size_t c = 0; c < copies_.size(); ++c) {
      if (c == *winner) continue;
      (void)dirs_[copies_[c].dir]->Remove(copies_[c].name);
    }
    if (*winner > 0) shared_->hedge.CountWon();
    stored_name_ = w.name;
    return Status::OK();
  }

  std::string StoredName() const override { return stored_name_ == name_ ? std::string() : stored_name_; }

 private:
  struct Piece {
    uint64_t offset = 0;
    size_t len = 0;
    uint64_t tag = 0;
    const uint8_t* data = nullptr;
    std::shared_ptr<AlignedBuffer> memory;  // the held copy (hedging on)
    bool reported = false;
  };
  struct Copy {
    size_t dir = 0;
    std::string name;
    int fd = -1;
    size_t pending = 0;                    // writes submitted, not yet reaped
    bool failed = false;
    Status error;
    std::vector<bool> done;                // per piece
    std::vector<Clock::time_point> sent;   // per piece, once submitted
  };

  Status AddCopy(bool avoid_slow) {
    std::vector<size_t> taken;
    for (const Copy& c : copies_) taken.push_back(c.dir);
    bool avoided = false;
    std::optional<size_t> k = shared_->Place(taken, avoid_slow, &avoided);
    if (!k) return Status::Unavailable("object " + name_ + ": no directory left for another copy");
    Copy c;
    c.dir = *k;
    c.name = NameInDirectory(name_, *k);
    auto fd = dirs_[*k]->CreateObjectFile(c.name, size_hint_ > 0 ? size_hint_ : 0);
    if (!fd.ok()) {
      shared_->Done(*k);
      return fd.status();
    }
    c.fd = *fd;
    if (avoided) shared_->hedge.CountAvoided();
    copies_.push_back(std::move(c));
    return Status::OK();
  }

  // Submits piece `p` to copy `c`, or queues it until the engine has room.
  Status Send(size_t c, size_t p) {
    if (engine_->in_flight() >= engine_->queue_depth()) {
      backlog_.emplace_back(c, p);
      return Status::OK();
    }
    return Submit(c, p);
  }

  Status Submit(size_t c, size_t p) {
    Copy& copy = copies_[c];
    Piece& piece = pieces_[p];
    IoRequest r;
    r.fd = copy.fd;
    r.write = true;
    r.offset = piece.offset;
    r.buf = const_cast<uint8_t*>(piece.data);
    r.len = piece.len;
    r.tag = (static_cast<uint64_t>(c) << 32) | p;
    RETURN_IF_ERROR(engine_->Submit(r).WithContext("object " + copy.name));
    copy.sent[p] = Clock::now();
    ++copy.pending;
    return Status::OK();
  }

  bool Complete(const Copy& c) const {
    if (c.failed || c.done.size() != pieces_.size()) return false;
    return std::all_of(c.done.begin(), c.done.end(), [](bool d) { return d; });
  }

  bool AnyCopyCanComplete() const {
    for (const auto& c : copies_) {
      if (!c.failed && c.done.size() == pieces_.size()) return true;
    }
    return false;
  }

  Status FirstCopyError() const {
    for (const auto& c : copies_) {
      if (c.failed) return c.error;
    }
    return Status::IOError("object " + name_ + ": no copy holds every write");
  }

  // When the newest copy is late: its oldest write still in flight, plus
  // the deadline. None when no hedge may follow.
  std::optional<Clock::time_point> NextDeadline() {
    if (!hedge_ || gave_up_) return std::nullopt;
    const Copy& c = copies_[target_];
    std::optional<Clock::time_point> oldest;
    for (size_t i = 0; i < c.sent.size(); ++i) {
      if (c.sent[i] != Clock::time_point{} && !c.done[i] && (!oldest || c.sent[i] < *oldest)) oldest = c.sent[i];
    }
    if (!oldest) return std::nullopt;
    return *oldest + shared_->hedge.Deadline();
  }

  // Submits what waits for room, then waits for one completion and
  // applies it, or hedges when the newest copy turns late first.
  Status Step() {
    while (!backlog_.empty() && engine_->in_flight() < engine_->queue_depth()) {
      auto [c, p] = backlog_.front();
      backlog_.pop_front();
      Status st = Submit(c, p);
      if (!st.ok()) Fail(c, st);
    }
    if (engine_->in_flight() == 0) {
      return Status::IOError("object " + name_ + ": writes outstanding with none in flight");
    }
    if (auto deadline = NextDeadline()) {
      auto got = engine_->ReapUntil(*deadline);
      if (!got.ok()) return got.status();
      if (!got->has_value()) return Hedge();
      Apply(**got);
      return Status::OK();
    }
    ASSIGN_OR_RETURN(IoResult one, engine_->Reap());
    Apply(one);
    return Status::OK();
  }

  void Fail(size_t c, const Status& st) {
    Copy& copy = copies_[c];
    if (!copy.failed) {
      copy.failed = true;
      copy.error = st;
    }
    // Pieces no live copy will write are reported failed.
    for (size_t p = 0; p < pieces_.size(); ++p) ReportIfLost(p);
  }

  void ReportIfLost(size_t p) {
    Piece& piece = pieces_[p];
    if (piece.reported) return;
    for (const Copy& c : copies_) {
      if (!c.failed && p < c.done.size()) return;  // sent there, or queued
    }
    piece.reported = true;
    IoCompletion done;
    done.tag = piece.tag;
    done.status = FirstCopyError();
    ready_.push_back(std::move(done));
  }

  void Apply(const IoResult& r) {
    const size_t c = static_cast<size_t>(r.tag >> 32), p = static_cast<size_t>(r.tag & 0xffffffffu);
    Copy& copy = copies_[c];
    --copy.pending;
    if (!r.status.ok()) {
      copy.done[p] = false;
      Status st = r.status.WithContext("object " + copy.name);
      copy.failed = true;
      if (copy.error.ok()) copy.error = st;
      ReportIfLost(p);
      return;
    }
    copy.done[p] = true;
    const Clock::duration took = Clock::now() - copy.sent[p];
    if (hedge_) {
      if (copies_.size() == 1) shared_->hedge.RecordLatency(took);
      // Late, even where no hedge followed: new objects keep away from
      // this directory for a while.
      if (took > shared_->hedge.SlowAfter()) shared_->hedge.MarkSlow(static_cast<uint32_t>(copy.dir));
    }
    Piece& piece = pieces_[p];
    if (!piece.reported) {
      piece.reported = true;
      IoCompletion done;
      done.tag = piece.tag;
      done.bytes = r.bytes;
      ready_.push_back(std::move(done));
    }
  }

  // The newest copy is late: its directory is marked slow, and the object
  // is written again, whole, into another directory, if the budget and
  // the copy limit allow. Later writes go to the new copy only.
  Status Hedge() {
    shared_->hedge.MarkSlow(static_cast<uint32_t>(copies_[target_].dir));
    const HedgeOptions& o = shared_->hedge.options();
    if (copies_.size() >= std::min<size_t>(o.max_copies, dirs_.size()) ||
        shared_->leftover_bytes.load() > Shared::kMaxLeftoverBytes || !shared_->hedge.Reserve(held_bytes_)) {
      shared_->hedge.CountRefused();
      gave_up_ = true;
      return Status::OK();
    }
    Status added = AddCopy(/*avoid_slow=*/true);
    if (!added.ok()) {
      // No copy could be made: the copy written so far carries on alone.
      gave_up_ = true;
      return Status::OK();
    }
    shared_->hedge.CountHedged();
    const size_t c = copies_.size() - 1;
    copies_[c].done.assign(pieces_.size(), false);
    copies_[c].sent.assign(pieces_.size(), Clock::time_point{});
    for (size_t p = 0; p < pieces_.size(); ++p) {
      Status st = Send(c, p);
      if (!st.ok()) {
        Fail(c, st);
        gave_up_ = true;
        return Status::OK();
      }
    }
    target_ = c;
    return Status::OK();
  }

  std::vector<FileDirectory*> dirs_;
  std::shared_ptr<Shared> shared_;
  const bool hedge_;
  std::string name_;
  uint64_t size_hint_;
  std::unique_ptr<IoEngine> engine_;
  size_t depth_;
  std::vector<Copy> copies_;
  size_t target_ = 0;  // the copy later writes go to
  std::deque<Piece> pieces_;
  std::deque<std::pair<size_t, size_t>> backlog_;  // (copy, piece) waiting for room in the engine
  std::deque<IoCompletion> ready_;
  size_t unreported_ = 0;
  uint64_t held_bytes_ = 0;
  bool gave_up_ = false;
  Status sticky_;
  std::string stored_name_;
};

class MultiDirBackend final : public Backend {
 public:
  MultiDirBackend(std::string uri, std::vector<std::unique_ptr<FileDirectory>> dirs, FileOptions file_options,
                  MultiDirOptions options)
      : uri_(std::move(uri)), dirs_(std::move(dirs)), file_options_(file_options), options_(std::move(options)) {
    HedgeOptions h;
    h.enabled = options_.hedge;
    h.extra = options_.hedge_extra;
    h.floor_ms = options_.hedge_floor_ms;
    h.max_held_bytes = kMaxObjectBytes;
    shared_ = std::make_shared<Shared>(dirs_.size(), h);
    for (const auto& d : dirs_) {
      caps_.io_alignment = std::max(caps_.io_alignment, d->caps().io_alignment);
      raw_.push_back(d.get());
    }
    caps_.max_object_bytes = kMaxObjectBytes;
    caps_.atomic_publish_if_absent = true;
    caps_.objects_in_flight = std::max<size_t>(3, 2 * dirs_.size());
    caps_.io_path = dirs_[0]->caps().io_path + ", " + std::to_string(dirs_.size()) + " directories";
    if (options_.hedge) {
      char extra[32];
      std::snprintf(extra, sizeof extra, "%.0f%%", options_.hedge_extra * 100);
      caps_.io_path += ", hedged writes (late past 3x the median, at least " +
                       std::to_string(options_.hedge_floor_ms) + " ms; at most " + extra + " extra)";
      // (No placement function: records, the only objects whose names
      // callers choose, all live in the home directory, so no choice of
      // name keeps them off a slow one. PlacementSlow is always false.)
      caps_.hedged_writes = &shared_->hedge;
    }
  }

  const BackendCaps& caps() const override { return caps_; }
  const std::string& uri() const override { return uri_; }

  Result<std::unique_ptr<WritableObject>> Create(const std::string& name, const CreateOptions& options) override {
    if (!options.relocatable) return Dir(name).Create(name, options);
    // As a plain create: a name the home holds is taken (copies elsewhere
    // would not notice it).
    ASSIGN_OR_RETURN(auto held, dirs_[0]->Stat({name}));
    if (!held.empty() || DirectoryOfName(name, dirs_.size()) != 0) {
      if (!held.empty()) return Status::AlreadyExists("object " + name + " already exists");
      return Dir(name).Create(name, options);  // a name that already says where it lives
    }
    // Room for a hedge to send every piece of a full object at once.
    const unsigned depth = file_options_.queue_depth;
    const unsigned engine_depth = options_.hedge ? std::max(depth * 2, 64u) : depth;
    ASSIGN_OR_RETURN(auto engine, MakeIoEngine(file_options_.io, engine_depth));
    auto w = std::make_unique<SpreadWritable>(raw_, shared_, options_.hedge, name,
                                              std::min<uint64_t>(options.size_hint, kMaxObjectBytes),
                                              std::move(engine), depth);
    RETURN_IF_ERROR(w->Open());
    return std::unique_ptr<WritableObject>(std::move(w));
  }

  Result<std::unique_ptr<ReadableObject>> Open(const std::string& name, const OpenOptions& options) override {
    return Dir(name).Open(name, options);
  }
  Status PublishIfAbsent(const std::string& name, std::string_view bytes) override {
    return Dir(name).PublishIfAbsent(name, bytes);
  }
  Status Replace(const std::string& staged, const std::string& target) override {
    const size_t from = DirectoryOfName(staged, dirs_.size()), to = DirectoryOfName(target, dirs_.size());
    if (from != to) {
      return Status::InvalidArgument("replace " + target + " with " + staged + ": they live in different " +
                                     "directories of " + uri_ + " (" + dirs_[to]->root() + ", " +
                                     dirs_[from]->root() + ")");
    }
    return dirs_[to]->Replace(staged, target);
  }
  Result<std::string> ReadSmall(const std::string& name) override { return Dir(name).ReadSmall(name); }

  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
    std::vector<ObjectInfo> out;
    for (size_t k = 0; k < dirs_.size(); ++k) {
      ASSIGN_OR_RETURN(auto listed, dirs_[k]->List(prefix));
      for (auto& o : listed) {
        // Only what this store would find there: a file whose name says
        // another directory was not put there by it.
        if (DirectoryOfName(o.name, dirs_.size()) == k) out.push_back(std::move(o));
      }
    }
    return out;
  }

  Result<std::vector<ObjectInfo>> Stat(const std::vector<std::string>& names) override {
    std::vector<std::vector<std::string>> by_dir(dirs_.size());
    for (const auto& n : names) by_dir[DirectoryOfName(n, dirs_.size())].push_back(n);
    std::vector<ObjectInfo> out;
    for (size_t k = 0; k < dirs_.size(); ++k) {
      if (by_dir[k].empty()) continue;
      ASSIGN_OR_RETURN(auto found, dirs_[k]->Stat(by_dir[k]));
      for (auto& o : found) out.push_back(std::move(o));
    }
    return out;
  }

  Status Remove(const std::string& name) override { return Dir(name).Remove(name); }

  Status ReclaimLeftovers(const std::string& prefix, uint64_t min_age_ms) override {
    for (auto& d : dirs_) RETURN_IF_ERROR(d->ReclaimLeftovers(prefix, min_age_ms));
    return Status::OK();
  }

 private:
  FileDirectory& Dir(const std::string& name) { return *dirs_[DirectoryOfName(name, dirs_.size())]; }

  std::string uri_;
  std::vector<std::unique_ptr<FileDirectory>> dirs_;
  std::vector<FileDirectory*> raw_;
  FileOptions file_options_;
  MultiDirOptions options_;
  std::shared_ptr<Shared> shared_;  // after dirs_: leftovers close before the directories go
  BackendCaps caps_;
};

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

Result<std::unique_ptr<Backend>> OpenMultiDirFileBackend(const std::string& uri, const std::string& home_path,
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
  return std::unique_ptr<Backend>(new MultiDirBackend(uri, std::move(dirs), file_options, std::move(options)));
}

}  // namespace sluice
