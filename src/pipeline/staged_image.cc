#include "pipeline/staged_image.h"

#include <algorithm>
#include <cstring>

#include "sluice/aligned_buffer.h"
#include "sluice/stream_copy.h"
#include "engine/chunk_layout.h"
#include "engine/write_queue.h"

namespace sluice {
namespace {

// Memory items are cut into pieces of this size so that every copy thread
// gets work even when one item dominates.
constexpr uint64_t kCopyPieceBytes = 16ull << 20;

}  // namespace

CopyPool::CopyPool(uint32_t threads) {
  for (uint32_t i = 1; i < std::max<uint32_t>(threads, 1); ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

CopyPool::~CopyPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void CopyPool::Drain() {
  for (;;) {
    size_t i = next_.fetch_add(1);
    if (i >= count_) return;
    (*task_)(i);
  }
}

void CopyPool::WorkerLoop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    ++active_;
    lock.unlock();
    Drain();
    lock.lock();
    if (--active_ == 0) done_cv_.notify_all();
  }
}

void CopyPool::Run(size_t count, const std::function<void(size_t)>& task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = &task;
    count_ = count;
    next_ = 0;
    ++generation_;
  }
  start_cv_.notify_all();
  Drain();
  std::unique_lock<std::mutex> lock(mu_);
  // Workers that woke late find no task left and leave at once; wait for the
  // ones still copying.
  done_cv_.wait(lock, [&] { return active_ == 0; });
  task_ = nullptr;
}

std::unique_ptr<StagedImage> StagedImage::Plan(std::vector<StagedItem> items, uint64_t chunk_bytes,
                                               uint64_t object_bytes, size_t align,
                                               StagingArena& arena) {
  std::unique_ptr<StagedImage> img = Layout(std::move(items), chunk_bytes, object_bytes, align, arena);
  if (img->slab_count_ > arena.slab_count()) {
    // The image streams through the arena: objects of at most half of it,
    // so that the incremental writer can hold one while it hashes it
    // (staged_image.h) while the previous one's writes hold the rest.
    const uint64_t S = arena.slab_bytes();
    const uint64_t half = std::max(S, arena.bytes() / 2 / S * S);
    if (img->object_bytes_ > half) {
      img = Layout(std::move(img->items_), chunk_bytes, std::min(object_bytes, half), align, arena);
    }
  }
  img->first_seq_ = arena.Reserve(img->slab_count_);
  return img;
}

std::unique_ptr<StagedImage> StagedImage::Layout(std::vector<StagedItem> items, uint64_t chunk_bytes,
                                                 uint64_t object_bytes, size_t align,
                                                 StagingArena& arena) {
  std::unique_ptr<StagedImage> img(new StagedImage(arena));
  const uint64_t S = arena.slab_bytes();
  img->align_ = std::max<size_t>(align, 1);
  img->items_ = std::move(items);
  img->chunks_.resize(img->items_.size());
  uint64_t next_slab = 0;
  ChunkLayout layout(chunk_bytes, object_bytes);
  img->object_bytes_ = layout.object_bytes();
  for (uint32_t i = 0; i < img->items_.size(); ++i) {
    const StagedItem& item = img->items_[i];
    img->total_bytes_ += item.size;
    uint64_t remaining = item.size;
    uint64_t item_off = 0;
    const size_t first_unit = img->units_.size();
    while (remaining > 0) {
      bool new_object = false;
      ChunkRef ref = layout.Place(remaining, &new_object);
      const uint64_t clen = ref.length;
      if (new_object) {
        // Each object starts on a slab of its own.
        if (!img->objects_.empty()) next_slab += (img->objects_.back().size + S - 1) / S;
        img->objects_.push_back(ObjectPlan{next_slab, 0});
      }
      ObjectPlan& obj = img->objects_.back();
      img->order_.push_back(ChunkPlan{i, static_cast<uint32_t>(img->chunks_[i].size()), ref.object, ref.offset});
      img->chunks_[i].push_back(ref);
      uint64_t pos = obj.first_slab * S + obj.size;
      if (img->units_.size() > first_unit && img->units_.back().image_pos + img->units_.back().len == pos) {
        img->units_.back().len += clen;
      } else {
        img->units_.push_back(CopyUnit{i, item_off, pos, clen, false});
      }
      obj.size += clen;
      item_off += clen;
      remaining -= clen;
    }
    if (item.async != nullptr) {
      img->has_async_ = true;
      if (std::find(img->async_sources_.begin(), img->async_sources_.end(), item.async) ==
          img->async_sources_.end()) {
        img->async_sources_.push_back(item.async);
      }
    }
    if (item.source != nullptr) {
      // One task for the whole item: a source is read front to back.
      if (img->units_.size() > first_unit) img->tasks_.push_back({first_unit, img->units_.size()});
      continue;
    }
    // Split memory runs into pieces, each its own task.
    std::vector<CopyUnit> runs(img->units_.begin() + static_cast<long>(first_unit), img->units_.end());
    img->units_.resize(first_unit);
    for (const CopyUnit& r : runs) {
      uint64_t done = 0;
      while (done < r.len) {
        uint64_t n = std::min(kCopyPieceBytes, r.len - done);
        img->units_.push_back(CopyUnit{i, r.item_offset + done, r.image_pos + done, n, false});
        img->tasks_.push_back({img->units_.size() - 1, img->units_.size()});
        done += n;
      }
    }
  }
  if (!img->objects_.empty()) next_slab += (img->objects_.back().size + S - 1) / S;
  img->slab_count_ = next_slab;
  img->unfilled_.reset(new std::atomic<uint64_t>[img->slab_count_]);
  for (const auto& o : img->objects_) {
    uint64_t slabs = (o.size + S - 1) / S;
    for (uint64_t j = 0; j < slabs; ++j) {
      img->unfilled_[o.first_slab + j].store(std::min(S, o.size - j * S));
    }
  }
  return img;
}

