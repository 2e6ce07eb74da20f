#include "backends/rados/rados_hedge.h"
#include "backends/rados/rados_hedge_ops.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <utility>

#include "io/aligned_buffer.h"
#include "io/crc32c.h"

namespace sluice {

namespace {

// Candidate names tried when looking for a placement group not found slow.
constexpr unsigned kPlacementTries = 32;
// The xattr a copy's first write sets to the copy's random token; its
// truncate and its removal are guarded by it.
constexpr const char* kCopyXattr = "sluice.copy";

}  // namespace

std::string HedgeName(const std::string& name, unsigned k) {
  if (k == 0) return name;
  return NameBeside(name, "-h" + std::to_string(k));
}

namespace {

using Clock = HedgeState::Clock;

using rados_hedge::Inbox;
using rados_hedge::NewCopyToken;
using rados_hedge::OnComplete;
using rados_hedge::Op;
using rados_hedge::ReleaseOp;

class HedgedRadosWritable final : public RadosChecksummingWritable {
 public:
  HedgedRadosWritable(std::shared_ptr<Cluster> cluster, std::shared_ptr<HedgeState> state,
                      std::string object_prefix, std::string name, size_t depth, uint64_t size_hint)
      : cluster_(std::move(cluster)),
        state_(std::move(state)),
        inbox_(std::make_shared<Inbox>(state_)),
        object_prefix_(std::move(object_prefix)),
        name_(std::move(name)),
        depth_(depth),
        size_hint_(size_hint) {
    // A placement group found slow lately is avoided from the start.
    AddCopy(/*avoid_slow=*/true);
  }

  ~HedgedRadosWritable() override {
    std::deque<Op*> left;
    {
      std::lock_guard<std::mutex> lock(inbox_->mu);
      inbox_->abandoned = true;
      left.swap(inbox_->done);
    }
    for (Op* op : left) ReleaseOp(op);
  }

  Status StartWrite(uint64_t offset, const void* data, size_t len, uint64_t tag) override {
    if (len > UINT32_MAX) return Status::InvalidArgument("write of " + std::to_string(len) + " bytes");
    if (!sticky_.ok()) return sticky_;
    Piece p;
    p.offset = offset;
    p.len = len;
    p.tag = tag;
    // The bytes are copied: a hedge may write them again after the
    // caller's buffer came back, and an abandoned copy's writes may still
    // be in flight when the object is gone. Pieces ChecksumForWrite copied
    // (and hashed, priming the messenger's crc cache) are used as they
    // are; the bytes between them are copied now.
    const char* at = static_cast<const char*>(data);
    const char* const end = at + len;
    std::sort(summed_.begin(), summed_.end(),
              [](const Summed& a, const Summed& b) { return a.source < b.source; });
    auto append = [&](Copied c) {
      p.bl.push_back(std::move(c.bytes));
      p.memory.push_back(std::move(c.memory));
    };
    Status copied;
    for (Summed& piece : summed_) {
      const size_t n = piece.copy.bytes.length();
      if (piece.source < at || piece.source + n > end) continue;  // not this write's
      if (piece.source > at) {
        auto gap = CopyOf(at, static_cast<size_t>(piece.source - at));
        if (!gap.ok()) {
          copied = gap.status();
          break;
        }
        append(std::move(gap).value());
      }
      at = piece.source + n;
      append(std::move(piece.copy));
    }
    summed_.clear();
    if (copied.ok() && at < end) {
      auto rest = CopyOf(at, static_cast<size_t>(end - at));
      if (rest.ok()) {
        append(std::move(rest).value());
      } else {
        copied = rest.status();
      }
    }
    RETURN_IF_ERROR(copied);
    held_bytes_ += len;
    if (held_bytes_ > state_->options().max_held_bytes) holding_ = false;
    pieces_.push_back(std::move(p));
    sent_to_.emplace_back();
    state_->Submitted(len);
    ++unreported_;
    Status st = Send(target_, static_cast<int>(pieces_.size() - 1));
    if (!st.ok()) {
      --unreported_;
      pieces_.back().reported = true;
      sticky_ = st;
      gave_up_ = true;  // the object fails: no hedge of it is worth its bytes
    }
    return st;
  }

  Result<IoCompletion> Reap() override {
    if (unreported_ == 0) return Status::InvalidArgument("Reap with nothing in flight on " + name_);
    while (ready_.empty()) {
      RETURN_IF_ERROR(Step());
    }
    IoCompletion c = std::move(ready_.front());
    ready_.pop_front();
    --unreported_;
    return c;
  }

