#include "backends/s3/s3_backend.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <string>
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
    caps_.io_path = "S3 at " + c.endpoint + " (libcurl, SigV4, " + (c.path_style ? "path" : "virtual") +
                    " addressing), parts " + std::to_string(c.part_bytes >> 20) + " MiB, qd " +
                    std::to_string(c.queue_depth) +
                    (c.conditional == S3Conditional::kRequire ? ", If-None-Match commits"
                                                              : ", commits NOT exclusive (conditional=unsafe)");
  }

  const BackendCaps& caps() const override { return caps_; }
  const std::string& uri() const override { return uri_; }

  // Checks the bucket and the credentials with a listing of one key, then
  // whether the server honours If-None-Match.
  Status Probe() {
    const S3Config& c = http_->config();
    HttpResponse r = http_->Call(Request("GET", "", S3Query({{"list-type", "2"}, {"max-keys", "1"},
                                                            {"prefix", c.prefix.empty() ? "" : c.prefix + "/"}})));
    RETURN_IF_ERROR(http_->ToStatus(r, "list"));
    if (c.conditional == S3Conditional::kUnsafe) return Status::OK();
    std::mt19937_64 rng(std::random_device{}());
    char id[24];
    snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(rng()));
    const std::string probe = std::string(kProbePrefix) + id;
    RETURN_IF_ERROR(PublishIfAbsent(probe, "1"));
    Status again = PublishIfAbsent(probe, "2");
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
      size = r.content_length;
    }
    return NewS3Readable(http_, Key(name), name, size);
  }

  Status PublishIfAbsent(const std::string& name, std::string_view bytes) override {
    const bool exclusive = http_->config().conditional == S3Conditional::kRequire;
    if (!exclusive) {
      ASSIGN_OR_RETURN(bool exists, Exists(name));
      if (exists) return Status::AlreadyExists(http_->store() + ": " + name + " exists");
    }
    // AWS answers 409 ConditionalRequestConflict to a conditional PUT racing
    // another; a retry then sees the winner's object (412).
    for (int attempt = 0;; ++attempt) {
      HttpRequest put = Request("PUT", Key(name), "");
      put.body_text.assign(bytes.data(), bytes.size());
      if (bytes.empty()) put.body.push_back({nullptr, 0});
      if (exclusive) put.headers.push_back("If-None-Match: *");
      HttpResponse r = http_->Call(std::move(put));
      if (r.code == 409 && attempt < 5) continue;
      Status st = http_->ToStatus(r, "PUT " + name);
      if (st.IsAlreadyExists()) return Status::AlreadyExists(http_->store() + ": " + name + " exists");
      return st;
    }
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
    for (;;) {
      std::vector<std::pair<std::string, std::string>> q = {{"uploads", ""}, {"prefix", KeyPrefix() + prefix}};
      if (!key_marker.empty()) q.push_back({"key-marker", key_marker});
      if (!id_marker.empty()) q.push_back({"upload-id-marker", id_marker});
      HttpResponse r = http_->Call(Request("GET", "", S3Query(q)));
      RETURN_IF_ERROR(http_->ToStatus(r, "ListMultipartUploads " + prefix));
      ASSIGN_OR_RETURN(S3UploadsPage page, ParseListMultipartUploads(r.body));
      for (const auto& u : page.uploads) {
        if (u.initiated_unix_ms > 0 && now - u.initiated_unix_ms < static_cast<int64_t>(min_age_ms)) continue;
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

  Result<bool> Exists(const std::string& name) {
    HttpResponse r = http_->Call(Request("HEAD", Key(name), ""));
    if (r.code == 404) return false;
    RETURN_IF_ERROR(http_->ToStatus(r, "HEAD " + name));
    return true;
  }

  std::string uri_;
  std::shared_ptr<S3Http> http_;
  BackendCaps caps_;
};

}  // namespace

Result<std::unique_ptr<Backend>> OpenS3Backend(const std::string& uri, const std::string& location,
                                               const std::string& query, bool /*create_if_missing*/) {
  ASSIGN_OR_RETURN(S3Config config, ParseS3Uri(uri, location, query));
  const std::string what = "s3://" + location;
  ASSIGN_OR_RETURN(std::unique_ptr<S3Http> http, S3Http::Start(config, what));
  auto backend = std::make_unique<S3Backend>(uri, std::shared_ptr<S3Http>(std::move(http)));
  RETURN_IF_ERROR(backend->Probe());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace sluice
