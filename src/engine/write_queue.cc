#include "engine/write_queue.h"

#include <algorithm>
#include <cstring>

#include "io/aligned_buffer.h"
#include "io/crc32c.h"

namespace sluice {

WriteQueue::WriteQueue(Backend& backend, WriteQueueOptions options)
    : backend_(backend),
      options_(std::move(options)),
      align_(std::max<size_t>(backend.caps().io_alignment, 1)) {
  if (options_.buffer_bytes > 0) {
    buffer_bytes_ = AlignUp(AlignUp(options_.buffer_bytes, AlignedBuffer::kAlignment), align_);
  }
}

WriteQueue::~WriteQueue() {
  if (WaitOut()) {
    for (auto& b : buffers_) BufferPool::Give(std::move(b));
  } else {
    // A write that could not be reaped may still read its buffer: leak the
    // buffers on purpose rather than free memory the kernel may touch.
    for (auto& b : buffers_) new AlignedBuffer(std::move(b));
  }
}

void WriteQueue::Completed(uint64_t tag) {
  if (tag & kOwnedTag) {
    free_.push_back(static_cast<size_t>(tag & ~kOwnedTag));
  } else if (options_.on_complete) {
    options_.on_complete(tag);
  }
}

Result<std::pair<uint8_t*, size_t>> WriteQueue::Space() {
  RETURN_IF_ERROR(error_);
  if (buffer_bytes_ == 0 || open_.empty() || open_.back().ended) {
    Fail(Status::InvalidArgument("internal: Space() with no buffers or no object begun"));
    return error_;
  }
  if (current_ < 0) {
    // Every buffer not free is in flight, and Write() bounds what is in
    // flight: the ring grows to the queue depth and no further.
    if (free_.empty()) {
      auto b = BufferPool::Take(static_cast<size_t>(buffer_bytes_));
      if (!b.ok()) {
        Fail(b.status());
        return error_;
      }
      buffers_.push_back(std::move(b).value());
      free_.push_back(buffers_.size() - 1);
    }
    current_ = static_cast<int>(free_.back());
    free_.pop_back();
    fill_ = 0;
  }
  return std::make_pair(buffers_[static_cast<size_t>(current_)].data() + fill_,
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
  RETURN_IF_ERROR(Write(appended_, buffers_[index].data(), len, kOwnedTag | index, tail));
  appended_ += len;
  return Status::OK();
}

void WriteQueue::Fail(const Status& st) {
  if (error_.ok() && !st.ok()) error_ = st;
}

size_t WriteQueue::Depth() const {
  size_t depth = options_.max_in_flight;
  if (!open_.empty()) {
    size_t q = open_.back().object->queue_depth();
    depth = depth == 0 ? q : std::min(depth, q);
  }
  if (options_.bucket != nullptr && options_.bucket->max_concurrent() > 0) {
    depth = std::min<size_t>(depth, options_.bucket->max_concurrent());
  }
  return std::max<size_t>(depth, 1);
}

Status WriteQueue::BeginObject(const std::string& name, uint64_t size_hint, bool relocatable) {
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
  CreateOptions create;
  create.size_hint = size_hint;
  create.relocatable = relocatable;
  auto created = backend_.Create(name, create);
  if (!created.ok()) {
    Fail(created.status());
    return error_;
  }
  open_.push_back(Open{std::move(created).value(), name, 0, false});
  appended_ = 0;
  return Status::OK();
}

uint32_t WriteQueue::Checksum(uint32_t crc, const void* data, size_t len) {
  const TransportChecksum* transport = backend_.caps().transport_checksum;
  if (transport != nullptr) return transport->ChecksumForWrite(*open_.back().object, crc, data, len);
  return Crc32cExtend(crc, data, len);
}

Status WriteQueue::Write(uint64_t offset, void* data, size_t len, uint64_t tag, bool tail) {
  auto give_back = [&] { Completed(tag); };
  if (error_.ok() && (open_.empty() || open_.back().ended)) {
    Fail(Status::InvalidArgument("internal: write with no object begun"));
  }
  if (!error_.ok()) {
    give_back();
    return error_;
  }
  if (tail) {
    size_t padded = static_cast<size_t>(AlignUp(len, align_));
    std::memset(static_cast<uint8_t*>(data) + len, 0, padded - len);
    len = padded;
  }
  WritableObject* o = open_.back().object.get();
  // Depth() is at most this object's queue depth, so its own limit holds too.
  while (in_flight_ >= Depth()) {
    if (!ReapOne().ok()) {
      give_back();
      return error_;
    }
  }
  if (options_.bucket != nullptr) {
    // A throttled flow waits for tokens far longer than its writes take:
    // reap them first, so their buffers and progress come back now rather
    // than a queue's worth of tokens later.
    while (in_flight_ > 0 && options_.bucket->WouldWait(len)) {
      if (!ReapOne().ok()) {
        give_back();
        return error_;
      }
    }
    if (!options_.bucket->Acquire(len, options_.stop)) {
      give_back();
      Fail(Status::Unavailable("write " + open_.back().name + ": stopped"));
      return error_;
    }
  }
  Status st = o->StartWrite(offset, data, len, tag);
  if (!st.ok()) {
    if (options_.bucket != nullptr) options_.bucket->Release();
    give_back();
    Fail(st.WithContext("write " + open_.back().name));
    return error_;
  }
  ++in_flight_;
  return Status::OK();
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
  Open* target = nullptr;
  for (auto& o : open_) {
    if (o.object->in_flight() > 0) {
      target = &o;  // the oldest writes were started first
      break;
    }
  }
  if (target == nullptr) {
    Fail(Status::InvalidArgument("internal: reap with nothing in flight"));
    return error_;
  }
  auto c = target->object->Reap();
  if (!c.ok()) {
    // The write stays in flight as far as anyone knows: its buffer must
    // never be handed back.
    stuck_ = true;
    Fail(c.status().WithContext("reap a write of " + target->name));
    return error_;
  }
  --in_flight_;
  if (options_.bucket != nullptr) options_.bucket->Release();
  Completed(c->tag);
  if (!c->status.ok()) {
    Fail(c->status.WithContext("write " + target->name));
  } else {
    if (options_.written != nullptr) options_.written->fetch_add(c->bytes, std::memory_order_relaxed);
    if (options_.written_total != nullptr) options_.written_total->Add(static_cast<double>(c->bytes));
  }
  FinishReady();
  return error_;
}

void WriteQueue::FinishReady() {
  while (!open_.empty() && open_.front().ended && open_.front().object->in_flight() == 0) {
    Open& o = open_.front();
    if (error_.ok() && !abandoned_) {
      Status st = o.object->Finish(o.final_size);
      if (st.ok()) {
        std::string stored = o.object->StoredName();
        finished_.push_back(DataObjectRef{stored.empty() ? o.name : std::move(stored), o.final_size});
      } else {
        Fail(st.WithContext("finish " + o.name));
      }
    }
    open_.pop_front();
  }
}

Status WriteQueue::Finish() {
  if (error_.ok() && !open_.empty() && !open_.back().ended) {
    Fail(Status::InvalidArgument("internal: finish before object " + open_.back().name + " ended"));
  }
  while (error_.ok() && in_flight_ > 0) (void)ReapOne();
  if (!error_.ok()) {
    WaitOut();
    return error_;
  }
  FinishReady();
  return error_;
}

bool WriteQueue::WaitOut() {
  abandoned_ = !error_.ok() || in_flight_ > 0 || abandoned_;
  while (in_flight_ > 0 && !stuck_) (void)ReapOne();
  if (!stuck_) open_.clear();
  return !stuck_;
}

}  // namespace sluice
