#include "pipeline/deferred_backend.h"

#include <chrono>
#include <mutex>

#include "sluice/backend_wrapper.h"
#include "sluice/maintenance.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

// A later tier that could not be opened yet (a cluster down, a mount
// missing): every call retries the open, at most once a second, so saves
// proceed on tier 0 and the drain to this tier retries until it is back.
// Until it opens, its caps are the conservative ones of the smallest
// backend (128 MiB objects), so data laid out meanwhile fits any tier.
class DeferredBackend final : public BackendWrapper {
 public:
  DeferredBackend(std::string uri, bool create, Status first_error)
      : uri_(std::move(uri)), create_(create), error_(std::move(first_error)) {
    fallback_caps_.io_alignment = 4096;
    fallback_caps_.max_object_bytes = 128ull << 20;
    fallback_caps_.atomic_publish_if_absent = true;
    fallback_caps_.io_path = "not open yet";
    last_try_ = Clock::now();
  }
  const BackendCaps& caps() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_ ? inner_->caps() : fallback_caps_;
  }
  const std::string& uri() const override { return uri_; }

 private:
  // Every other method forwards here (BackendWrapper), so each gets the
  // opened backend, extensions and all, once it opens.
  Result<Backend*> Target() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (inner_) return inner_.get();
    if (Clock::now() - last_try_ >= std::chrono::seconds(1)) {
      last_try_ = Clock::now();
      auto b = OpenBackend(uri_, create_);
      if (b.ok()) {
        inner_ = std::move(b).value();
        return inner_.get();
      }
      error_ = b.status();
    }
    return Status::Unavailable("store " + uri_ + " is not available: " + error_.message());
  }

  const std::string uri_;
  const bool create_;
  mutable std::mutex mu_;
  std::unique_ptr<Backend> inner_;
  Status error_;
  BackendCaps fallback_caps_;
  Clock::time_point last_try_;
};

}  // namespace

std::unique_ptr<Backend> NewDeferredBackend(std::string uri, bool create, Status first_error) {
  return std::make_unique<DeferredBackend>(std::move(uri), create, std::move(first_error));
}

Result<OpenedTiers> OpenTiersGoingOnWithoutFailed(const std::vector<std::string>& uris) {
  OpenedTiers out;
  Status first_error;
  size_t opened = 0;
  for (const auto& uri : uris) {
    auto backend = OpenBackend(uri, false);
    if (backend.ok()) {
      ++opened;
    } else {
      if (backend.status().code() == StatusCode::kInvalidArgument) return backend.status();
      if (first_error.ok()) first_error = backend.status();
      backend = NewDeferredBackend(uri, false, backend.status());
    }
    out.tiers.push_back(backend->get());
    out.owned.push_back(std::move(backend).value());
  }
  if (opened == 0 && !uris.empty()) return first_error;
  return out;
}

}  // namespace sluice
