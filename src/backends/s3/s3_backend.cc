#include "backends/s3/s3_backend.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/s3/s3_config.h"
#include "backends/s3/s3_http.h"
#include "backends/s3/s3_objects.h"
#include "backends/s3/s3_xml.h"

namespace sluice {
namespace {

// Keys of the open-time probe of conditional writes, at the top of the
// store's prefix; never listed.
constexpr const char* kProbePrefix = ".sluice-probe-";

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class S3Backend final : public Backend {
 public:
  S3Backend(std::string uri, std::shared_ptr<S3Http> http) : uri_(std::move(uri)), http_(std::move(http)) {
    const S3Config& c = http_->config();
    caps_.io_alignment = 1;
    caps_.max_object_bytes = std::min<uint64_t>(5ull << 30, c.part_bytes * kS3MaxParts);
    caps_.atomic_publish_if_absent = true;  // by the probe, or by the user's conditional=unsafe
    caps_.objects_in_flight = 4;
    caps_.writes_complete_in_bunches = true;  // a write completes with its part
    caps_.child_listing = &children_;
    caps_.io_path = "S3 at " + c.endpoint + " (libcurl, SigV4, " + (c.path_style ? "path" : "virtual") +
                    " addressing), parts " + std::to_string(c.part_bytes >> 20) + " MiB, qd " +
                    std::to_string(c.queue_depth) +
                    (c.conditional == S3Conditional::kRequire ? ", If-None-Match commits"
                                                              : ", commits NOT exclusive (conditional=unsafe)");
  }

  const BackendCaps& caps() const override { return caps_; }

  // ChildListing: a listing with delimiter '/', which names each child once.
  class Children final : public ChildListing {
   public:
    explicit Children(const S3Backend& b) : b_(b) {}
    Result<std::vector<std::string>> ListChildren(const std::string& prefix) const override {
      if (!prefix.empty() && prefix.back() != '/') {
        return Status::InvalidArgument("list prefix '" + prefix + "' must end in '/'");
      }
      const std::string full = b_.KeyPrefix() + prefix;
      std::vector<std::string> out;
      std::string token;
      do {
        std::vector<std::pair<std::string, std::string>> q = {
            {"list-type", "2"}, {"prefix", full}, {"delimiter", "/"}};
        if (!token.empty()) q.push_back({"continuation-token", token});
        HttpResponse r = b_.http_->Call(b_.Request("GET", "", S3Query(q)));
        RETURN_IF_ERROR(b_.http_->ToStatus(r, "list " + prefix));
        ASSIGN_OR_RETURN(S3ListPage page, ParseListObjectsV2(r.body));
        for (const std::string& p : page.common_prefixes) {
          if (p.size() > full.size() + 1 && p.compare(0, full.size(), full) == 0) {
            out.push_back(p.substr(full.size(), p.size() - full.size() - 1));
          }
        }
        for (const auto& e : page.entries) {
          if (e.key.size() > full.size() && e.key.compare(0, full.size(), full) == 0) {
            out.push_back(e.key.substr(full.size()));
          }
        }
        token = page.truncated ? page.next_token : "";
      } while (!token.empty());
      return out;
    }

   private:
    const S3Backend& b_;
  };
  const std::string& uri() const override { return uri_; }

  // Checks the bucket and the credentials with a listing of one key (which
  // read-only credentials may do).
  Status CheckBucket() {
    const S3Config& c = http_->config();
    HttpResponse r = http_->Call(Request("GET", "", S3Query({{"list-type", "2"}, {"max-keys", "1"},
                                                            {"prefix", c.prefix.empty() ? "" : c.prefix + "/"}})));
    return http_->ToStatus(r, "list");
  }

  // Whether the server honours If-None-Match, asked once, before the first
  // publish (so that a store opened only to read writes nothing).
  Status EnsureExclusive() {
    std::lock_guard<std::mutex> lock(probe_mu_);
    if (!probed_) {
      probe_status_ = ProbeConditional();
      // A transient failure is asked again next time; an answer is kept.
      probed_ = probe_status_.ok() || probe_status_.code() == StatusCode::kNotSupported;
    }
    return probe_status_;
  }

  Status ProbeConditional() {
    const S3Config& c = http_->config();
    std::mt19937_64 rng(std::random_device{}());
    char id[24];
    snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(rng()));
    const std::string probe = std::string(kProbePrefix) + id;
    RETURN_IF_ERROR(PutIfAbsent(probe, "1", true));
    Status again = PutIfAbsent(probe, "2", true);
    Status removed = Remove(probe);
    if (again.ok()) {
      return Status::NotSupported(http_->store() + ": the server at " + c.endpoint +
                                  " ignores If-None-Match: * (a second conditional PUT of one key succeeded), so two "
                                  "racing saves of a step could both commit; refused. Add conditional=unsafe to the "
                                  "URI to accept last-writer-wins commits (see doc/s3.md)");
    }
    if (!again.IsAlreadyExists()) return again;
    return removed;
  }

