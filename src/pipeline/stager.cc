#include "pipeline/stager.h"

#include <algorithm>

namespace sluice {

uint64_t CopyTurns::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_++;
}

void CopyTurns::Wait(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return serving_ == ticket; });
}

void CopyTurns::End(uint64_t ticket) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    serving_ = ticket + 1;
  }
  cv_.notify_all();
}

void Stager::Copy(uint64_t ticket, std::function<void(CopyPool&)> copy, const std::shared_ptr<StagedImage>& image) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) {
      pool_ = std::make_unique<CopyPool>(threads_);
      thread_ = std::thread([this] { Loop(); });
    }
    copies_.push_back(Queued{ticket, std::move(copy)});
    unfinished_.erase(std::remove_if(unfinished_.begin(), unfinished_.end(),
                                   [](const std::weak_ptr<StagedImage>& w) { return w.expired(); }),
                    unfinished_.end());
    unfinished_.push_back(image);
  }
  cv_.notify_all();
}

void Stager::Close() {
  std::vector<std::weak_ptr<StagedImage>> unfinished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    unfinished.swap(unfinished_);
  }
  // Finished first: a queued copy may be waiting for slabs that only the
  // writer frees, and the writer for an earlier image's finish. A caller's
  // finish, if it already came, is the one that counts.
  for (auto& weak : unfinished) {
    if (auto image = weak.lock()) {
      image->Finish(Status::Unavailable("the pipeline closed before the lazy snapshot was finished"));
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Stager::Loop() {
  for (;;) {
    Queued next;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return closing_ || !copies_.empty(); });
      if (copies_.empty()) return;  // closing, nothing left
      next = std::move(copies_.front());
      copies_.pop_front();
    }
    turns_.Wait(next.ticket);
    next.copy(*pool_);
    turns_.End(next.ticket);
  }
}

}  // namespace sluice
