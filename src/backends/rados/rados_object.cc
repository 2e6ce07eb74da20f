#include "backends/rados/rados_object.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "io/crc32c.h"

namespace sluice {

Status RadosError(int ret, const std::string& what) {
  int err = ret < 0 ? -ret : ret;
  switch (err) {
    case ENOTCONN:
    case ECONNRESET:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ESHUTDOWN:
      return Status::Unavailable(what + ": " + std::strerror(err));
    case EACCES:
    case EPERM:
      return Status::IOError(what + ": " + std::strerror(err) +
                             " (cephx refused: check the key and the client's caps)");
    default:
      return Status::FromErrno(err, what);
  }
}

namespace {


// Asynchronous operations of one object and their completions. librados
// calls OnComplete on its finisher thread; the owner thread reaps.
class AioQueue {
 public:
  struct Op {
    AioQueue* queue = nullptr;
    uint64_t tag = 0;
    uint64_t offset = 0;
    size_t len = 0;
    void* read_into = nullptr;  // reads: the caller's buffer, filled at reap
    librados::bufferlist bl;
    librados::ObjectReadOperation read_op;  // reads: kept until the reap, as it names `bl`
    librados::AioCompletion* completion = nullptr;
  };

  AioQueue(std::shared_ptr<Cluster> cluster, std::string oid, std::string name, size_t depth)
      : cluster_(std::move(cluster)), oid_(std::move(oid)), name_(std::move(name)), depth_(depth) {}

  // Waits out whatever is in flight: librados must not complete into freed
  // memory. Each operation is bounded by the op timeout.
  ~AioQueue() {
    while (in_flight_ > 0) (void)Reap();
  }

  Status StartWrite(uint64_t offset, const void* data, size_t len, uint64_t tag) {
    if (len > UINT32_MAX) return Status::InvalidArgument("write of " + std::to_string(len) + " bytes");
    auto op = NewOp(tag, offset, len);
    // No copy: the caller keeps `data` valid and unchanged until the reap.
    // The bytes go out as the pieces Checksum() saw, each carrying its
    // cached crc, and fresh pieces for whatever lies between them.
    char* at = static_cast<char*>(const_cast<void*>(data));
    char* const end = at + len;
    std::sort(summed_.begin(), summed_.end(),
              [](const ceph::bufferptr& a, const ceph::bufferptr& b) { return a.c_str() < b.c_str(); });
    for (ceph::bufferptr& piece : summed_) {
      char* begin = piece.c_str();
      if (begin < at || begin + piece.length() > end) continue;  // not (wholly) this write's
      if (begin > at) op->bl.push_back(ceph::buffer::create_static(static_cast<unsigned>(begin - at), at));
      at = begin + piece.length();
      op->bl.push_back(std::move(piece));
    }
    summed_.clear();
    if (at < end) op->bl.push_back(ceph::buffer::create_static(static_cast<unsigned>(end - at), at));
    int ret = cluster_->io.aio_write(oid_, op->completion, op->bl, len, offset);
    return Submit(std::move(op), ret, "write");
  }

  // The messenger checksums each message's data (crc32c, seed -1) by
  // bufferlist::crc32c, which caches the crc of every buffer piece it hashes
  // and, asked again with another seed, adjusts the cached value in O(log n)
  // instead of rehashing. Computing the caller's checksum through the same
  // call on the piece that will be sent makes the messenger's a lookup.
  // Pieces too small to be worth a buffer of their own are hashed directly.
  uint32_t Checksum(uint32_t crc, const void* data, size_t len) {
    if (len < kMinSummedPieceBytes || len > UINT32_MAX) return Crc32cExtend(crc, data, len);
    ceph::bufferptr piece =
        ceph::buffer::create_static(static_cast<unsigned>(len), static_cast<char*>(const_cast<void*>(data)));
    librados::bufferlist bl;
    bl.push_back(piece);  // shares the piece's buffer, and so its crc cache
    // bufferlist::crc32c is the raw register: Crc32cExtend(c, x) = ~raw(~c, x).
    uint32_t out = ~bl.crc32c(~crc);
    summed_.push_back(std::move(piece));
    return out;
  }

  Status StartRead(uint64_t offset, void* buf, size_t len, uint64_t tag) {
    auto op = NewOp(tag, offset, len);
    op->read_into = buf;
    // Any replica may serve it (librados balanced reads): data objects are
    // read once written and acknowledged, so every replica holds them, and
    // a slow OSD then delays a third of the reads of its placement groups,
    // not all those it is primary for. A replica that cannot serve a read
    // consistently (one being recovered) bounces it to the primary.
    op->read_op.read(offset, len, &op->bl, nullptr);
    int ret =
        cluster_->io.aio_operate(oid_, op->completion, &op->read_op, librados::OPERATION_BALANCE_READS, nullptr);
    return Submit(std::move(op), ret, "read");
  }

