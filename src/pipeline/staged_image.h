// StagedImage: one rank's checkpoint laid out in the staging arena exactly as
// its tier-0 data objects will be (chunks back to back, each object starting
// on a slab), so the tier-0 writer issues O_DIRECT writes straight from
// staging. The snapshot is a plain parallel memcpy; chunk checksums are
// computed by the writer from the staged bytes, off the caller's stall.
//
// Life: Plan() -> CopyIn() on the caller's thread (the stall) while
// WriteAndCommit() runs on the writer thread, consuming slabs as they fill.
//
// Thread-safety: CopyIn and WriteAndCommit run concurrently on two threads;
// nothing else is shared.
#ifndef SLUICE_PIPELINE_STAGED_IMAGE_H_
#define SLUICE_PIPELINE_STAGED_IMAGE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "format/manifest.h"
#include "io/token_bucket.h"
#include "checkpoint/checkpoint_writer.h"
#include "pipeline/staging_arena.h"
#include "sluice/backend.h"
#include "sluice/item_source.h"
#include "sluice/metrics.h"
#include "sluice/store.h"

namespace sluice {

// A fixed set of threads that run the tasks of one job at a time, with the
// caller's thread joining in.
class CopyPool {
 public:
  explicit CopyPool(uint32_t threads);  // total, the caller's included
  ~CopyPool();
  // Runs task(i) for i in [0, count), spread over the threads; returns when
  // all are done. One job at a time (callers serialize).
  void Run(size_t count, const std::function<void(size_t)>& task);
  uint32_t threads() const { return static_cast<uint32_t>(workers_.size() + 1); }

 private:
  void WorkerLoop();
  void Drain();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(size_t)>* task_ = nullptr;
  size_t count_ = 0;
  std::atomic<size_t> next_{0};
  size_t active_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

struct StagedItem {
  std::string key;
  std::string metadata;
  uint64_t size = 0;
  const uint8_t* data = nullptr;  // a view of the caller's bytes, or
  ItemSource* source = nullptr;   // bytes pulled in order, or
  AsyncItemSource* async = nullptr;  // bytes the source copies in itself (a DMA)
};

class StagedImage {
 public:
  // Lays `items` out into objects of at most object_bytes (at least one
  // chunk), and at most half the arena when the image is larger than the
  // arena, written in slabs of arena.slab_bytes(), padded to `align`.
  static std::unique_ptr<StagedImage> Plan(std::vector<StagedItem> items, uint64_t chunk_bytes,
                                           uint64_t object_bytes, size_t align,
                                           StagingArena& arena);

  uint64_t bytes() const { return total_bytes_; }
  uint64_t slab_count() const { return slab_count_; }

  // Copies every item into staging (blocking on free slabs when the image is
  // larger than the arena). On error, or once Fail() is called, stops
  // copying; either way marks the copy finished so the writer can clean up.
  Status CopyIn(CopyPool& pool);

  // Writes each slab as it fills, checksumming (CRC32C) and hashing
  // (XXH3-128) its chunks, then commits through `writer`. Releases every
  // slab of the image back to the arena, whatever happens. `bucket`
  // (optional) paces the writes; `written` counts bytes as they complete.
  //
  // Incremental saves: chunks equal to a chunk of the base step (the
  // writer's ReferenceBase) are referenced there instead of written. An object's
  // chunks are all hashed before any of it is written; an object with no
  // such chunk is then written straight from staging as usual, and the
  // changed chunks of one that has some are packed into new objects (one
  // more copy, of the changed bytes only). Plan() keeps the objects of an
  // image that streams within half the arena so that one can be held while
  // it is hashed; one larger than the arena (a single chunk bigger than
  // that) is written in full.
  // `hash_pool` (optional) hashes an object's chunks in parallel.
  Result<SaveStats> WriteAndCommit(RankWriter& writer, Backend& backend, TokenBucket* bucket,
                                   std::atomic<uint64_t>* written, Counter* written_total = nullptr,
                                   CopyPool* hash_pool = nullptr);

  // Makes CopyIn stop early (the writer failed, or the pipeline closes).
  void Fail(const Status& why);

