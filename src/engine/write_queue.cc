#include "engine/write_queue.h"

#include <algorithm>
#include <cstring>

#include "engine/loser_reaper.h"
#include "sluice/aligned_buffer.h"
#include "io/crc32c.h"

namespace sluice {

WriteQueue::WriteQueue(Backend& backend, WriteQueueOptions options)
    : backend_(backend),
      placement_(backend.caps().placement),
      options_(std::move(options)),
      align_(std::max<size_t>(backend.caps().io_alignment, 1)),
      buffers_(new std::vector<AlignedBuffer>, [](std::vector<AlignedBuffer>* v) {
        for (auto& b : *v) BufferPool::Give(std::move(b));
        delete v;
      }) {
  if (options_.buffer_bytes > 0) {
    buffer_bytes_ = AlignUp(AlignUp(options_.buffer_bytes, AlignedBuffer::kAlignment), align_);
  }
}

WriteQueue::~WriteQueue() {
  if (WaitOut()) {
    // Nothing writes the losers any more: they go. One the process did not
    // live to remove is unnamed, and garbage collection's.
    for (auto& loser : to_discard_) (void)loser->Discard();
  } else {
    // A write that could not be reaped may still read its buffer: leak the
    // buffers on purpose rather than free memory the kernel may touch.
    new std::shared_ptr<std::vector<AlignedBuffer>>(std::move(buffers_));
  }
}

void WriteQueue::Completed(uint64_t tag) {
  if (tag & kOwnedTag) {
    free_.push_back(static_cast<size_t>(tag & ~kOwnedTag));
  } else if (options_.on_complete) {
    options_.on_complete(tag);
  }
}

void WriteQueue::MaybeReturn(Piece& p, bool held) {
  if (p.returned || p.pins > 0 || held) return;
  if (p.bucket) {
    options_.bucket->Release();
    p.bucket = false;
  }
  p.returned = true;
  Completed(p.tag);
}

Result<std::pair<uint8_t*, size_t>> WriteQueue::Space() {
  RETURN_IF_ERROR(error_);
  if (buffer_bytes_ == 0 || open_.empty() || open_.back().ended) {
    Fail(Status::InvalidArgument("internal: Space() with no buffers or no object begun"));
    return error_;
  }
  if (current_ < 0) {
    // Every buffer not free is in flight or held, and Write() bounds both:
    // the ring grows to the queue depth and the bytes held, no further.
    if (free_.empty()) {
      auto b = BufferPool::Take(static_cast<size_t>(buffer_bytes_));
      if (!b.ok()) {
        Fail(b.status());
        return error_;
      }
      buffers_->push_back(std::move(b).value());
      free_.push_back(buffers_->size() - 1);
    }
    current_ = static_cast<int>(free_.back());
    free_.pop_back();
    fill_ = 0;
  }
  return std::make_pair((*buffers_)[static_cast<size_t>(current_)].data() + fill_,
                        static_cast<size_t>(buffer_bytes_ - fill_));
}

Status WriteQueue::Fill(size_t n) {
  fill_ += n;
  if (fill_ == buffer_bytes_) return FlushOwned(false);
  return error_;
}

Status WriteQueue::FlushOwned(bool tail) {
  const size_t index = static_cast<size_t>(current_);
  const size_t len = fill_;
  current_ = -1;
  fill_ = 0;
  RETURN_IF_ERROR(Write(appended_, (*buffers_)[index].data(), len, kOwnedTag | index, tail));
  appended_ += len;
  return Status::OK();
}

void WriteQueue::Fail(const Status& st) {
  if (error_.ok() && !st.ok()) error_ = st;
}

size_t WriteQueue::Depth() const {
  size_t depth = options_.max_in_flight;
  if (!open_.empty()) {
    const Open& o = open_.back();
    size_t q = o.copies[o.target].object->queue_depth();
    depth = depth == 0 ? q : std::min(depth, q);
  }
  if (options_.bucket != nullptr && options_.bucket->max_concurrent() > 0) {
    depth = std::min<size_t>(depth, options_.bucket->max_concurrent());
  }
  return std::max<size_t>(depth, 1);
}

bool WriteQueue::Hedging(const Open& open) const {
  return open.hold && error_.ok() && !abandoned_;
}

Status WriteQueue::BeginObject(const std::string& name, uint64_t size_hint, bool placed) {
  RETURN_IF_ERROR(error_);
  if (!open_.empty() && !open_.back().ended) {
    Fail(Status::InvalidArgument("internal: object " + open_.back().name + " was not ended"));
    return error_;
  }
  // Objects still open (their last writes in flight) hold a descriptor and
  // an I/O ring each on a file store: a few keep the queue full across
  // boundaries; more would only cost. The backend says how many.
  const size_t max_open = std::max<size_t>(backend_.caps().objects_in_flight, 1);
  while (open_.size() >= max_open && in_flight_ > 0) {
    if (!ReapOne().ok()) return error_;
  }
  Open o;
  o.name = name;
  o.size_hint = size_hint;
  o.placed = placed && placement_ != nullptr;
  o.pieces = std::make_shared<std::vector<Piece>>();
  std::string stored = name;
  if (o.placed) {
    bool avoided = false;
    stored = placement_->Place(name, {}, &avoided);
    if (stored.empty()) stored = name;  // every placement slow: the name as given
    if (avoided) placement_->Count(HedgeEvent::kAvoided, 0);
    const HedgePolicy& policy = placement_->policy();
    // Held until past the policy's limit (Write): a larger object can be
    // hedged while it is still within it.
    o.hold = policy.enabled && policy.max_copies > 1;
  }
  CreateOptions create;
  create.size_hint = size_hint;
  auto created = backend_.Create(stored, create);
  if (!created.ok()) {
    Fail(created.status());
    return error_;
  }
  Copy first;
  first.object = std::move(created).value();
  first.name = std::move(stored);
  o.copies.push_back(std::move(first));
  open_.push_back(std::move(o));
  appended_ = 0;
  return Status::OK();
}

uint32_t WriteQueue::Checksum(uint32_t crc, const void* data, size_t len) {
  const TransportChecksum* transport = backend_.caps().transport_checksum;
  if (transport != nullptr && !open_.empty()) {
    Open& o = open_.back();
    return transport->ChecksumForWrite(*o.copies[o.target].object, crc, data, len);
  }
  return Crc32cExtend(crc, data, len);
}

Status WriteQueue::Send(Open& open, size_t c) {
  Copy& copy = open.copies[c];
  auto& pieces = *open.pieces;
  while (copy.next < pieces.size() && copy.error.ok() &&
         copy.object->in_flight() < copy.object->queue_depth()) {
    const size_t i = copy.next;
    Piece& p = pieces[i];
    Status st = copy.object->StartWrite(p.offset, p.data, p.len, i);
    if (!st.ok()) {
      copy.error = st.WithContext("write " + copy.name);
      return copy.error;
    }
    copy.sent_at.push_back(Clock::now());
    copy.done.push_back(false);
    ++copy.next;
    ++p.pins;
    ++in_flight_;
    if (open.placed) placement_->Count(HedgeEvent::kWriteStarted, 0);
  }
  return Status::OK();
}

Status WriteQueue::Write(uint64_t offset, void* data, size_t len, uint64_t tag, bool tail) {
  if (error_.ok() && (open_.empty() || open_.back().ended)) {
    Fail(Status::InvalidArgument("internal: write with no object begun"));
  }
  if (!error_.ok()) {
    Completed(tag);
    return error_;
  }
  if (tail) {
    size_t padded = static_cast<size_t>(AlignUp(len, align_));
    std::memset(static_cast<uint8_t*>(data) + len, 0, padded - len);
    len = padded;
  }
  // Depth() is at most the target copy's queue depth, so its own limit holds too.
  while (in_flight_ >= Depth()) {
    if (!ReapOne().ok()) {
      Completed(tag);
      return error_;
    }
  }
  if (options_.bucket != nullptr) {
    // A throttled flow waits for tokens far longer than its writes take:
    // reap them first, so their buffers and progress come back now rather
    // than a queue's worth of tokens later. On a store whose writes
    // complete late and in bunches (BackendCaps::writes_complete_in_bunches)
    // only what has completed: blocking there would let tokens go unused
    // past the burst. Unless the bucket also caps concurrency: then only a
    // reap frees the slot it may be waiting for.
    const bool bunched = backend_.caps().writes_complete_in_bunches;
    const bool slots = options_.bucket->max_concurrent() > 0;
    if (bunched && in_flight_ > 0 && options_.bucket->WouldWait(len) && !ReapReady().ok()) {
      Completed(tag);
      return error_;
    }
    while ((!bunched || slots) && in_flight_ > 0 && options_.bucket->WouldWait(len)) {
      if (!ReapOne().ok()) {
        Completed(tag);
        return error_;
      }
    }
    if (!options_.bucket->Acquire(len, options_.stop)) {
      Completed(tag);
      Fail(Status::Unavailable("write " + open_.back().name + ": stopped"));
      return error_;
    }
  }
  Open& open = open_.back();
  auto& pieces = *open.pieces;
  Piece piece;
  piece.offset = offset;
  piece.data = data;
  piece.len = len;
  piece.tag = tag;
  piece.bucket = options_.bucket != nullptr;
  pieces.push_back(piece);
  if (open.placed) placement_->Count(HedgeEvent::kSubmitted, len);
  if (open.hold) {
    open.held += len;
    held_ += len;
    const bool over = open.held > placement_->policy().max_held_bytes ||
                      (options_.max_held_bytes > 0 && held_ > options_.max_held_bytes);
    // Once hedged, an object is held to its end: the hedge needs every byte.
    if (over && open.copies.size() == 1) StopHolding(open);
  }
  Status st = Send(open, open.target);
  while (!st.ok() && Retarget(open)) st = Send(open, open.target);
  if (!st.ok()) {
    Piece& p = pieces.back();
    if (p.pins == 0) {
      if (p.bucket) options_.bucket->Release();
      p.bucket = false;
      p.returned = true;
      Completed(tag);
    }
    Fail(st);
    return error_;
  }
  return Status::OK();
}

void WriteQueue::StopHolding(Open& open) {
  open.hold = false;
  held_ -= open.held;
  open.held = 0;
  // What was written comes back; a piece not sent yet (the one being
  // written now) is still needed, and comes back once its write is reaped.
  auto& pieces = *open.pieces;
  for (size_t i = 0; i < open.copies[open.target].next; ++i) MaybeReturn(pieces[i], false);
}

Status WriteQueue::EndObject(uint64_t final_size) {
  if (open_.empty() || open_.back().ended) {
    Fail(Status::InvalidArgument("internal: end of an object never begun"));
    return error_;
  }
  if (current_ >= 0) {
    if (fill_ > 0) {
      RETURN_IF_ERROR(FlushOwned(true));
    } else {
      free_.push_back(static_cast<size_t>(current_));
      current_ = -1;
    }
  }
  open_.back().final_size = final_size;
  open_.back().ended = true;
  FinishReady();
  return error_;
}

Status WriteQueue::ReapOne() {
  if (stuck_) return error_;
  if (!losers_.empty()) ReapLosers(/*block=*/false);
  // The oldest object with writes in flight, and of its copies one not
  // found late where one has writes: a late copy's are waited for only
  // when nothing else is left to wait for.
  Open* open = nullptr;
  size_t c = 0;
  for (auto& o : open_) {
    for (size_t k = 0; k < o.copies.size(); ++k) {
      if (o.copies[k].object->in_flight() == 0) continue;
      if (open == nullptr || (o.copies[c].late && !o.copies[k].late)) {
        open = &o;
        c = k;
      }
    }
    if (open != nullptr) break;
  }
  if (open == nullptr) {
    Fail(Status::InvalidArgument("internal: reap with nothing in flight"));
    return error_;
  }
  Copy& copy = open->copies[c];
  Result<std::optional<IoCompletion>> got = std::optional<IoCompletion>();
  Clock::time_point oldest = Clock::time_point::max();  // of its writes not reaped
  if (Hedging(*open) && !copy.late) {
    for (size_t i = 0; i < copy.next; ++i) {
      if (!copy.done[i]) oldest = std::min(oldest, copy.sent_at[i]);
    }
  }
  if (oldest != Clock::time_point::max()) {
    got = copy.object->ReapUntil(oldest + placement_->Deadline());
    if (got.ok() && !got->has_value()) {
      Late(*open, c);
      return error_;
    }
  } else {
    auto r = copy.object->Reap();
    if (r.ok()) {
      got = std::optional<IoCompletion>(std::move(r).value());
    } else {
      got = r.status();
    }
  }
  if (!got.ok()) {
    // The write stays in flight as far as anyone knows: its buffer must
    // never be handed back.
    stuck_ = true;
    Fail(got.status().WithContext("reap a write of " + copy.name));
    return error_;
  }
  Apply(*open, c, **got);
  FinishReady();
  return error_;
}

Status WriteQueue::ReapReady() {
  for (auto& o : open_) {
    for (size_t k = 0; k < o.copies.size(); ++k) {
      Copy& copy = o.copies[k];
      while (!stuck_ && copy.object->in_flight() > 0) {
        auto got = copy.object->ReapUntil(Clock::now());
        if (!got.ok()) {
          stuck_ = true;  // as in ReapOne: the write's buffer is never handed back
          Fail(got.status().WithContext("reap a write of " + copy.name));
          return error_;
        }
        if (!got->has_value()) break;
        Apply(o, k, **got);
      }
    }
  }
  FinishReady();
  return error_;
}

void WriteQueue::Apply(Open& open, size_t c, const IoCompletion& done) {
  Copy& copy = open.copies[c];
  auto& pieces = *open.pieces;
  const size_t i = static_cast<size_t>(done.tag);
  Piece& p = pieces[i];
  --in_flight_;
  --p.pins;
  if (open.placed) placement_->Count(HedgeEvent::kWriteEnded, 0);
  if (p.bucket) {
    options_.bucket->Release();
    p.bucket = false;
  }
  if (!done.status.ok()) {
    copy.error = done.status.WithContext("write " + copy.name);
    // A copy may fail alone while another can still take every piece.
    if (c == open.target && !Retarget(open)) Fail(copy.error);
  } else {
    copy.done[i] = true;
    ++copy.done_count;
    if (!p.counted) {
      p.counted = true;
      if (options_.written != nullptr) options_.written->fetch_add(done.bytes, std::memory_order_relaxed);
      if (options_.written_total != nullptr) options_.written_total->Add(static_cast<double>(done.bytes));
    }
    // Every write is evidence of its placement; only one of an object
    // never hedged tells what a healthy write takes.
    if (open.placed) {
      placement_->Observe(copy.name, Clock::now() - copy.sent_at[i], /*sample=*/open.copies.size() == 1);
    }
  }
  MaybeReturn(p, open.hold);
  if (error_.ok()) {
    Status st = Send(open, open.target);  // what a hedge has yet to send
    while (!st.ok() && Retarget(open)) st = Send(open, open.target);
    if (!st.ok()) Fail(st);
  }
}

bool WriteQueue::Retarget(Open& open) {
  for (size_t k = open.copies.size(); k-- > 0;) {
    if (k != open.target && open.copies[k].error.ok()) {
      open.target = k;  // it gets what it lacks as the next completion pumps
      return true;
    }
  }
  return false;
}

void WriteQueue::Late(Open& open, size_t c) {
  open.copies[c].late = true;
  placement_->Observe(open.copies[c].name, placement_->Deadline(), /*sample=*/false);
  if (c != open.target) return;  // hedged already
  uint64_t bytes = 0;
  for (const auto& p : *open.pieces) bytes += p.len;
  std::vector<std::string> taken;
  for (const auto& k : open.copies) taken.push_back(k.name);
  bool avoided = false;
  std::string name;
  if (open.copies.size() < placement_->policy().max_copies) name = placement_->Place(open.name, taken, &avoided);
  if (name.empty() || !placement_->Reserve(bytes)) {
    placement_->Count(HedgeEvent::kRefused, 0);
    return;
  }
  CreateOptions create;
  create.size_hint = open.size_hint;
  auto created = backend_.Create(name, create);
  if (!created.ok()) {
    // (Someone else's object under that name, or the store refused: the
    // late copy goes on alone.)
    placement_->Count(HedgeEvent::kRefused, 0);
    return;
  }
  Copy hedge;
  hedge.object = std::move(created).value();
  hedge.name = std::move(name);
  open.copies.push_back(std::move(hedge));
  open.target = open.copies.size() - 1;
  placement_->Count(HedgeEvent::kHedged, 0);
  if (!Send(open, open.target).ok()) open.target = c;  // the late copy goes on alone
}

void WriteQueue::FinishReady() {
  while (error_.ok() && !abandoned_ && !open_.empty() && open_.front().ended) {
    Open& o = open_.front();
    auto& pieces = *o.pieces;
    int winner = -1;
    bool pending = false;
    for (size_t k = 0; k < o.copies.size() && winner < 0; ++k) {
      const Copy& copy = o.copies[k];
      if (!copy.error.ok()) continue;
      if (copy.done_count == pieces.size()) {
        winner = static_cast<int>(k);
      } else if (copy.next == pieces.size() || k == o.target) {
        pending = true;
      }
    }
    if (winner < 0) {
      if (!pending) Fail(o.copies[o.target].error);
      return;
    }
    Copy& w = o.copies[static_cast<size_t>(winner)];
    Status st = w.object->Finish(o.final_size);
    if (!st.ok()) {
      Fail(st.WithContext("finish " + w.name));
      return;
    }
    finished_.push_back(DataObjectRef{w.name, o.final_size});
    if (winner > 0) placement_->Count(HedgeEvent::kWon, 0);
    for (size_t k = 0; k < o.copies.size(); ++k) {
      if (static_cast<int>(k) != winner) Lose(o, std::move(o.copies[k]));
    }
    held_ -= o.held;
    for (auto& p : pieces) {
      if (p.bucket) {
        options_.bucket->Release();
        p.bucket = false;
      }
      MaybeReturn(p, false);
    }
    open_.pop_front();
  }
}

void WriteQueue::Lose(Open& open, Copy loser) {
  const size_t writing = loser.object->in_flight();
  in_flight_ -= writing;  // no longer the queue's to wait for
  if (!options_.buffers_stay_mapped) {
    if (writing > 0) {
      losers_.push_back(Loser{open.pieces, std::move(loser)});
    } else {
      to_discard_.push_back(std::move(loser.object));
    }
    return;
  }
  // The reaper waits for its writes: the pieces they read are free for the
  // caller to reuse (their memory stays mapped), and the queue's own
  // buffers stay alive with it.
  for (size_t i = 0; i < loser.next; ++i) {
    if (loser.done[i]) continue;
    --(*open.pieces)[i].pins;
    if (open.placed) placement_->Count(HedgeEvent::kWriteEnded, 0);
  }
  LoserReaper::Get().Add(std::move(loser.object), buffers_);
}

void WriteQueue::ReapLosers(bool block) {
  for (size_t i = 0; i < losers_.size() && !stuck_;) {
    Loser& l = losers_[i];
    while (l.copy.object->in_flight() > 0) {
      Result<std::optional<IoCompletion>> got = std::optional<IoCompletion>();
      if (block) {
        auto r = l.copy.object->Reap();
        if (r.ok()) {
          got = std::optional<IoCompletion>(std::move(r).value());
        } else {
          got = r.status();
        }
      } else {
        got = l.copy.object->ReapUntil(Clock::now());
      }
      if (!got.ok()) {
        stuck_ = true;
        Fail(got.status().WithContext("reap a write of " + l.copy.name));
        return;
      }
      if (!got->has_value()) break;
      Piece& p = (*l.pieces)[static_cast<size_t>((*got)->tag)];
      --p.pins;
      placement_->Count(HedgeEvent::kWriteEnded, 0);
      MaybeReturn(p, false);
    }
    if (l.copy.object->in_flight() == 0) {
      to_discard_.push_back(std::move(l.copy.object));
      losers_.erase(losers_.begin() + static_cast<ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

Status WriteQueue::Finish() {
  if (error_.ok() && !open_.empty() && !open_.back().ended) {
    Fail(Status::InvalidArgument("internal: finish before object " + open_.back().name + " ended"));
  }
  while (error_.ok() && in_flight_ > 0) (void)ReapOne();
  FinishReady();
  if (error_.ok() && !open_.empty()) {
    Fail(Status::InvalidArgument("internal: object " + open_.front().name + " has no copy left to finish"));
  }
  if (!error_.ok()) {
    WaitOut();
    return error_;
  }
  return error_;
}

bool WriteQueue::WaitOut() {
  abandoned_ = !error_.ok() || in_flight_ > 0 || abandoned_;
  while (in_flight_ > 0 && !stuck_) (void)ReapOne();
  if (!stuck_) ReapLosers(/*block=*/true);
  if (stuck_) return false;
  // Nothing is in flight: every piece still out goes back.
  for (auto& o : open_) {
    for (auto& p : *o.pieces) {
      p.pins = 0;
      MaybeReturn(p, false);
    }
  }
  open_.clear();
  held_ = 0;
  return true;
}

}  // namespace sluice
