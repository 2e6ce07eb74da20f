// StagingArena: the host-memory region a snapshot is copied into, allocated
// and faulted once (optionally hugepage-backed and mlocked) and reused by
// every checkpoint, so no save pays first-touch page faults.
//
// The arena's pages are faulted in by a thread of its own, slab by slab in
// ring order, while the first save already fills and writes the slabs
// touched so far: a save's setup does not wait for the whole arena (0.1 s
// per 256 MiB in 4 KiB pages). A slab is filled only once touched (the
// toucher writes zeros).
//
// The arena is a ring of equal slabs (one backend write each). Every slab a
// checkpoint image uses gets a global sequence number; sequence s lives in
// slot s % slab_count() and may be filled once sequence s - slab_count() has
// been released (written to tier 0). Images larger than the arena therefore
// stream: their copy-in waits for the writer to free slots.
//
// Thread-safety: thread-safe.
#ifndef SLUICE_PIPELINE_STAGING_ARENA_H_
#define SLUICE_PIPELINE_STAGING_ARENA_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <sys/types.h>

#include "sluice/status.h"

namespace sluice {

class StagingArena {
 public:
  // `bytes` is rounded down to whole slabs of `slab_bytes` (a multiple of
  // 4096). InvalidArgument for a budget under one slab or over 80% of
  // physical memory; IOError if the memory cannot be had or locked.
  // The checks Create applies to a budget, without allocating anything.
  static Status CheckBudget(uint64_t bytes, uint64_t slab_bytes);
  static Result<std::unique_ptr<StagingArena>> Create(uint64_t bytes, uint64_t slab_bytes,
                                                      bool lock, bool huge_pages);
  ~StagingArena();
  StagingArena(const StagingArena&) = delete;
  StagingArena& operator=(const StagingArena&) = delete;

  uint64_t slab_bytes() const { return slab_bytes_; }
  uint64_t slab_count() const { return slab_count_; }
  uint64_t bytes() const { return slab_bytes_ * slab_count_; }
  bool huge_pages() const { return huge_; }
  bool locked() const { return locked_; }

  uint8_t* base() { return base_; }  // bytes() of them, contiguous
  uint8_t* SlabOf(uint64_t seq) { return base_ + (seq % slab_count_) * slab_bytes_; }

  // Reserves `count` consecutive sequence numbers; returns the first.
  uint64_t Reserve(uint64_t count);
  // Blocks until sequence `seq` may be filled, or `abandon()` turns true
  // (checked whenever a slot is released or Kick() is called): false then.
  // Also waits until the slab is touched (see above).
  template <typename F>
  bool WaitWritable(uint64_t seq, F abandon) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      const bool free = seq < slab_count_ || released_[seq % slab_count_] + static_cast<int64_t>(slab_count_) >=
                                                 static_cast<int64_t>(seq);
      if (free && (seq >= slab_count_ || seq < touched_slabs_)) return true;
      if (abandon()) return false;
      released_cv_.wait(lock);
    }
  }
  // Blocks until every slab is touched: for writers that bypass
  // WaitWritable (a device's DMA into several slabs at once).
  void WaitAllTouched();
  // Whether sequence `seq` may be filled now, without waiting.
  bool Writable(uint64_t seq) {
    std::lock_guard<std::mutex> lock(mu_);
    return seq < slab_count_ ||
           released_[seq % slab_count_] + static_cast<int64_t>(slab_count_) >= static_cast<int64_t>(seq);
  }
  // The slab of `seq` is free again.
  void Release(uint64_t seq);
  // Wakes every waiter to re-check its abandon condition.
  void Kick();

  // Gives the memory back to the kernel (MADV_DONTNEED: the mapping stays,
  // and pages fault in again as they are next written) when every reserved
  // slab is released, no hedge loser may still read one, nothing was
  // reserved for `idle`, and the arena is not locked. Returns whether it did.
  bool ReleaseMemoryIfIdle(std::chrono::steady_clock::duration idle);
  // Whether the memory is backed (faulted in at Create, or touched by a
  // save since the last release).
  bool resident() const;

 private:
  StagingArena() = default;

  uint8_t* map_ = nullptr;
  size_t map_bytes_ = 0;
  uint8_t* base_ = nullptr;
  uint64_t slab_bytes_ = 0;
  uint64_t slab_count_ = 0;
  bool huge_ = false;
  bool locked_ = false;

  mutable std::mutex mu_;
  std::condition_variable released_cv_;
  uint64_t next_seq_ = 0;
  bool resident_ = true;
  std::chrono::steady_clock::time_point last_reserve_ = std::chrono::steady_clock::now();
  std::vector<int64_t> released_;  // per slot: last sequence released there, -1 if none
  uint64_t touched_slabs_ = 0;     // slabs 0 .. touched_slabs_-1 are faulted in
  std::thread toucher_;
  pid_t toucher_pid_ = 0;          // a forked child has no toucher to join
  bool stop_touching_ = false;
  bool toucher_done_ = false;
  void TouchSlabs();
};

}  // namespace sluice

#endif  // SLUICE_PIPELINE_STAGING_ARENA_H_
