#include "pipeline/maintenance.h"

#include <chrono>
#include <utility>

#include "sluice/maintenance.h"
#include "pipeline/scrub.h"

namespace sluice {

Maintenance::Maintenance(std::vector<Backend*> tiers, const PipelineOptions& options, std::function<bool()> busy)
    : tiers_(std::move(tiers)), options_(options), busy_(std::move(busy)) {}

void Maintenance::Start() {
  if (thread_.joinable()) return;
  if (options_.scrub_rate_bytes_per_sec > 0 || (options_.rebuild_rate_bytes_per_sec > 0 && tiers_.size() > 1)) {
    thread_ = std::thread([this] { Run(); });
  }
}

Maintenance::~Maintenance() { Stop(); }

void Maintenance::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);  // a waiter between its check and its wait sees the flag
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Maintenance::Wake() { cv_.notify_all(); }

void Maintenance::WaitWhileBusy() {
  std::unique_lock<std::mutex> lock(mu_);
  // Polled as well as woken: `busy` reads the pipeline's state under its own lock.
  while (!stop_ && busy_()) cv_.wait_for(lock, std::chrono::milliseconds(200));
}

void Maintenance::Run() {
  if (options_.rebuild_rate_bytes_per_sec > 0 && tiers_.size() > 1 && TierLooksLost(tiers_, 0)) {
    RebuildOptions r;
    r.target = 0;
    r.keep_last = options_.rebuild_keep_last;
    r.rate_bytes_per_sec = options_.rebuild_rate_bytes_per_sec;
    r.store = options_.store;
    r.stop = &stop_;
    (void)Rebuild(tiers_, r);  // what it did shows in ls; a step it missed, the next pipeline copies
  }
  if (options_.scrub_rate_bytes_per_sec == 0) return;
  for (;;) {
    ScrubOptions s;
    s.rate_bytes_per_sec = options_.scrub_rate_bytes_per_sec;
    s.store = options_.store;
    s.stop = &stop_;
    s.yield = [this] { WaitWhileBusy(); };
    (void)Scrub(tiers_, s);  // results land in each tier's scrub/status; a tier another scrub holds is its own
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::milliseconds(options_.scrub_interval_ms), [this] { return stop_.load(); })) {
      return;
    }
  }
}

}  // namespace sluice
