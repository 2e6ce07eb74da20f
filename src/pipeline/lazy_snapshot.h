// LazySnapshotImpl: the LazySnapshot of one save (include/sluice/pipeline.h),
// over the staged image whose copy the pipeline's stager thread runs.
//
// Thread-safety: thread-safe.
#ifndef SLUICE_PIPELINE_LAZY_SNAPSHOT_H_
#define SLUICE_PIPELINE_LAZY_SNAPSHOT_H_

#include <chrono>
#include <memory>
#include <vector>

#include "pipeline/save_handle.h"
#include "pipeline/staged_image.h"
#include "sluice/pipeline.h"

namespace sluice {

class LazySnapshotImpl final : public LazySnapshot {
 public:
  // `image` was planned with TrackItems(); its copy has been queued.
  LazySnapshotImpl(std::shared_ptr<HandleImpl> handle, std::shared_ptr<StagedImage> image)
      : handle_(std::move(handle)), image_(std::move(image)), start_(std::chrono::steady_clock::now()) {}
  // Waits for the copy: the caller's buffers may go once this returns.
  ~LazySnapshotImpl() override {
    image_->Finish(Status::Unavailable("the lazy snapshot was dropped before it was finished"));
    (void)image_->WaitCopied();
  }

  std::shared_ptr<SaveHandle> handle() const override { return handle_; }
  Status WaitItems(const std::vector<uint32_t>& items) override { return image_->WaitItems(items); }
  Status WaitAll() override { return image_->WaitCopied(); }
  bool copy_done() const override { return image_->CopyFinished(); }
  double copy_seconds() const override {
    if (!image_->CopyFinished()) return 0;
    return std::chrono::duration<double>(image_->CopyFinishedAt() - start_).count();
  }
  void Finish(const Status& verdict) override { image_->Finish(verdict); }

 private:
  const std::shared_ptr<HandleImpl> handle_;
  const std::shared_ptr<StagedImage> image_;
  const std::chrono::steady_clock::time_point start_;
};

}  // namespace sluice

#endif  // SLUICE_PIPELINE_LAZY_SNAPSHOT_H_