  Result<IoCompletion> Reap() {
    if (in_flight_ == 0) return Status::InvalidArgument("Reap with nothing in flight on " + name_);
    Op* raw = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      done_cv_.wait(lock, [&] { return !done_.empty(); });
      raw = done_.front();
      done_.pop_front();
    }
    return Take(raw);
  }

  Result<std::optional<IoCompletion>> ReapUntil(std::chrono::steady_clock::time_point deadline) {
    if (in_flight_ == 0) return Status::InvalidArgument("Reap with nothing in flight on " + name_);
    Op* raw = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!done_cv_.wait_until(lock, deadline, [&] { return !done_.empty(); })) return std::optional<IoCompletion>();
      raw = done_.front();
      done_.pop_front();
    }
    ASSIGN_OR_RETURN(IoCompletion c, Take(raw));
    return std::optional<IoCompletion>(std::move(c));
  }

 private:
  // The completion of `raw`, reaped.
  Result<IoCompletion> Take(Op* raw) {
    std::unique_ptr<Op> op(raw);
    --in_flight_;
    int ret = op->completion->get_return_value();
    op->completion->release();
    IoCompletion c;
    c.tag = op->tag;
    if (ret < 0) {
      c.status = RadosError(ret, std::string(op->read_into ? "read" : "write") + " object " + name_ + " at " +
                                     std::to_string(op->offset));
    } else if (op->read_into != nullptr) {
      // librados reads into buffers of its own messenger. Where the caller
      // allows it and the bytes arrived in one piece, they are lent as they
      // are; otherwise one copy into the caller's buffer.
      c.bytes = std::min<size_t>(op->bl.length(), op->len);
      if (lend_ && c.bytes > 0 && op->bl.get_num_buffers() == 1) {
        auto held = std::make_shared<librados::bufferlist>(std::move(op->bl));
        c.data = reinterpret_cast<const uint8_t*>(held->front().c_str());
        // bufferlist::crc32c is the raw (uninverted) CRC32C register and
        // caches per buffer range: the messenger computed it with seed -1 over
        // this very buffer when it checked the bytes on arrival, so this is a
        // lookup. Crc32c is the inverted register: ~raw(~0, bytes).
        // The function does not own the buffer (a caller that kept it would
        // keep every buffer it ever read): it is valid while `lent` is held.
        if (held->length() == c.bytes) {
          c.crc32c = [bl = held.get()] { return ~bl->crc32c(0xFFFFFFFFu); };
        }
        c.lent = std::move(held);
      } else {
        op->bl.begin().copy(static_cast<unsigned>(c.bytes), static_cast<char*>(op->read_into));
      }
    } else {
      c.bytes = op->len;
      written_end_ = std::max<uint64_t>(written_end_, op->offset + op->len);
    }
    if (ret < 0) any_failed_ = true;
    return c;
  }

 public:
  size_t in_flight() const { return in_flight_; }
  size_t queue_depth() const { return depth_; }
  void AllowLentBuffers() { lend_ = true; }
  // End of the furthest write reaped OK, and whether any operation failed.
  uint64_t written_end() const { return written_end_; }
  bool any_failed() const { return any_failed_; }
  const std::string& oid() const { return oid_; }
  const std::string& name() const { return name_; }
  librados::IoCtx& io() { return cluster_->io; }

 private:
  static void OnComplete(librados::completion_t, void* arg) {
    Op* op = static_cast<Op*>(arg);
    AioQueue* q = op->queue;
    std::lock_guard<std::mutex> lock(q->mu_);
    q->done_.push_back(op);
    // Notified under the lock: the owner cannot destroy the queue before
    // this returns, since it must take the lock to reap the last op.
    q->done_cv_.notify_one();
  }

  std::unique_ptr<Op> NewOp(uint64_t tag, uint64_t offset, size_t len) {
    auto op = std::make_unique<Op>();
    op->queue = this;
    op->tag = tag;
    op->offset = offset;
    op->len = len;
    op->completion = librados::Rados::aio_create_completion(op.get(), &AioQueue::OnComplete);
    return op;
  }

  Status Submit(std::unique_ptr<Op> op, int ret, const char* verb) {
    if (ret < 0) {
      op->completion->release();
      return RadosError(ret, std::string("start ") + verb + " of object " + name_ + " at " +
                                 std::to_string(op->offset));
    }
    ++in_flight_;
    (void)op.release();  // owned by the completion queue until reaped
    return Status::OK();
  }

  std::shared_ptr<Cluster> cluster_;
  std::string oid_;
  std::string name_;
  size_t depth_;
  size_t in_flight_ = 0;  // touched only by the owner thread, as are the next three
  bool lend_ = false;
  uint64_t written_end_ = 0;
  bool any_failed_ = false;
  std::mutex mu_;
  std::condition_variable done_cv_;
  std::deque<Op*> done_;  // GUARDED_BY(mu_)
  // Pieces checksummed for the next write, owner thread only.
  std::vector<ceph::bufferptr> summed_;
};

class RadosWritable final : public RadosChecksummingWritable {
 public:
  RadosWritable(std::shared_ptr<Cluster> cluster, std::string oid, std::string name, size_t depth)
      : aio_(std::move(cluster), std::move(oid), std::move(name), depth) {}

