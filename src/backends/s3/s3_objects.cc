#include "backends/s3/s3_objects.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/s3/s3_xml.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

// What the writer's thread and the client's thread share.
struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<IoCompletion> completions;
  size_t parts_in_flight = 0;
  std::map<unsigned, std::string> etags;  // part number -> ETag
  Status first_error;
};

// A piece of a part: a writer's buffer (completes with the part) or bytes
// copied out of one (completed already).
struct Piece {
  const uint8_t* data = nullptr;
  size_t len = 0;
  uint64_t tag = 0;
  std::shared_ptr<std::string> copy;  // set for copied bytes
};

class S3Writable final : public WritableObject {
 public:
  S3Writable(std::shared_ptr<S3Http> http, std::string key, std::string name)
      : http_(std::move(http)), key_(std::move(key)), name_(std::move(name)), shared_(std::make_shared<Shared>()) {}

  ~S3Writable() override {
    std::unique_lock<std::mutex> lock(shared_->mu);
    shared_->cv.wait(lock, [&] { return shared_->parts_in_flight == 0; });
    lock.unlock();
    if (!upload_id_.empty() && !finished_) (void)Abort();
  }

  Status StartWrite(uint64_t offset, const void* data, size_t len, uint64_t tag) override {
    if (finished_) return Status::InvalidArgument(name_ + ": write after Finish");
    if (offset != appended_) {
      return Status::InvalidArgument(name_ + ": s3 objects are written front to back (a write at " +
                                     std::to_string(offset) + ", expected " + std::to_string(appended_) + ")");
    }
    current_.push_back(Piece{static_cast<const uint8_t*>(data), len, tag, nullptr});
    current_bytes_ += len;
    appended_ += len;
    ++in_flight_;
    if (current_bytes_ >= http_->config().part_bytes) Dispatch();
    return Status::OK();
  }

  Result<IoCompletion> Reap() override {
    if (in_flight_ == 0) return Status::InvalidArgument(name_ + ": Reap with nothing in flight");
    IoCompletion c;
    Next(Clock::time_point::max(), &c);
    return c;
  }

  Result<std::optional<IoCompletion>> ReapUntil(Clock::time_point deadline) override {
    if (in_flight_ == 0) return Status::InvalidArgument(name_ + ": Reap with nothing in flight");
    IoCompletion c;
    if (!Next(deadline, &c)) return std::optional<IoCompletion>();
    return std::optional<IoCompletion>(std::move(c));
  }

  size_t in_flight() const override { return in_flight_; }
  size_t queue_depth() const override { return http_->config().queue_depth; }