  // The bytes are copied here already (StartWrite will send the copy),
  // and hashed through the copy's bufferlist so that the messenger's crc
  // of the message is a lookup, as for a plain RADOS write.
  uint32_t ChecksumForWrite(uint32_t crc, const void* data, size_t len) override {
    if (len < kMinSummedPieceBytes || len > UINT32_MAX) return Crc32cExtend(crc, data, len);
    auto copy = CopyOf(static_cast<const char*>(data), len);
    // Out of memory for the copy: StartWrite copies these bytes (or fails).
    if (!copy.ok()) return Crc32cExtend(crc, data, len);
    librados::bufferlist bl;
    bl.push_back(copy->bytes);  // shares the copy's buffer, and so its crc cache
    // bufferlist::crc32c is the raw register: Crc32cExtend(c, x) = ~raw(~c, x).
    const uint32_t out = ~bl.crc32c(~crc);
    summed_.push_back(Summed{static_cast<const char*>(data), std::move(copy).value()});
    return out;
  }

  size_t in_flight() const override { return unreported_; }
  size_t queue_depth() const override { return depth_; }

  Status Finish(uint64_t final_size) override {
    if (unreported_ != 0) return Status::InvalidArgument("Finish with I/O in flight");
    RETURN_IF_ERROR(sticky_);
    int winner = -1;
    if (pieces_.empty()) {
      // Never written: created now, at its final size, under the first
      // copy's name.
      librados::ObjectWriteOperation op;
      op.create(/*exclusive=*/true);
      if (final_size > 0) op.truncate(final_size);
      int ret = cluster_->io.operate(copies_[0].oid, &op);
      if (ret == -EEXIST) return Status::AlreadyExists("object " + copies_[0].name + " already exists");
      if (ret < 0) return RadosError(ret, "create object " + copies_[0].name);
      winner = 0;
    }
    while (winner < 0) {
      for (size_t c = 0; c < copies_.size() && winner < 0; ++c) {
        if (Complete(copies_[c])) winner = static_cast<int>(c);
      }
      if (winner >= 0) break;
      if (!AnyCopyCanComplete()) return FirstCopyError();
      RETURN_IF_ERROR(Step());
    }
    Copy& w = copies_[static_cast<size_t>(winner)];
    uint64_t end = 0;
    for (const auto& p : pieces_) end = std::max<uint64_t>(end, p.offset + p.len);
    if (!pieces_.empty() && end != final_size) {
      librados::ObjectWriteOperation op;
      GuardCopy(w, &op);  // the object this copy created, no other
      op.truncate(final_size);
      int ret = cluster_->io.operate(w.oid, &op);
      if (ret < 0) return RadosError(ret, "truncate object " + w.name + " to " + std::to_string(final_size));
    }
    // The losers go; a removal is ordered after the copy's writes on its
    // placement group, so none of them can re-create it. One that does not
    // complete (the process ends first) leaves an object no manifest names,
    // for garbage collection.
    for (size_t c = 0; c < copies_.size(); ++c) {
      if (static_cast<int>(c) == winner || !copies_[c].created) continue;
      auto op = NewOp(static_cast<int>(c), -1);
      // Only a copy this writer created: a name someone else held keeps
      // its object (the guard fails the removal instead).
      librados::ObjectWriteOperation remove;
      GuardCopy(copies_[c], &remove);
      remove.remove();
      if (cluster_->io.aio_operate(copies_[c].oid, op->completion, &remove) < 0) {
        op->completion->release();
        state_->OpEnded();
      } else {
        (void)op.release();
      }
    }
    if (winner > 0) state_->CountWon();
    stored_name_ = w.name;
    pieces_.clear();
    return Status::OK();
  }

  std::string StoredName() const override { return stored_name_ == name_ ? std::string() : stored_name_; }