  Status StartWrite(uint64_t offset, const void* data, size_t len, uint64_t tag) override {
    return aio_.StartWrite(offset, data, len, tag);
  }
  uint32_t ChecksumForWrite(uint32_t crc, const void* data, size_t len) override {
    return aio_.Checksum(crc, data, len);
  }
  Result<IoCompletion> Reap() override { return aio_.Reap(); }
  Result<std::optional<IoCompletion>> ReapUntil(std::chrono::steady_clock::time_point deadline) override {
    return aio_.ReapUntil(deadline);
  }
  size_t in_flight() const override { return aio_.in_flight(); }
  size_t queue_depth() const override { return aio_.queue_depth(); }

  // Acknowledged RADOS writes are durable on every replica already; only
  // the length is left to set.
  Status Finish(uint64_t final_size) override {
    if (aio_.in_flight() != 0) return Status::InvalidArgument("Finish with I/O in flight");
    // The object was created empty and every write succeeded, so it is
    // exactly written_end() bytes long. Skipping the truncate saves a round
    // trip, and a truncate to exactly osd_max_object_size is refused (EFBIG)
    // even though writes up to it are not.
    if (!aio_.any_failed() && aio_.written_end() == final_size) return Status::OK();
    librados::ObjectWriteOperation op;
    op.assert_exists();
    op.truncate(final_size);
    int ret = aio_.io().operate(aio_.oid(), &op);
    if (ret < 0) return RadosError(ret, "truncate object " + aio_.name() + " to " + std::to_string(final_size));
    return Status::OK();
  }

  Status Discard() override {
    if (aio_.in_flight() != 0) return Status::InvalidArgument("Discard with I/O in flight");
    int ret = aio_.io().remove(aio_.oid());
    if (ret < 0 && ret != -ENOENT) return RadosError(ret, "remove object " + aio_.name());
    return Status::OK();
  }

 private:
  AioQueue aio_;
};

class RadosReadable final : public ReadableObject {
 public:
  RadosReadable(std::shared_ptr<Cluster> cluster, std::string oid, std::string name, size_t depth,
                uint64_t size)
      : aio_(std::move(cluster), std::move(oid), std::move(name), depth), size_(size) {}

  uint64_t size() const override { return size_; }
  Status StartRead(uint64_t offset, void* buf, size_t len, uint64_t tag) override {
    return aio_.StartRead(offset, buf, len, tag);
  }
  Result<IoCompletion> Reap() override { return aio_.Reap(); }
  size_t in_flight() const override { return aio_.in_flight(); }
  size_t queue_depth() const override { return aio_.queue_depth(); }
  void AllowLentBuffers() { aio_.AllowLentBuffers(); }

 private:
  AioQueue aio_;
  uint64_t size_;
};

class RadosTransportChecksum final : public TransportChecksum {
 public:
  uint32_t ChecksumForWrite(WritableObject& object, uint32_t crc, const void* data,
                            size_t len) const override {
    if (auto* w = dynamic_cast<RadosChecksummingWritable*>(&object)) return w->ChecksumForWrite(crc, data, len);
    return Crc32cExtend(crc, data, len);
  }
};

class RadosLentReadBuffers final : public LentReadBuffers {
 public:
  void Allow(ReadableObject& object) const override {
    if (auto* r = dynamic_cast<RadosReadable*>(&object)) r->AllowLentBuffers();
  }
};

const RadosTransportChecksum kRadosTransportChecksum;
const RadosLentReadBuffers kRadosLentReadBuffers;

}  // namespace

std::unique_ptr<WritableObject> NewRadosWritable(std::shared_ptr<Cluster> cluster, std::string oid,
                                                 std::string name, size_t depth) {
  return std::make_unique<RadosWritable>(std::move(cluster), std::move(oid), std::move(name), depth);
}

std::unique_ptr<ReadableObject> NewRadosReadable(std::shared_ptr<Cluster> cluster, std::string oid,
                                                 std::string name, size_t depth, uint64_t size) {
  return std::make_unique<RadosReadable>(std::move(cluster), std::move(oid), std::move(name), depth, size);
}

void HintDataObject(librados::ObjectWriteOperation* op, uint64_t object_bytes) {
  constexpr uint64_t kExpectedWriteBytes = 4ull << 20;  // StoreOptions::io_bytes' default
  op->set_alloc_hint2(object_bytes, kExpectedWriteBytes,
                      librados::ALLOC_HINT_FLAG_SEQUENTIAL_WRITE | librados::ALLOC_HINT_FLAG_SEQUENTIAL_READ |
                          librados::ALLOC_HINT_FLAG_APPEND_ONLY | librados::ALLOC_HINT_FLAG_IMMUTABLE);
}

const TransportChecksum* RadosTransportChecksumExtension() { return &kRadosTransportChecksum; }
const LentReadBuffers* RadosLentReadBuffersExtension() { return &kRadosLentReadBuffers; }

}  // namespace sluice