  // A lazy snapshot (PendingCheckpoint::SnapshotLazily): call before CopyIn.
  // CopyIn then counts each item's copied bytes, so that WaitItems can tell
  // when an item is whole, and WriteAndCommit commits only after Finish().
  void TrackItems();
  // Waits until every item in `items` (indexes into the planned items) is in
  // staging: OK, or the copy's error if it failed first.
  Status WaitItems(const std::vector<uint32_t>& items);
  // Whether CopyIn has returned.
  bool CopyFinished();
  // When CopyIn finished (the epoch before).
  std::chrono::steady_clock::time_point CopyFinishedAt();
  // Waits until CopyIn has returned; its outcome.
  Status WaitCopied();
  // The caller's verdict on a tracked copy (the first one counts): OK lets
  // the writer commit, an error fails the save with it.
  void Finish(const Status& verdict);

 private:
  struct ObjectPlan {
    uint64_t first_slab = 0;  // image-relative
    uint64_t size = 0;        // logical bytes
  };
  struct ChunkPlan {  // in image order
    uint32_t item = 0;
    uint32_t chunk = 0;  // index in the item's chunk list
    uint32_t object = 0;  // the planned object it lies in (objects_)
    uint64_t offset = 0;  // and where
  };
  // A contiguous run of an item's bytes in the image.
  struct CopyUnit {
    uint32_t item = 0;
    uint64_t item_offset = 0;
    uint64_t image_pos = 0;
    uint64_t len = 0;
    bool continues = false;  // a source item's next run follows in the next unit
  };

  // One WriteAndCommit's state and steps (staged_image_write.cc).
  class Writing;

  StagedImage(StagingArena& arena) : arena_(arena) {}
  // Plan without reserving the slabs.
  static std::unique_ptr<StagedImage> Layout(std::vector<StagedItem> items, uint64_t chunk_bytes,
                                             uint64_t object_bytes, size_t align, StagingArena& arena);
  bool Abandoned() const { return failed_.load(std::memory_order_acquire); }
  Status CopyUnitIn(const CopyUnit& u);
  bool FitsInFreeArena();
  // Overlapped device copies: every piece of every async item started at once
  // (before the host memcpy), then waited for and marked filled.
  Status StartAsyncCopies();
  Status FinishAsyncCopies();
  void SlabFilled(uint64_t slab, uint64_t bytes);
  bool WaitSlabFilled(uint64_t slab);
  // Waits until CopyIn has returned.
  void WaitCopyFinished();
  // Waits until CopyIn has returned and, for a tracked copy, Finish() was
  // called; returns the copy's outcome (a failed finish's verdict included).
  Status WaitFinished();
  // A tracked copy's unit of `item` landed; the item is whole after its last.
  void UnitCopied(uint32_t item);
  void ItemsCopied(const std::vector<uint32_t>& items);
  void ReleaseFrom(uint64_t slab);
  // Calls f(pointer, length) for the staged bytes of the chunk at order_[k],
  // slab by slab.
  template <typename F>
  void ForEachPiece(size_t k, F f);

  StagingArena& arena_;
  std::vector<StagedItem> items_;
  std::vector<std::vector<ChunkRef>> chunks_;  // per item
  std::vector<ObjectPlan> objects_;
  std::vector<ChunkPlan> order_;
  std::vector<CopyUnit> units_;
  // Units of one source item must run in order on one thread: a task is a
  // range of units.
  std::vector<std::pair<size_t, size_t>> tasks_;
  uint64_t total_bytes_ = 0;
  uint64_t object_bytes_ = 0;  // the layout's object size limit
  uint64_t slab_count_ = 0;
  uint64_t first_seq_ = 0;
  size_t align_ = 1;

  bool has_async_ = false;
  struct StartedCopy {
    uint64_t slab;
    uint64_t bytes;
  };
  std::vector<StartedCopy> started_;  // by StartAsyncCopies, not yet marked filled
  std::vector<AsyncItemSource*> async_sources_;  // distinct, to wait on

  std::unique_ptr<std::atomic<uint64_t>[]> unfilled_;  // per slab
  std::mutex mu_;
  std::condition_variable filled_cv_;
  bool copy_finished_ = false;
  std::chrono::steady_clock::time_point copy_finished_at_;
  std::atomic<bool> failed_{false};
  Status copy_status_;
  // Tracked copies only (TrackItems): units not yet copied per item, whether
  // each item is whole (under mu_), and the finish.
  bool tracked_ = false;
  std::unique_ptr<std::atomic<uint32_t>[]> units_left_;
  std::vector<char> item_copied_;
  bool finished_ = false;
};

}  // namespace sluice

#endif  // SLUICE_PIPELINE_STAGED_IMAGE_H_