  Result<std::unique_ptr<WritableObject>> Create(const std::string& name, const CreateOptions&) override {
    ASSIGN_OR_RETURN(bool exists, Exists(name));
    if (exists) return Status::AlreadyExists(http_->store() + ": object " + name + " exists");
    return NewS3Writable(http_, Key(name), name);
  }

  Result<std::unique_ptr<ReadableObject>> Open(const std::string& name, const OpenOptions& options) override {
    uint64_t size = 0;
    if (options.known_size) {
      size = *options.known_size;
    } else {
      HttpResponse r = http_->Call(Request("HEAD", Key(name), ""));
      RETURN_IF_ERROR(http_->ToStatus(r, "HEAD " + name));
      if (!r.has_content_length) {
        return Status::IOError(http_->store() + ": HEAD " + name + ": the answer has no Content-Length");
      }
      size = r.content_length;
    }
    return NewS3Readable(http_, Key(name), name, size);
  }

  Status PublishIfAbsent(const std::string& name, std::string_view bytes) override {
    const bool exclusive = http_->config().conditional == S3Conditional::kRequire;
    if (!exclusive) {
      ASSIGN_OR_RETURN(bool exists, Exists(name));
      if (exists) return Status::AlreadyExists(http_->store() + ": " + name + " exists");
      return PutIfAbsent(name, bytes, false);
    }
    RETURN_IF_ERROR(EnsureExclusive());
    return PutIfAbsent(name, bytes, true);
  }

  Status Replace(const std::string& staged, const std::string& target) override {
    ASSIGN_OR_RETURN(bool exists, Exists(staged));
    if (!exists) return Status::NotFound(http_->store() + ": " + staged + " (to replace " + target + ") is missing");
    HttpRequest copy = Request("PUT", Key(target), "");
    copy.headers.push_back("x-amz-copy-source: /" + http_->config().bucket + "/" + S3Encode(Key(staged), true));
    copy.body.push_back({nullptr, 0});
    HttpResponse r = http_->Call(std::move(copy));
    RETURN_IF_ERROR(http_->ToStatus(r, "CopyObject " + staged + " to " + target));
    if (S3ErrorBody e = ParseS3Error(r.body); !e.code.empty()) {
      return Status::IOError(http_->store() + ": CopyObject " + staged + " to " + target + ": " + e.code + " (" +
                             e.message + ")");
    }
    return Remove(staged);
  }

