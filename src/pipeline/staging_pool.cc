#include "pipeline/staging_pool.h"

#include <algorithm>
#include <chrono>

namespace sluice {

Result<std::shared_ptr<StagingPool>> StagingPool::Open(const StagingPoolOptions& options) {
  // The budget against memory now; against the slab size at the first save.
  RETURN_IF_ERROR(StagingArena::CheckBudget(options.bytes, 4096));
  if (options.idle_release_seconds < 0) {
    return Status::InvalidArgument("a staging pool's idle_release_seconds cannot be negative");
  }
  return std::shared_ptr<StagingPool>(std::make_shared<StagingPoolImpl>(options));
}

StagingPoolImpl::StagingPoolImpl(const StagingPoolOptions& options) : opts_(options) {
  if (opts_.idle_release_seconds > 0) idle_thread_ = std::thread([this] { IdleLoop(); });
}

StagingPoolImpl::~StagingPoolImpl() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (idle_thread_.joinable()) idle_thread_.join();
  // Every pipeline that used the arena is gone (each holds the pool).
  if (arena_ && opts_.on_freeing) opts_.on_freeing(arena_->base(), arena_->bytes());
}

Result<std::shared_ptr<StagingArena>> StagingPoolImpl::Acquire(uint64_t slab_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (arena_) {
    if (arena_->slab_bytes() != slab_bytes) {
      return Status::InvalidArgument(
          "the process's staging pool has slabs of " + std::to_string(arena_->slab_bytes()) +
          " bytes, and this store's I/O size needs " + std::to_string(slab_bytes) +
          ": use one io_bytes for every store of a process (or a pool per io_bytes)");
    }
    return arena_;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<StagingArena> made,
                   StagingArena::Create(opts_.bytes, slab_bytes, opts_.lock,
                                        StagingHugePages(opts_.huge_pages, opts_.bytes)));
  arena_ = std::move(made);
  if (opts_.on_allocated) {
    arena_->WaitAllTouched();  // told once faulted in (a driver pins it)
    opts_.on_allocated(arena_->base(), arena_->bytes());
  }
  return arena_;
}

uint64_t StagingPoolImpl::resident_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return arena_ && arena_->resident() ? arena_->bytes() : 0;
}

void StagingPoolImpl::KeepResident() {
  std::lock_guard<std::mutex> lock(mu_);
  keep_resident_ = true;
}

bool StagingPoolImpl::ReleaseIfIdle() { return ReleaseIfIdleFor(std::chrono::steady_clock::duration::zero()); }

bool StagingPoolImpl::ReleaseIfIdleFor(std::chrono::steady_clock::duration idle) {
  // Under mu_: KeepResident() (before a pin) cannot slip in between the
  // check and the release.
  std::lock_guard<std::mutex> lock(mu_);
  if (!arena_ || keep_resident_) return false;
  return arena_->ReleaseMemoryIfIdle(idle);
}

void StagingPoolImpl::IdleLoop() {
  const auto idle = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(opts_.idle_release_seconds));
  // Checked a few times per idle period, and at least every 10 s.
  const auto period = std::clamp<std::chrono::steady_clock::duration>(
      idle / 4, std::chrono::milliseconds(10), std::chrono::seconds(10));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    ReleaseIfIdleFor(idle);
    lock.lock();
  }
}

Result<std::shared_ptr<StagingArena>> ArenaForPipeline(const PipelineOptions& opts, uint64_t slab_bytes) {
  if (opts.staging_pool) return static_cast<StagingPoolImpl&>(*opts.staging_pool).Acquire(slab_bytes);
  ASSIGN_OR_RETURN(std::shared_ptr<StagingArena> arena,
                   StagingArena::Create(opts.staging_bytes, slab_bytes, opts.lock_staging, StagingHugePages(opts)));
  if (opts.on_staging_allocated) {
    arena->WaitAllTouched();  // told once faulted in (a driver pins it)
    opts.on_staging_allocated(arena->base(), arena->bytes());
  }
  return arena;
}

}  // namespace sluice