void StagedImage::Fail(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.load()) {
      failed_.store(true, std::memory_order_release);
      if (copy_status_.ok()) copy_status_ = why;
    }
  }
  filled_cv_.notify_all();
  arena_.Kick();
}

void StagedImage::SlabFilled(uint64_t slab, uint64_t bytes) {
  if (unfilled_[slab].fetch_sub(bytes, std::memory_order_acq_rel) == bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    filled_cv_.notify_all();
  }
}

Status StagedImage::CopyUnitIn(const CopyUnit& u) {
  const uint64_t S = arena_.slab_bytes();
  const StagedItem& item = items_[u.item];
  uint64_t pos = u.image_pos;
  uint64_t item_off = u.item_offset;
  uint64_t left = u.len;
  while (left > 0) {
    uint64_t slab = pos / S;
    uint64_t in = pos % S;
    uint64_t n = std::min(left, S - in);
    uint64_t seq = first_seq_ + slab;
    if (!arena_.WaitWritable(seq, [this] { return Abandoned(); })) {
      return Status::Unavailable("snapshot abandoned");
    }
    uint8_t* dst = arena_.SlabOf(seq) + in;
    if (item.data != nullptr) {
      StreamCopy(dst, item.data + item_off, static_cast<size_t>(n));
    } else if (item.async != nullptr) {
      // Not overlapped (the image does not fit in the free arena): this slab
      // must be whole before a later one can be waited for.
      RETURN_IF_ERROR(item.async->StartCopy(item_off, dst, static_cast<size_t>(n)));
      RETURN_IF_ERROR(item.async->Wait());
    } else {
      uint64_t got = 0;
      while (got < n) {
        ASSIGN_OR_RETURN(size_t r, item.source->Read(dst + got, static_cast<size_t>(n - got)));
        if (r == 0 || r > n - got) {
          return Status::InvalidArgument("item '" + item.key + "': its source delivered " +
                                         std::to_string(item_off + got) + " bytes, " +
                                         std::to_string(item.size) + " were declared");
        }
        got += r;
      }
    }
    SlabFilled(slab, n);
    pos += n;
    item_off += n;
    left -= n;
  }
  return Status::OK();
}

bool StagedImage::FitsInFreeArena() {
  for (uint64_t slab = 0; slab < slab_count_; ++slab) {
    if (!arena_.Writable(first_seq_ + slab)) return false;
  }
  return true;
}

Status StagedImage::StartAsyncCopies() {
  // Device copies land in many slabs at once, past WaitWritable.
  arena_.WaitAllTouched();
  const uint64_t S = arena_.slab_bytes();
  for (const CopyUnit& u : units_) {
    const StagedItem& item = items_[u.item];
    if (item.async == nullptr) continue;
    uint64_t pos = u.image_pos, item_off = u.item_offset, left = u.len;
    while (left > 0) {
      const uint64_t slab = pos / S, in = pos % S, n = std::min(left, S - in);
      Status st = item.async->StartCopy(item_off, arena_.SlabOf(first_seq_ + slab) + in,
                                        static_cast<size_t>(n));
      if (!st.ok()) return st.WithContext("snapshot item '" + item.key + "'");
      started_.push_back({slab, n});
      pos += n;
      item_off += n;
      left -= n;
    }
  }
  return Status::OK();
}

Status StagedImage::FinishAsyncCopies() {
  // Waited for even after a failure: a copy in flight still writes into the
  // arena and reads the caller's memory.
  Status result;
  for (AsyncItemSource* src : async_sources_) {
    Status st = src->Wait();
    if (result.ok() && !st.ok()) result = st.WithContext("snapshot: a device copy");
  }
  if (!result.ok()) return result;
  for (const StartedCopy& c : started_) SlabFilled(c.slab, c.bytes);
  started_.clear();
  return Status::OK();
}