  Result<std::string> ReadSmall(const std::string& name) override {
    HttpResponse r = http_->Call(Request("GET", Key(name), ""));
    RETURN_IF_ERROR(http_->ToStatus(r, "GET " + name));
    if (r.has_content_length && r.content_length != r.body.size()) {
      return Status::IOError(http_->store() + ": GET " + name + ": " + std::to_string(r.body.size()) + " of " +
                             std::to_string(r.content_length) + " bytes came");
    }
    return std::move(r.body);
  }

  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
    std::vector<ObjectInfo> out;
    const std::string root = KeyPrefix();
    std::string token;
    do {
      std::vector<std::pair<std::string, std::string>> q = {{"list-type", "2"}, {"prefix", root + prefix}};
      if (!token.empty()) q.push_back({"continuation-token", token});
      HttpResponse r = http_->Call(Request("GET", "", S3Query(q)));
      RETURN_IF_ERROR(http_->ToStatus(r, "list " + prefix));
      ASSIGN_OR_RETURN(S3ListPage page, ParseListObjectsV2(r.body));
      for (auto& e : page.entries) {
        if (e.key.compare(0, root.size(), root) != 0) continue;
        std::string name = e.key.substr(root.size());
        if (name.rfind(kProbePrefix, 0) == 0) continue;
        out.push_back({std::move(name), e.size, e.mtime_unix_ms});
      }
      token = page.truncated ? page.next_token : "";
    } while (!token.empty());
    return out;
  }

  Result<std::vector<ObjectInfo>> Stat(const std::vector<std::string>& names) override {
    struct Gather {
      std::mutex mu;
      std::condition_variable cv;
      size_t left = 0;
      std::vector<ObjectInfo> found;
      Status error;
    };
    auto g = std::make_shared<Gather>();
    g->left = names.size();
    for (const std::string& name : names) {
      auto head = std::make_unique<HttpRequest>(Request("HEAD", Key(name), ""));
      S3Http* http = http_.get();  // never owned here: see s3_http.h
      head->done = [g, http, name](HttpResponse r) {
        Status st = http->ToStatus(r, "HEAD " + name);
        std::lock_guard<std::mutex> lock(g->mu);
        if (st.ok()) {
          g->found.push_back({name, r.content_length, r.last_modified_ms});
        } else if (!st.IsNotFound() && g->error.ok()) {
          g->error = st;
        }
        if (--g->left == 0) g->cv.notify_all();
      };
      http_->Submit(std::move(head));
    }
    std::unique_lock<std::mutex> lock(g->mu);
    g->cv.wait(lock, [&] { return g->left == 0; });
    RETURN_IF_ERROR(g->error);
    return std::move(g->found);
  }

  Status Remove(const std::string& name) override {
    ASSIGN_OR_RETURN(bool exists, Exists(name));
    if (!exists) return Status::NotFound(http_->store() + ": " + name + " does not exist");
    return http_->ToStatus(http_->Call(Request("DELETE", Key(name), "")), "DELETE " + name);
  }

  Status ReclaimLeftovers(const std::string& prefix, uint64_t min_age_ms) override {
    std::string key_marker, id_marker;
    const int64_t now = NowUnixMs();
    RETURN_IF_ERROR(ReclaimProbes(min_age_ms, now));
    for (;;) {
      std::vector<std::pair<std::string, std::string>> q = {{"uploads", ""}, {"prefix", KeyPrefix() + prefix}};
      if (!key_marker.empty()) q.push_back({"key-marker", key_marker});
      if (!id_marker.empty()) q.push_back({"upload-id-marker", id_marker});
      HttpResponse r = http_->Call(Request("GET", "", S3Query(q)));
      RETURN_IF_ERROR(http_->ToStatus(r, "ListMultipartUploads " + prefix));
      ASSIGN_OR_RETURN(S3UploadsPage page, ParseListMultipartUploads(r.body));
      for (const auto& u : page.uploads) {
        // By its start: an upload still being written longer than min_age
        // (a drain capped far below the object's size per min_age) would go
        // too, so gc's --min-age must exceed the longest upload (doc/s3.md).
        // A start that does not parse counts as young.
        if (u.initiated_unix_ms == 0 || now - u.initiated_unix_ms < static_cast<int64_t>(min_age_ms)) continue;
        HttpResponse a = http_->Call(Request("DELETE", u.key, S3Query({{"uploadId", u.upload_id}})));
        Status st = http_->ToStatus(a, "AbortMultipartUpload " + u.key);
        if (!st.ok() && !st.IsNotFound()) return st;
      }
      if (!page.truncated) return Status::OK();
      if (page.next_key_marker == key_marker && page.next_upload_id_marker == id_marker) {
        return Status::IOError(http_->store() + ": ListMultipartUploads is truncated but does not advance");
      }
      key_marker = page.next_key_marker;
      id_marker = page.next_upload_id_marker;
    }
  }