  Status Finish(uint64_t final_size) override {
    if (in_flight_ != 0) return Status::InvalidArgument(name_ + ": Finish with writes in flight");
    if (finished_) return Status::InvalidArgument(name_ + ": finished twice");
    RETURN_IF_ERROR(FirstError());
    if (final_size > appended_) {
      return Status::InvalidArgument(name_ + ": final size " + std::to_string(final_size) + " past the " +
                                     std::to_string(appended_) + " bytes written");
    }
    RETURN_IF_ERROR(TrimTail(appended_ - final_size));
    if (upload_id_.empty()) {
      // One part at most: the object is one PUT.
      HttpRequest put{"PUT", key_, "", {}, Body(), "", nullptr, 0, nullptr};
      RETURN_IF_ERROR(http_->ToStatus(http_->Call(std::move(put)), "PUT " + name_));
      finished_ = true;
      return Status::OK();
    }
    if (!current_.empty()) Dispatch();
    std::unique_lock<std::mutex> lock(shared_->mu);
    shared_->cv.wait(lock, [&] { return shared_->parts_in_flight == 0; });
    Status err = shared_->first_error;
    std::string xml = "<CompleteMultipartUpload>";
    for (const auto& [n, etag] : shared_->etags) {
      xml += "<Part><PartNumber>" + std::to_string(n) + "</PartNumber><ETag>" + XmlEscape(etag) + "</ETag></Part>";
    }
    xml += "</CompleteMultipartUpload>";
    lock.unlock();
    RETURN_IF_ERROR(err);
    HttpRequest complete{"POST", key_, S3Query({{"uploadId", upload_id_}}), {}, {}, xml, nullptr, 0, nullptr};
    HttpResponse r = http_->Call(std::move(complete));
    Status st = http_->ToStatus(r, "CompleteMultipartUpload " + name_);
    if (st.IsNotFound() && r.tries > 1) {
      // NoSuchUpload after a retry: the try before may have completed it,
      // its answer lost. The object is there, whole, if its size is.
      HttpResponse head = http_->Call(HttpRequest{"HEAD", key_, "", {}, {}, "", nullptr, 0, nullptr});
      if (head.code == 200 && head.has_content_length && head.content_length == appended_) st = Status::OK();
    } else if (st.ok()) {
      // A 200 may still carry an error (sent after a keep-alive): only the
      // result document says the object exists.
      auto doc = ParseXml(r.body);
      if (!doc.ok() || doc->name != "CompleteMultipartUploadResult") {
        S3ErrorBody e = ParseS3Error(r.body);
        st = Status::IOError(http_->store() + ": CompleteMultipartUpload " + name_ + ": " +
                             (e.code.empty() ? "the answer is not a CompleteMultipartUploadResult"
                                             : e.code + " (" + e.message + ")"));
      }
    }
    RETURN_IF_ERROR(st);
    finished_ = true;
    return Status::OK();
  }

  Status Discard() override {
    if (in_flight_ != 0) return Status::InvalidArgument(name_ + ": Discard with writes in flight");
    if (!finished_) {
      Status st = upload_id_.empty() ? Status::OK() : Abort();
      upload_id_.clear();
      finished_ = true;
      return st;
    }
    HttpRequest del{"DELETE", key_, "", {}, {}, "", nullptr, 0, nullptr};
    return http_->ToStatus(http_->Call(std::move(del)), "DELETE " + name_);
  }

 private:
  // Takes the next completion into *out; false if `deadline` came first.
  bool Next(Clock::time_point deadline, IoCompletion* out) {
    std::unique_lock<std::mutex> lock(shared_->mu);
    for (;;) {
      if (!shared_->completions.empty()) {
        *out = std::move(shared_->completions.front());
        shared_->completions.pop_front();
        --in_flight_;
        return true;
      }
      if (deadline <= Clock::now()) return false;  // a poll: nothing ready
      if (shared_->parts_in_flight == 0) {
        // Nothing will complete unless the gathered writes move.
        lock.unlock();
        Progress();
        lock.lock();
        continue;
      }
      if (deadline == Clock::time_point::max()) {
        shared_->cv.wait(lock);
      } else if (shared_->cv.wait_until(lock, deadline) == std::cv_status::timeout &&
                 shared_->completions.empty()) {
        return false;
      }
    }
  }

  Status FirstError() {
    std::lock_guard<std::mutex> lock(shared_->mu);
    return shared_->first_error;
  }

  std::vector<std::pair<const uint8_t*, size_t>> Body() const {
    std::vector<std::pair<const uint8_t*, size_t>> body;
    for (const Piece& p : current_) body.push_back({p.data, p.len});
    return body;
  }

  // Drops the last `bytes` bytes, which must not have been uploaded yet.
  Status TrimTail(uint64_t bytes) {
    if (bytes > current_bytes_) {
      return Status::InvalidArgument(name_ + ": cannot shorten an s3 object by bytes already uploaded");
    }
    while (bytes > 0) {
      Piece& last = current_.back();
      size_t cut = static_cast<size_t>(std::min<uint64_t>(bytes, last.len));
      last.len -= cut;
      bytes -= cut;
      current_bytes_ -= cut;
      appended_ -= cut;
      if (last.len == 0) current_.pop_back();
    }
    return Status::OK();
  }

