#include "pipeline/stager.h"

#include <algorithm>

namespace sluice {

void Stager::Copy(std::function<void(CopyPool&)> copy, const std::shared_ptr<StagedImage>& image) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) {
      pool_ = std::make_unique<CopyPool>(threads_);
      thread_ = std::thread([this] { Loop(); });
    }
    copies_.push_back(std::move(copy));
    unsealed_.erase(std::remove_if(unsealed_.begin(), unsealed_.end(),
                                   [](const std::weak_ptr<StagedImage>& w) { return w.expired(); }),
                    unsealed_.end());
    unsealed_.push_back(image);
  }
  cv_.notify_all();
}

void Stager::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::vector<std::weak_ptr<StagedImage>> unsealed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    unsealed.swap(unsealed_);
  }
  for (auto& weak : unsealed) {
    if (auto image = weak.lock()) {
      image->Seal(Status::Unavailable("the pipeline closed before the lazy snapshot was sealed"));
    }
  }
}

void Stager::Loop() {
  for (;;) {
    std::function<void(CopyPool&)> copy;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return closing_ || !copies_.empty(); });
      if (copies_.empty()) return;  // closing, nothing left
      copy = std::move(copies_.front());
      copies_.pop_front();
    }
    std::lock_guard<std::mutex> one_copy_at_a_time(copy_mu_);
    copy(*pool_);
  }
}

}  // namespace sluice