 private:
  struct Piece {
    uint64_t offset = 0;
    size_t len = 0;
    uint64_t tag = 0;
    librados::bufferlist bl;  // dropped once done, when the object is no longer held
    std::vector<std::shared_ptr<AlignedBuffer>> memory;  // what bl's pieces are in
    bool reported = false;
  };
  // A copy of caller bytes, in memory of the process's buffer pool (fresh
  // memory for every write would be faulted in page by page, which costs
  // more than the copy), lent to librados as a static buffer: `memory`
  // goes back to the pool once every operation sending it has completed.
  struct Copied {
    ceph::bufferptr bytes;
    std::shared_ptr<AlignedBuffer> memory;
  };
  struct Summed {
    const char* source;  // where the caller's bytes are
    Copied copy;         // crc cached in copy.bytes
  };
  static Result<Copied> CopyOf(const char* data, size_t len) {
    ASSIGN_OR_RETURN(AlignedBuffer b, BufferPool::Take(std::max<size_t>(len, 1)));
    std::shared_ptr<AlignedBuffer> memory(new AlignedBuffer(std::move(b)), [](AlignedBuffer* m) {
      BufferPool::Give(std::move(*m));
      delete m;
    });
    if (len > 0) std::memcpy(memory->data(), data, len);
    Copied c;
    c.bytes = ceph::buffer::create_static(static_cast<unsigned>(len), reinterpret_cast<char*>(memory->data()));
    c.memory = std::move(memory);
    return c;
  }
  struct Copy {
    std::string name;
    std::string oid;
    uint32_t pg = 0;
    bool created = false;  // its first write (with the exclusive create) went out
    bool acked = false;    // and was answered: the object is this copy's
    std::vector<int> waiting;  // pieces held back until then
    std::string token;     // in the object's kCopyXattr, set by that first write
    bool failed = false;
    Status error;
    size_t pending = 0;
    std::vector<bool> done;                 // per piece
    std::vector<Clock::time_point> sent;    // per piece sent to it
  };

  std::unique_ptr<Op> NewOp(int copy, int piece) {
    auto op = std::make_unique<Op>();
    op->inbox = inbox_;
    op->copy = copy;
    op->piece = piece;
    op->start = Clock::now();
    op->completion = librados::Rados::aio_create_completion(op.get(), &OnComplete);
    state_->OpStarted();
    return op;
  }

  // Makes `op` apply only to the object copy `c` created (ECANCELED else).
  static void GuardCopy(const Copy& c, librados::ObjectWriteOperation* op) {
    librados::bufferlist mark;
    mark.append(c.token);
    op->cmpxattr(kCopyXattr, LIBRADOS_CMPXATTR_OP_EQ, mark);
  }

  uint32_t PgOf(const std::string& oid) {
    uint32_t pg = 0;
    if (cluster_->io.get_object_pg_hash_position2(oid, &pg) < 0) return UINT32_MAX;
    return pg;
  }

  // A new copy under the next free name beside name_: one whose placement
  // group no other copy uses and, where `avoid_slow`, none found slow lately.
  void AddCopy(bool avoid_slow) {
    Copy c;
    std::optional<unsigned> first_free;  // the first candidate no other copy's group holds
    bool found = false;
    const unsigned start = next_name_;
    for (unsigned tries = 0; tries < kPlacementTries && !found; ++tries) {
      const unsigned k = start + tries;
      const uint32_t pg = PgOf(object_prefix_ + HedgeName(name_, k));
      bool taken = false;
      for (const auto& other : copies_) taken = taken || other.pg == pg;
      if (taken) continue;
      if (!first_free) first_free = k;
      if (avoid_slow && state_->IsSlow(pg)) continue;
      first_free = k;
      found = true;
    }
    // Every candidate slow: the first one in a group of its own all the same.
    const unsigned k = first_free ? *first_free : start;
    next_name_ = k + 1;
    c.name = HedgeName(name_, k);
    c.oid = object_prefix_ + c.name;
    c.pg = PgOf(c.oid);
    if (copies_.empty() && c.name != name_) state_->CountAvoided();
    c.token = NewCopyToken();
    copies_.push_back(std::move(c));
  }

  // Sends `piece` to `copy`, or holds it back while the copy's first write
  // is unanswered.
  Status Send(int copy, int piece) {
    Copy& c = copies_[static_cast<size_t>(copy)];
    c.done.resize(pieces_.size(), false);
    c.sent.resize(pieces_.size());
    if (c.created && !c.acked) {
      c.waiting.push_back(piece);
      sent_to_[static_cast<size_t>(piece)].push_back(copy);
      return Status::OK();
    }
    return SendNow(copy, piece);
  }

