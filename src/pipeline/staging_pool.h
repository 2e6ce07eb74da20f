// StagingPoolImpl: the StagingPool of include/sluice/pipeline.h. Holds one
// StagingArena, made at the first Acquire() with that caller's slab size,
// and a thread that gives the arena's memory back after
// idle_release_seconds without a save.
//
// Thread-safety: thread-safe.
#ifndef SLUICE_PIPELINE_STAGING_POOL_H_
#define SLUICE_PIPELINE_STAGING_POOL_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "pipeline/staging_arena.h"
#include "sluice/pipeline.h"

namespace sluice {

class StagingPoolImpl final : public StagingPool {
 public:
  explicit StagingPoolImpl(const StagingPoolOptions& options);
  ~StagingPoolImpl() override;

  uint64_t bytes() const override { return opts_.bytes; }
  uint64_t resident_bytes() const override;
  void KeepResident() override;
  bool ReleaseIfIdle() override;

  // The pool's arena, made now if it is not yet (InvalidArgument if it was
  // made with slabs of another size than `slab_bytes`).
  Result<std::shared_ptr<StagingArena>> Acquire(uint64_t slab_bytes);

 private:
  bool ReleaseIfIdleFor(std::chrono::steady_clock::duration idle);
  void IdleLoop();

  const StagingPoolOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;            // GUARDED_BY(mu_)
  bool keep_resident_ = false;       // GUARDED_BY(mu_)
  std::shared_ptr<StagingArena> arena_;  // GUARDED_BY(mu_)
  std::thread idle_thread_;
};

// The staging arena a pipeline of `opts` saves through: its pool's when it
// has one, else its own (faulted in and handed to on_staging_allocated
// before this returns, when that is set).
Result<std::shared_ptr<StagingArena>> ArenaForPipeline(const PipelineOptions& opts, uint64_t slab_bytes);

}  // namespace sluice

#endif  // SLUICE_PIPELINE_STAGING_POOL_H_
