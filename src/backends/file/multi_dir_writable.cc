#include "backends/file/multi_dir_writable.h"

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

#include "backends/file/multi_dir_layout.h"
#include "io/aligned_buffer.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

// A data object written into one directory or, hedged, into several; see
// the header. Every write is sent from a copy of the caller's bytes held
// here (with hedging on), so that a hedge can write them again and a
// loser's writes never read a buffer the caller has reused.
class SpreadWritable final : public WritableObject {
 public:
  SpreadWritable(std::vector<FileDirectory*> dirs, std::shared_ptr<SpreadShared> shared, bool hedge,
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
      SpreadShared* shared = shared_.get();  // the closer, a member, finishes first
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
      if (held_bytes_ > kMultiDirMaxObjectBytes) gave_up_ = true;  // too large to write again
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
        shared_->leftover_bytes.load() > SpreadShared::kMaxLeftoverBytes || !shared_->hedge.Reserve(held_bytes_)) {
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
  std::shared_ptr<SpreadShared> shared_;
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


}  // namespace

Result<std::unique_ptr<WritableObject>> NewSpreadWritable(std::vector<FileDirectory*> dirs,
                                                          std::shared_ptr<SpreadShared> shared, bool hedge,
                                                          std::string name, uint64_t size_hint,
                                                          std::unique_ptr<IoEngine> engine, size_t depth) {
  auto w = std::make_unique<SpreadWritable>(std::move(dirs), std::move(shared), hedge, std::move(name), size_hint,
                                            std::move(engine), depth);
  RETURN_IF_ERROR(w->Open());
  return std::unique_ptr<WritableObject>(std::move(w));
}

}  // namespace sluice