  Status SendNow(int copy, int piece) {
    Copy& c = copies_[static_cast<size_t>(copy)];
    Piece& p = pieces_[static_cast<size_t>(piece)];
    librados::ObjectWriteOperation w;
    const bool first = !c.created;
    if (first) {
      // The exclusive create rides with the first write: no round trip of
      // its own. It also marks the object as this copy's, so that the
      // removal of a losing copy (and a truncate) applies to this copy's
      // object only. The copy's other writes wait for its answer (Send):
      // sent at once, a write could land in an object of that name that
      // someone else created, unless every write compared the mark, which
      // costs a CPU-bound cluster a fifth of its write rate; the wait costs
      // one round trip per object, overlapped with the other objects'.
      w.create(/*exclusive=*/true);
      librados::bufferlist mark;
      mark.append(c.token);
      w.setxattr(kCopyXattr, mark);
      HintDataObject(&w, size_hint_ > 0 ? size_hint_ : state_->options().max_held_bytes);
    }
    librados::bufferlist bl = p.bl;  // shares the bytes
    w.write(p.offset, bl);
    auto op = NewOp(copy, piece);
    op->keep = p.memory;
    int ret = cluster_->io.aio_operate(c.oid, op->completion, &w);
    if (ret < 0) {
      op->completion->release();
      state_->OpEnded();
      return RadosError(ret, "start write of object " + c.name + " at " + std::to_string(p.offset));
    }
    (void)op.release();
    c.created = true;
    c.sent[static_cast<size_t>(piece)] = Clock::now();
    ++c.pending;
    // A piece held back was listed for this copy when Send held it.
    auto& to = sent_to_[static_cast<size_t>(piece)];
    if (std::find(to.begin(), to.end(), copy) == to.end()) to.push_back(copy);
    return Status::OK();
  }

  // The copy's first write was answered: the pieces held back go out. One
  // that cannot fails the copy.
  void SendWaiting(int copy) {
    Copy& c = copies_[static_cast<size_t>(copy)];
    c.acked = true;
    std::vector<int> waiting;
    waiting.swap(c.waiting);
    for (int piece : waiting) {
      if (c.failed) break;
      Status st = SendNow(copy, piece);
      if (!st.ok()) FailCopy(copy, st);
    }
  }

  // Marks `copy` failed with `error` (its first error stays) and reports
  // each piece no live copy still has pending.
  void FailCopy(int copy, Status error) {
    Copy& c = copies_[static_cast<size_t>(copy)];
    if (!c.failed) {
      c.failed = true;
      c.error = std::move(error);
    }
    c.waiting.clear();
    for (size_t i = 0; i < pieces_.size(); ++i) {
      Piece& p = pieces_[i];
      if (p.reported || PendingOnLiveCopy(static_cast<int>(i))) continue;
      const auto& to = sent_to_[i];
      if (std::find(to.begin(), to.end(), copy) == to.end()) continue;
      p.reported = true;
      IoCompletion done;
      done.tag = p.tag;
      done.status = c.error;
      ready_.push_back(std::move(done));
    }
  }

  bool Complete(const Copy& c) const {
    if (c.failed || c.done.size() != pieces_.size()) return false;
    return std::all_of(c.done.begin(), c.done.end(), [](bool d) { return d; });
  }

  // A copy that was sent every piece and has not failed may still finish.
  bool AnyCopyCanComplete() const {
    for (const auto& c : copies_) {
      if (!c.failed && c.done.size() == pieces_.size() && c.sent.size() == pieces_.size()) return true;
    }
    return false;
  }

  Status FirstCopyError() const {
    for (const auto& c : copies_) {
      if (c.failed) return c.error;
    }
    return Status::IOError("object " + name_ + ": no copy holds every write");
  }

  // When the newest copy is late: the send time of its oldest write still
  // pending, plus the deadline. Never, when no hedge may follow.
  std::optional<Clock::time_point> NextDeadline() {
    if (!holding_ || gave_up_) return std::nullopt;
    const Copy& c = copies_[static_cast<size_t>(target_)];
    std::optional<Clock::time_point> oldest;
    for (size_t i = 0; i < c.sent.size(); ++i) {
      const bool went_out = c.sent[i] != Clock::time_point{};
      if (went_out && !c.done[i] && c.pending > 0 && (!oldest || c.sent[i] < *oldest)) oldest = c.sent[i];
    }
    if (!oldest) return std::nullopt;
    return *oldest + state_->Deadline();
  }

  // Waits for one completion and applies it, or hedges when the newest
  // copy turns late first.
  Status Step() {
    auto deadline = NextDeadline();
    Op* op = nullptr;
    {
      std::unique_lock<std::mutex> lock(inbox_->mu);
      if (deadline) {
        inbox_->cv.wait_until(lock, *deadline, [&] { return !inbox_->done.empty(); });
      } else {
        inbox_->cv.wait(lock, [&] { return !inbox_->done.empty(); });
      }
      if (!inbox_->done.empty()) {
        op = inbox_->done.front();
        inbox_->done.pop_front();
      }
    }
    if (op == nullptr) return Hedge();
    Apply(op);
    return Status::OK();
  }