 private:
  std::string KeyPrefix() const {
    const std::string& p = http_->config().prefix;
    return p.empty() ? p : p + "/";
  }
  std::string Key(const std::string& name) const { return KeyPrefix() + name; }

  static HttpRequest Request(const char* method, std::string key, std::string query) {
    HttpRequest r;
    r.method = method;
    r.key = std::move(key);
    r.query = std::move(query);
    return r;
  }

  // A PUT of `name`, with If-None-Match: * when `exclusive`.
  Status PutIfAbsent(const std::string& name, std::string_view bytes, bool exclusive) {
    for (int attempt = 0;; ++attempt) {
      HttpRequest put = Request("PUT", Key(name), "");
      put.body_text.assign(bytes.data(), bytes.size());
      if (bytes.empty()) put.body.push_back({nullptr, 0});
      if (exclusive) put.headers.push_back("If-None-Match: *");
      HttpResponse r = http_->Call(std::move(put));
      // AWS answers 409 ConditionalRequestConflict to a conditional PUT
      // racing another; a retry then sees the winner's object (412).
      if (r.code == 409 && attempt < 5) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50 << attempt));
        continue;
      }
      Status st = http_->ToStatus(r, "PUT " + name);
      if (!st.IsAlreadyExists()) return st;
      if (r.tries > 1 || attempt > 0) {
        // A try before may have stored it, its answer lost: then the 412 is
        // ours. Records are unique (writer and seal ids), so equal bytes
        // mean this publish won.
        auto have = ReadSmall(name);
        if (have.ok() && *have == bytes) return Status::OK();
      }
      return Status::AlreadyExists(http_->store() + ": " + name + " exists");
    }
  }

  // Probe keys a process left when it died between the probe's PUT and
  // its DELETE (never listed, so no gc would find them).
  Status ReclaimProbes(uint64_t min_age_ms, int64_t now) {
    HttpResponse r = http_->Call(Request("GET", "", S3Query({{"list-type", "2"}, {"prefix", KeyPrefix() + kProbePrefix}})));
    RETURN_IF_ERROR(http_->ToStatus(r, "list probes"));
    ASSIGN_OR_RETURN(S3ListPage page, ParseListObjectsV2(r.body));
    for (const auto& e : page.entries) {
      // Never one a store opening now is probing with: a minute at least.
      const int64_t age = std::max<int64_t>(static_cast<int64_t>(min_age_ms), 60000);
      if (e.mtime_unix_ms == 0 || now - e.mtime_unix_ms < age) continue;
      Status st = http_->ToStatus(http_->Call(Request("DELETE", e.key, "")), "DELETE " + e.key);
      if (!st.ok() && !st.IsNotFound()) return st;
    }
    return Status::OK();
  }

  Result<bool> Exists(const std::string& name) {
    HttpResponse r = http_->Call(Request("HEAD", Key(name), ""));
    if (r.code == 404) return false;
    RETURN_IF_ERROR(http_->ToStatus(r, "HEAD " + name));
    return true;
  }

  std::string uri_;
  std::shared_ptr<S3Http> http_;
  BackendCaps caps_;
  Children children_{*this};
  std::mutex probe_mu_;
  bool probed_ = false;  // guarded by probe_mu_
  Status probe_status_;  // guarded by probe_mu_
};

}  // namespace

Result<std::unique_ptr<Backend>> OpenS3Backend(const std::string& uri, const std::string& location,
                                               const std::string& query, bool /*create_if_missing*/) {
  ASSIGN_OR_RETURN(S3Config config, ParseS3Uri(uri, location, query));
  const std::string what = "s3://" + location;
  ASSIGN_OR_RETURN(std::unique_ptr<S3Http> http, S3Http::Start(config, what));
  auto backend = std::make_unique<S3Backend>(uri, std::shared_ptr<S3Http>(std::move(http)));
  RETURN_IF_ERROR(backend->CheckBucket());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace sluice