  // The writer waits and no part is in flight: upload what is gathered if
  // it makes a part, else copy it so that its writes complete now.
  void Progress() {
    if (current_bytes_ >= kS3MinPartBytes) {
      Dispatch();
      return;
    }
    std::lock_guard<std::mutex> lock(shared_->mu);
    for (Piece& p : current_) {
      if (p.copy) continue;
      p.copy = std::make_shared<std::string>(reinterpret_cast<const char*>(p.data), p.len);
      p.data = reinterpret_cast<const uint8_t*>(p.copy->data());
      IoCompletion c;
      c.tag = p.tag;
      c.bytes = p.len;
      shared_->completions.push_back(std::move(c));
    }
  }

  // Uploads the gathered pieces as the next part.
  void Dispatch() {
    std::vector<Piece> pieces;
    pieces.swap(current_);
    current_bytes_ = 0;
    Status st = upload_id_.empty() ? BeginUpload() : Status::OK();
    const unsigned number = ++parts_;
    if (st.ok() && number > kS3MaxParts) {
      st = Status::InvalidArgument(name_ + ": more than " + std::to_string(kS3MaxParts) + " parts");
    }
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(shared_->mu);
      Fail(pieces, st);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      ++shared_->parts_in_flight;
    }
    auto request = std::make_unique<HttpRequest>();
    request->method = "PUT";
    request->key = key_;
    request->query = S3Query({{"partNumber", std::to_string(number)}, {"uploadId", upload_id_}});
    for (const Piece& p : pieces) request->body.push_back({p.data, p.len});
    auto shared = shared_;
    S3Http* http = http_.get();  // never owned here: see s3_http.h
    std::string what = "UploadPart " + std::to_string(number) + " of " + name_;
    request->done = [shared, http, what, number, pieces](HttpResponse r) {
      Status st = http->ToStatus(r, what);
      if (st.ok() && r.etag.empty()) st = Status::IOError(http->store() + ": " + what + ": the answer has no ETag");
      std::lock_guard<std::mutex> lock(shared->mu);
      if (st.ok()) shared->etags[number] = r.etag;
      Fail(pieces, st, shared.get());
      --shared->parts_in_flight;
      shared->cv.notify_all();
    };
    http_->Submit(std::move(request));
  }

  // Completes the writer's pieces of a part with `st` (OK or not).
  // REQUIRES: shared->mu held.
  static void Fail(const std::vector<Piece>& pieces, const Status& st, Shared* shared) {
    if (!st.ok() && shared->first_error.ok()) shared->first_error = st;
    for (const Piece& p : pieces) {
      if (p.copy) continue;  // completed when it was copied
      IoCompletion c;
      c.tag = p.tag;
      c.bytes = st.ok() ? p.len : 0;
      c.status = st;
      shared->completions.push_back(std::move(c));
    }
    shared->cv.notify_all();
  }
  void Fail(const std::vector<Piece>& pieces, const Status& st) { Fail(pieces, st, shared_.get()); }

  Status BeginUpload() {
    HttpRequest begin{"POST", key_, S3Query({{"uploads", ""}}), {}, {}, "", nullptr, 0, nullptr};
    HttpResponse r = http_->Call(std::move(begin));
    RETURN_IF_ERROR(http_->ToStatus(r, "CreateMultipartUpload " + name_));
    auto doc = ParseXml(r.body);
    if (!doc.ok()) return doc.status();
    upload_id_ = doc->Text("UploadId");
    if (upload_id_.empty()) {
      return Status::IOError(http_->store() + ": CreateMultipartUpload " + name_ + ": the answer has no UploadId");
    }
    return Status::OK();
  }

  Status Abort() {
    HttpRequest abort{"DELETE", key_, S3Query({{"uploadId", upload_id_}}), {}, {}, "", nullptr, 0, nullptr};
    return http_->ToStatus(http_->Call(std::move(abort)), "AbortMultipartUpload " + name_);
  }

  std::shared_ptr<S3Http> http_;
  const std::string key_, name_;
  std::shared_ptr<Shared> shared_;
  std::vector<Piece> current_;  // the part being gathered
  uint64_t current_bytes_ = 0;
  uint64_t appended_ = 0;  // bytes given so far: the next write's offset
  size_t in_flight_ = 0;   // writes not yet reaped
  unsigned parts_ = 0;
  std::string upload_id_;
  bool finished_ = false;
};