Status StagedImage::CopyIn(CopyPool& pool) {
  // Device copies go first, all in flight while the host items are memcpy'd,
  // when every slab of the image is free now. Otherwise the image streams
  // through the arena, and each device piece is copied and waited for in
  // image order like any other piece.
  // A tracked (lazy) copy marks each device item as it lands instead.
  const bool overlap = has_async_ && !tracked_ && FitsInFreeArena();
  Status started = overlap ? StartAsyncCopies() : Status::OK();
  if (!started.ok()) Fail(started);
  pool.Run(tasks_.size(), [this, overlap](size_t t) {
    for (size_t u = tasks_[t].first; u < tasks_[t].second; ++u) {
      if (Abandoned()) return;
      if (overlap && items_[units_[u].item].async != nullptr) continue;  // in flight already
      Status st = CopyUnitIn(units_[u]);
      if (!st.ok()) {
        Fail(st.WithContext("snapshot item '" + items_[units_[u].item].key + "'"));
        return;
      }
      if (tracked_) UnitCopied(units_[u].item);
    }
  });
  if (overlap) {
    Status landed = FinishAsyncCopies();
    if (!landed.ok()) Fail(landed);
  }
  Status result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    copy_finished_ = true;
    copy_finished_at_ = std::chrono::steady_clock::now();
    result = copy_status_;
  }
  filled_cv_.notify_all();
  // The caller's buffers and sources are not touched after this.
  for (auto& it : items_) {
    it.data = nullptr;
    it.source = nullptr;
    it.async = nullptr;
  }
  async_sources_.clear();
  return result;
}

void StagedImage::TrackItems() {
  tracked_ = true;
  units_left_.reset(new std::atomic<uint32_t>[items_.size()]);
  std::vector<uint32_t> counts(items_.size(), 0);
  for (const CopyUnit& u : units_) ++counts[u.item];
  std::vector<uint32_t> empty;
  for (uint32_t i = 0; i < items_.size(); ++i) {
    units_left_[i].store(counts[i]);
    if (counts[i] == 0) empty.push_back(i);
  }
  item_copied_.assign(items_.size(), 0);
  ItemsCopied(empty);
}

void StagedImage::UnitCopied(uint32_t item) {
  if (units_left_[item].fetch_sub(1, std::memory_order_acq_rel) == 1) ItemsCopied({item});
}

void StagedImage::ItemsCopied(const std::vector<uint32_t>& items) {
  if (items.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t i : items) item_copied_[i] = 1;
  }
  filled_cv_.notify_all();
}

Status StagedImage::WaitItems(const std::vector<uint32_t>& items) {
  for (uint32_t i : items) {
    if (i >= items_.size()) {
      return Status::InvalidArgument("no item " + std::to_string(i) + " (the snapshot has " +
                                     std::to_string(items_.size()) + ")");
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  auto all_copied = [&] {
    if (!tracked_) return copy_finished_;
    for (uint32_t i : items) {
      if (!item_copied_[i]) return false;
    }
    return true;
  };
  filled_cv_.wait(lock, [&] { return all_copied() || copy_finished_ || failed_.load(); });
  if (all_copied()) return Status::OK();
  // Failed: the copy threads stop soon, but may still be reading the
  // caller's buffers until CopyIn returns.
  filled_cv_.wait(lock, [&] { return copy_finished_; });
  return copy_status_.ok() ? Status::Unavailable("the snapshot copy ended before these items were copied") : copy_status_;
}

Status StagedImage::WaitCopied() {
  std::unique_lock<std::mutex> lock(mu_);
  filled_cv_.wait(lock, [&] { return copy_finished_; });
  return copy_status_;
}

std::chrono::steady_clock::time_point StagedImage::CopyFinishedAt() {
  std::lock_guard<std::mutex> lock(mu_);
  return copy_finished_at_;
}

bool StagedImage::CopyFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  return copy_finished_;
}

void StagedImage::Finish(const Status& verdict) {
  {
    // The verdict lands with the finish, in one step: a writer that sees the
    // finish sees a failed one as failed.
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    if (!verdict.ok() && !failed_.load()) {
      failed_.store(true, std::memory_order_release);
      if (copy_status_.ok()) copy_status_ = verdict;
    }
  }
  filled_cv_.notify_all();
  if (!verdict.ok()) arena_.Kick();
}

Status StagedImage::WaitFinished() {
  std::unique_lock<std::mutex> lock(mu_);
  filled_cv_.wait(lock, [&] { return copy_finished_ && (!tracked_ || finished_); });
  return copy_status_;
}

bool StagedImage::WaitSlabFilled(uint64_t slab) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (unfilled_[slab].load(std::memory_order_acquire) == 0) return true;
    if (copy_finished_ || failed_.load()) return false;
    filled_cv_.wait(lock);
  }
}

}  // namespace sluice
