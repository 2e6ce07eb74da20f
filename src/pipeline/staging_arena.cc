#include "pipeline/staging_arena.h"

#include "engine/loser_reaper.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace sluice {
namespace {

constexpr uint64_t kHugePage = 2ull << 20;

// "512 MiB", "100 TiB", "23.5 GiB": the largest binary unit the size reaches.
std::string Mib(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (u < 5 && v >= 1024) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, v == static_cast<double>(static_cast<uint64_t>(v)) ? "%.0f %s" : "%.1f %s", v,
                kUnits[u]);
  return buf;
}

}  // namespace

Status StagingArena::CheckBudget(uint64_t bytes, uint64_t slab_bytes) {
  if (slab_bytes == 0 || slab_bytes % 4096 != 0) {
    return Status::InvalidArgument("staging slab size " + std::to_string(slab_bytes) +
                                   " is not a positive multiple of 4096");
  }
  if (bytes < slab_bytes) {
    return Status::InvalidArgument("staging budget of " + std::to_string(bytes) +
                                   " bytes is smaller than one I/O buffer (" + Mib(slab_bytes) +
                                   ")");
  }
  const uint64_t phys = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                        static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (phys > 0 && bytes > phys / 10 * 8) {
    return Status::InvalidArgument("staging budget of " + Mib(bytes) +
                                   " is over 80% of this machine's " + Mib(phys) + " of memory");
  }
  return Status::OK();
}

Result<std::unique_ptr<StagingArena>> StagingArena::Create(uint64_t bytes, uint64_t slab_bytes,
                                                           bool lock, bool huge_pages) {
  RETURN_IF_ERROR(CheckBudget(bytes, slab_bytes));
  std::unique_ptr<StagingArena> a(new StagingArena());
  a->slab_bytes_ = slab_bytes;
  a->slab_count_ = bytes / slab_bytes;
  const uint64_t usable = a->slab_count_ * slab_bytes;
  // Over-map by one huge page so the arena can start on a huge-page
  // boundary, which THP needs to back it with 2 MiB pages.
  a->map_bytes_ = static_cast<size_t>(usable + (huge_pages ? kHugePage : 0));
  void* p = mmap(nullptr, a->map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    a->map_bytes_ = 0;
    return Status::FromErrno(errno, "allocate staging arena of " + Mib(usable));
  }
  a->map_ = static_cast<uint8_t*>(p);
  a->base_ = a->map_;
  if (huge_pages) {
    uintptr_t u = reinterpret_cast<uintptr_t>(a->map_);
    a->base_ = reinterpret_cast<uint8_t*>((u + kHugePage - 1) / kHugePage * kHugePage);
    a->huge_ = madvise(a->base_, usable, MADV_HUGEPAGE) == 0;
  }
  a->released_.assign(a->slab_count_, -1);
  if (lock) {
    // mlock faults every page in itself, at once.
    if (mlock(a->base_, usable) != 0) {
      return Status::FromErrno(errno, "lock the " + Mib(usable) +
                                          " staging arena in memory (mlock; needs "
                                          "CAP_IPC_LOCK or a higher RLIMIT_MEMLOCK)");
    }
    a->locked_ = true;
    a->touched_slabs_ = a->slab_count_;
    return a;
  }
  // Every page is faulted in once, by touching it, on a thread of its own,
  // ahead of the copies into it. (MADV_POPULATE_WRITE on a THP region
  // measured 6-15x slower here: 1.8-4.3 s per 2 GiB against 0.28 s for
  // touching.)
  a->toucher_pid_ = getpid();
  a->toucher_ = std::thread([raw = a.get()] { raw->TouchSlabs(); });
  return a;
}

void StagingArena::TouchSlabs() {
  for (uint64_t slab = 0; slab < slab_count_; ++slab) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_touching_) break;
    }
    uint8_t* p = base_ + slab * slab_bytes_;
    for (uint64_t off = 0; off < slab_bytes_; off += 4096) p[off] = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      touched_slabs_ = slab + 1;
    }
    released_cv_.notify_all();
  }
  {
    // Stopped early or not, nothing writes zeros any more: every slab may
    // be filled (an untouched page faults in at its first write).
    std::lock_guard<std::mutex> lock(mu_);
    touched_slabs_ = slab_count_;
    toucher_done_ = true;
  }
  released_cv_.notify_all();
}

void StagingArena::WaitAllTouched() {
  std::unique_lock<std::mutex> lock(mu_);
  released_cv_.wait(lock, [&] { return touched_slabs_ >= slab_count_; });
}

StagingArena::~StagingArena() {
  if (toucher_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_touching_ = true;
    }
    if (toucher_pid_ == getpid()) {
      toucher_.join();
    } else {
      toucher_.detach();  // a forked child: the thread is its parent's
    }
  }
  // Losers of hedged writes may still read slabs (WriteQueueOptions::
  // buffers_stay_mapped).
  LoserReaper::Get().WaitIdle();
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

uint64_t StagingArena::Reserve(uint64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t first = next_seq_;
  next_seq_ += count;
  resident_ = true;
  last_reserve_ = std::chrono::steady_clock::now();
  return first;
}

bool StagingArena::ReleaseMemoryIfIdle(std::chrono::steady_clock::duration idle) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!resident_ || locked_ || std::chrono::steady_clock::now() - last_reserve_ < idle) return false;
  // Every sequence a slot may still hold has been written out.
  const uint64_t from = next_seq_ > slab_count_ ? next_seq_ - slab_count_ : 0;
  for (uint64_t seq = from; seq < next_seq_; ++seq) {
    if (released_[seq % slab_count_] < static_cast<int64_t>(seq)) return false;
  }
  // A hedge's loser may still be writing from a released slab.
  if (LoserReaper::Get().busy() > 0) return false;
  // The toucher stops first: it must not fault in what is given back.
  if (toucher_.joinable()) {
    stop_touching_ = true;
    released_cv_.wait(lock, [&] { return toucher_done_; });
  }
  // Reserve() waits on mu_ meanwhile, so no save writes into pages being dropped.
  if (madvise(base_, static_cast<size_t>(bytes()), MADV_DONTNEED) != 0) return false;
  resident_ = false;
  return true;
}

bool StagingArena::resident() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resident_;
}

void StagingArena::Release(uint64_t seq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t& r = released_[seq % slab_count_];
    r = std::max(r, static_cast<int64_t>(seq));
  }
  released_cv_.notify_all();
}

void StagingArena::Kick() {
  { std::lock_guard<std::mutex> lock(mu_); }
  released_cv_.notify_all();
}

}  // namespace sluice
