// io_uring implementation of IoEngine. This is the only file that includes
// <liburing.h>.
#include <liburing.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "io/io_engine.h"

namespace sluice {
namespace {

std::string Describe(const IoRequest& r) {
  return std::string(r.write ? "write" : "read") + " of " + std::to_string(r.len) +
         " bytes at offset " + std::to_string(r.offset);
}

class UringEngine final : public IoEngine {
 public:
  explicit UringEngine(unsigned depth) : depth_(depth), slots_(depth) {
    for (unsigned i = 0; i < depth; ++i) free_.push_back(depth - 1 - i);
  }
  ~UringEngine() override {
    if (!initialized_) return;
    // Drain what is still in flight so the kernel never writes into freed
    // caller buffers after we return.
    while (in_flight_ > 0 && poisoned_.ok()) {
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(&ring_, &cqe) < 0) break;
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
    }
    io_uring_queue_exit(&ring_);
  }

  Status Init() {
    int rc = io_uring_queue_init(depth_, &ring_, 0);
    if (rc < 0) return Status::FromErrno(-rc, "io_uring_queue_init");
    initialized_ = true;
    return Status::OK();
  }

  Status Submit(const IoRequest& req) override {
    if (!poisoned_.ok()) return poisoned_;
    if (free_.empty()) return Status::InvalidArgument("io_uring queue full");
    unsigned slot = free_.back();
    free_.pop_back();
    slots_[slot] = Slot{req, 0};
    Status st = Queue(slot);
    if (!st.ok()) {
      free_.push_back(slot);
      return st;
    }
    ++in_flight_;
    return Status::OK();
  }

  Result<IoResult> Reap() override {
    IoResult out;
    bool got = false;
    RETURN_IF_ERROR(ReapWithin(nullptr, &out, &got));
    return out;
  }

  Result<std::optional<IoResult>> ReapUntil(std::chrono::steady_clock::time_point deadline) override {
    IoResult out;
    bool got = false;
    RETURN_IF_ERROR(ReapWithin(&deadline, &out, &got));
    if (!got) return std::optional<IoResult>();
    return std::optional<IoResult>(std::move(out));
  }

  size_t in_flight() const override { return in_flight_; }
  size_t queue_depth() const override { return depth_; }
  std::string name() const override { return "io_uring"; }

 private:
  // Reap, waiting no later than *deadline where one is given: *got says
  // whether *out holds a completion.
  Status ReapWithin(const std::chrono::steady_clock::time_point* deadline, IoResult* out, bool* got) {
    // (A timed wait may enter the ring to submit, on kernels before 5.11:
    // never once the engine is done, see Queue.)
    if (!poisoned_.ok()) return poisoned_;
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      int rc = 0;
      if (deadline == nullptr) {
        rc = io_uring_wait_cqe(&ring_, &cqe);
      } else {
        auto left = *deadline - std::chrono::steady_clock::now();
        if (left < std::chrono::steady_clock::duration::zero()) left = std::chrono::steady_clock::duration::zero();
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
        __kernel_timespec ts{};
        ts.tv_sec = ns / 1'000'000'000;
        ts.tv_nsec = ns % 1'000'000'000;
        rc = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
        if (rc == -ETIME) return Status::OK();
      }
      if (rc == -EINTR) continue;
      if (rc < 0) {
        // The ring itself failed: no completion can be had. Count what was
        // in flight as lost so callers' drain loops end; the destructor
        // tears the ring down before their buffers are freed.
        poisoned_ = Status::FromErrno(-rc, "io_uring_wait_cqe");
        in_flight_ = 0;
        return poisoned_;
      }
      unsigned slot = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
      int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      Slot& s = slots_[slot];
      IoResult done;
      done.tag = s.req.tag;
      if (res == -EINTR || res == -EAGAIN) {
        if (Status st = Queue(slot); st.ok()) continue;  // retry the remainder
        else done.status = st;
      } else if (res < 0) {
        done.status = Status::FromErrno(-res, Describe(s.req));
      } else {
        s.done += static_cast<size_t>(res);
        bool eof = (res == 0);
        if (s.done < s.req.len && !eof) {
          // Short transfer: resubmit the rest.
          Status st = Queue(slot);
          if (st.ok()) continue;
          done.status = st;
        } else if (eof && s.req.write) {
          done.status = Status::IOError(Describe(s.req) + ": device accepted no bytes");
        }
      }
      done.bytes = s.done;
      free_.push_back(slot);
      --in_flight_;
      *out = std::move(done);
      *got = true;
      return Status::OK();
    }
  }

  struct Slot {
    IoRequest req;
    size_t done = 0;
  };

  Status Queue(unsigned slot) {
    Slot& s = slots_[slot];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return Status::IOError("io_uring submission queue full");
    auto* buf = static_cast<char*>(s.req.buf) + s.done;
    unsigned len = static_cast<unsigned>(s.req.len - s.done);
    if (s.req.write) {
      io_uring_prep_write(sqe, s.req.fd, buf, len, s.req.offset + s.done);
    } else {
      io_uring_prep_read(sqe, s.req.fd, buf, len, s.req.offset + s.done);
    }
    io_uring_sqe_set_data64(sqe, slot);
    for (;;) {
      int rc = io_uring_submit(&ring_);
      if (rc >= 0) return Status::OK();
      if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) continue;
      // The SQE stays in the ring, unsubmitted. Never enter the ring to
      // submit again, or it would go out later against a buffer its owner
      // has reused: the engine is done.
      poisoned_ = Status::FromErrno(-rc, "io_uring_submit");
      return poisoned_;
    }
  }

  unsigned depth_;
  bool initialized_ = false;
  Status poisoned_;  // set once the ring is unusable
  io_uring ring_{};
  std::vector<Slot> slots_;
  std::vector<unsigned> free_;
  size_t in_flight_ = 0;
};

}  // namespace

Result<std::unique_ptr<IoEngine>> MakeUringEngine(unsigned queue_depth) {
  auto engine = std::make_unique<UringEngine>(queue_depth);
  RETURN_IF_ERROR(engine->Init());
  return std::unique_ptr<IoEngine>(std::move(engine));
}

}  // namespace sluice