  void Apply(Op* raw) {
    const int ret = raw->completion->get_return_value();
    const int copy = raw->copy, piece = raw->piece;
    const Clock::duration took = raw->finished - raw->start;
    ReleaseOp(raw);
    if (piece < 0) return;
    Copy& c = copies_[static_cast<size_t>(copy)];
    --c.pending;
    Piece& p = pieces_[static_cast<size_t>(piece)];
    if (ret < 0) {
      // (EEXIST: the first write's create found the name taken; the pieces
      // held back for it fail with it.)
      FailCopy(copy, ret == -EEXIST ? Status::AlreadyExists("object " + c.name + " already exists")
                                    : RadosError(ret, "write object " + c.name + " at " + std::to_string(p.offset)));
      return;
    }
    c.done[static_cast<size_t>(piece)] = true;
    if (!c.acked) SendWaiting(copy);
    if (copies_.size() == 1) state_->RecordLatency(took);
    // Late, even where no hedge followed (over budget, or reaped after the
    // fact): new objects keep away from its placement group for a while.
    // Where the OSDs are judged, a write is slow well before it is late:
    // past twice the median (a slow OSD that is idle for a moment still
    // answers in a few times a healthy write's latency, under the deadline).
    // Every write is evidence, weighted by how many writes a group took:
    // an OSD of a late object's group that is not slow is cleared by the
    // writes to its other groups that finish on time (MarkOnTime).
    if (took > state_->SlowAfter()) {
      state_->MarkSlow(c.pg);
    } else {
      state_->MarkOnTime(c.pg);
    }
    if (!holding_) {
      p.bl.clear();
      p.memory.clear();
    }
    if (!p.reported) {
      p.reported = true;
      IoCompletion done;
      done.tag = p.tag;
      done.bytes = p.len;
      ready_.push_back(std::move(done));
    }
  }

  bool PendingOnLiveCopy(int piece) const {
    for (int c : sent_to_[static_cast<size_t>(piece)]) {
      const Copy& copy = copies_[static_cast<size_t>(c)];
      if (!copy.failed && !copy.done[static_cast<size_t>(piece)]) return true;
    }
    return false;
  }

  // The newest copy is late: its placement group is marked slow, and the
  // object is written again, whole, to a new copy elsewhere, if the budget
  // and the copy limit allow. Later writes go to the new copy only.
  Status Hedge() {
    state_->MarkSlow(copies_[static_cast<size_t>(target_)].pg);
    if (copies_.size() >= state_->options().max_copies || !state_->Reserve(held_bytes_)) {
      state_->CountRefused();
      gave_up_ = true;
      return Status::OK();
    }
    state_->CountHedged();
    AddCopy(/*avoid_slow=*/true);
    const int copy = static_cast<int>(copies_.size() - 1);
    for (size_t i = 0; i < pieces_.size(); ++i) {
      Status st = Send(copy, static_cast<int>(i));
      if (!st.ok()) {
        // The hedge could not go out: the copy written so far carries on
        // alone (later writes keep going to it), and no more hedges.
        copies_.back().failed = true;
        copies_.back().error = st;
        gave_up_ = true;
        return Status::OK();
      }
    }
    target_ = copy;
    return Status::OK();
  }

  std::shared_ptr<Cluster> cluster_;
  std::shared_ptr<HedgeState> state_;
  std::shared_ptr<Inbox> inbox_;
  std::string object_prefix_;
  std::string name_;
  size_t depth_;
  uint64_t size_hint_;
  unsigned next_name_ = 0;
  std::vector<Copy> copies_;
  int target_ = 0;  // the copy later writes go to: the newest one sent every piece
  std::deque<Piece> pieces_;
  std::deque<std::vector<int>> sent_to_;  // per piece: the copies it was sent to
  std::deque<IoCompletion> ready_;        // completions decided, not yet reaped
  size_t unreported_ = 0;
  uint64_t held_bytes_ = 0;
  bool holding_ = true;   // every piece's bytes are kept: the object may be hedged
  bool gave_up_ = false;  // a hedge was refused: no more deadlines
  Status sticky_;
  std::string stored_name_;
  std::vector<Summed> summed_;  // checksummed for the next StartWrite
};

}  // namespace

std::unique_ptr<WritableObject> NewHedgedRadosWritable(std::shared_ptr<Cluster> cluster,
                                                       std::shared_ptr<HedgeState> state,
                                                       std::string object_prefix, std::string name,
                                                       size_t depth, uint64_t size_hint) {
  return std::make_unique<HedgedRadosWritable>(std::move(cluster), std::move(state), std::move(object_prefix),
                                               std::move(name), depth, size_hint);
}

}  // namespace sluice
