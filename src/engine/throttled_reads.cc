#include "engine/throttled_reads.h"

#include <atomic>
#include <utility>

#include "sluice/backend_wrapper.h"

namespace sluice {
namespace {

class ThrottledReadable final : public ReadableObjectWrapper {
 public:
  ThrottledReadable(std::unique_ptr<ReadableObject> target, std::shared_ptr<TokenBucket> bucket,
                    const std::atomic<bool>* stop)
      : ReadableObjectWrapper(std::move(target)), bucket_(std::move(bucket)), stop_(stop) {}
  ~ThrottledReadable() override {
    // Reads the owner never reaped still hold their slots.
    for (size_t i = 0; i < held_; ++i) bucket_->Release();
  }

  Status StartRead(uint64_t offset, void* buf, size_t len, uint64_t tag) override {
    if (!bucket_->Acquire(len, stop_)) return Status::Unavailable("stopped");
    Status st = ReadableObjectWrapper::StartRead(offset, buf, len, tag);
    if (st.ok()) {
      ++held_;
    } else {
      bucket_->Release();
    }
    return st;
  }
  Result<IoCompletion> Reap() override {
    auto c = ReadableObjectWrapper::Reap();
    if (c.ok() && held_ > 0) {
      --held_;
      bucket_->Release();
    }
    return c;
  }

 private:
  std::shared_ptr<TokenBucket> bucket_;
  const std::atomic<bool>* stop_;
  size_t held_ = 0;
};

class ThrottledReads final : public BackendWrapper {
 public:
  ThrottledReads(std::unique_ptr<Backend> target, std::shared_ptr<TokenBucket> bucket)
      : BackendWrapper(std::move(target)), bucket_(std::move(bucket)) {}
  ThrottledReads(Backend& borrowed, std::shared_ptr<TokenBucket> bucket, const std::atomic<bool>* stop)
      : BackendWrapper(borrowed), bucket_(std::move(bucket)), stop_(stop) {}

  Result<std::unique_ptr<ReadableObject>> Open(const std::string& name, const OpenOptions& options) override {
    auto o = BackendWrapper::Open(name, options);
    if (!o.ok()) return o.status();
    return std::unique_ptr<ReadableObject>(new ThrottledReadable(std::move(o).value(), bucket_, stop_));
  }

 private:
  std::shared_ptr<TokenBucket> bucket_;
  const std::atomic<bool>* stop_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> NewThrottledReads(Backend& borrowed, std::shared_ptr<TokenBucket> bucket,
                                           const std::atomic<bool>* stop) {
  return std::make_unique<ThrottledReads>(borrowed, std::move(bucket), stop);
}

std::unique_ptr<Backend> NewThrottledReads(std::unique_ptr<Backend> target,
                                           std::shared_ptr<TokenBucket> bucket) {
  return std::make_unique<ThrottledReads>(std::move(target), std::move(bucket));
}

}  // namespace sluice