class S3Readable final : public ReadableObject {
 public:
  S3Readable(std::shared_ptr<S3Http> http, std::string key, std::string name, uint64_t size)
      : http_(std::move(http)), key_(std::move(key)), name_(std::move(name)), size_(size),
        shared_(std::make_shared<Shared>()) {}

  ~S3Readable() override {
    std::unique_lock<std::mutex> lock(shared_->mu);
    shared_->cv.wait(lock, [&] { return shared_->parts_in_flight == 0; });
  }

  uint64_t size() const override { return size_; }

  Status StartRead(uint64_t offset, void* buf, size_t len, uint64_t tag) override {
    ++in_flight_;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (offset >= size_ || len == 0) {
        IoCompletion c;
        c.tag = tag;
        shared_->completions.push_back(std::move(c));
        return Status::OK();
      }
      ++shared_->parts_in_flight;
    }
    auto request = std::make_unique<HttpRequest>();
    request->method = "GET";
    request->key = key_;
    request->headers.push_back("Range: bytes=" + std::to_string(offset) + "-" + std::to_string(offset + len - 1));
    request->sink = static_cast<uint8_t*>(buf);
    request->sink_capacity = len;
    auto shared = shared_;
    S3Http* http = http_.get();  // never owned here: see s3_http.h
    std::string what = "GET " + name_;
    request->done = [shared, http, what, tag, offset](HttpResponse r) {
      IoCompletion c;
      c.tag = tag;
      if (r.code == 416) {
        r.code = 206;  // past the end of an object shorter than its known size: no bytes
        r.sunk = 0;
      }
      c.status = http->ToStatus(r, what);
      if (c.status.ok() && r.code == 200 && offset > 0) {
        // The whole object from its start, not the range asked for.
        c.status = Status::IOError(http->store() + ": " + what + ": the server ignored the Range header");
      }
      c.bytes = c.status.ok() ? r.sunk : 0;
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->completions.push_back(std::move(c));
      --shared->parts_in_flight;
      shared->cv.notify_all();
    };
    http_->Submit(std::move(request));
    return Status::OK();
  }

  Result<IoCompletion> Reap() override {
    if (in_flight_ == 0) return Status::InvalidArgument(name_ + ": Reap with nothing in flight");
    std::unique_lock<std::mutex> lock(shared_->mu);
    shared_->cv.wait(lock, [&] { return !shared_->completions.empty(); });
    IoCompletion c = std::move(shared_->completions.front());
    shared_->completions.pop_front();
    --in_flight_;
    return c;
  }

  size_t in_flight() const override { return in_flight_; }
  size_t queue_depth() const override { return http_->config().queue_depth; }

 private:
  std::shared_ptr<S3Http> http_;
  const std::string key_, name_;
  const uint64_t size_;
  std::shared_ptr<Shared> shared_;  // parts_in_flight counts GETs here
  size_t in_flight_ = 0;
};

}  // namespace

std::unique_ptr<WritableObject> NewS3Writable(std::shared_ptr<S3Http> http, std::string key, std::string name) {
  return std::make_unique<S3Writable>(std::move(http), std::move(key), std::move(name));
}

std::unique_ptr<ReadableObject> NewS3Readable(std::shared_ptr<S3Http> http, std::string key, std::string name,
                                              uint64_t size) {
  return std::make_unique<S3Readable>(std::move(http), std::move(key), std::move(name), size);
}

}  // namespace sluice
