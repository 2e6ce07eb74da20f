// IoEngine over a small pool of threads doing pread/pwrite: the fallback
// where io_uring is refused.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "io/io_engine.h"

namespace sluice {
namespace {

class ThreadEngine final : public IoEngine {
 public:
  explicit ThreadEngine(unsigned depth) : depth_(depth) {
    unsigned threads = std::clamp(depth, 1u, 4u);
    for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
  }
  ~ThreadEngine() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  Status Submit(const IoRequest& req) override {
    if (in_flight_ >= depth_) return Status::InvalidArgument("thread I/O queue full");
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(req);
    }
    ++in_flight_;
    work_cv_.notify_one();
    return Status::OK();
  }

  Result<IoResult> Reap() override {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return !completed_.empty(); });
    IoResult c = std::move(completed_.front());
    completed_.pop_front();
    --in_flight_;
    return c;
  }

  Result<std::optional<IoResult>> ReapUntil(std::chrono::steady_clock::time_point deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!done_cv_.wait_until(lock, deadline, [this] { return !completed_.empty(); })) {
      return std::optional<IoResult>();
    }
    IoResult c = std::move(completed_.front());
    completed_.pop_front();
    --in_flight_;
    return std::optional<IoResult>(std::move(c));
  }

  size_t in_flight() const override { return in_flight_; }
  size_t queue_depth() const override { return depth_; }
  std::string name() const override { return "threads"; }

 private:
  static IoResult Run(const IoRequest& r) {
    IoResult c;
    c.tag = r.tag;
    auto* p = static_cast<char*>(r.buf);
    size_t done = 0;
    while (done < r.len) {
      ssize_t n = r.write ? pwrite(r.fd, p + done, r.len - done, r.offset + done)
                          : pread(r.fd, p + done, r.len - done, r.offset + done);
      if (n < 0) {
        if (errno == EINTR) continue;
        c.status = Status::FromErrno(errno, std::string(r.write ? "pwrite" : "pread") + " of " +
                                                std::to_string(r.len) + " bytes at offset " +
                                                std::to_string(r.offset));
        break;
      }
      if (n == 0) {
        if (r.write) c.status = Status::IOError("pwrite accepted no bytes");
        break;  // end of file on read
      }
      done += static_cast<size_t>(n);
    }
    c.bytes = done;
    return c;
  }

  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping
      IoRequest r = pending_.front();
      pending_.pop_front();
      lock.unlock();
      IoResult c = Run(r);
      lock.lock();
      completed_.push_back(std::move(c));
      done_cv_.notify_one();
    }
  }

  unsigned depth_;
  size_t in_flight_ = 0;  // touched only by the owning thread
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<IoRequest> pending_;        // GUARDED_BY(mu_)
  std::deque<IoResult> completed_;   // GUARDED_BY(mu_)
  bool stop_ = false;                    // GUARDED_BY(mu_)
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<IoEngine> MakeThreadEngine(unsigned queue_depth) {
  return std::make_unique<ThreadEngine>(queue_depth);
}

}  // namespace sluice
