#include "backends/s3/s3_http.h"

#include <curl/curl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "backends/s3/s3_xml.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxTextBody = 64ull << 20;  // an answer kept as text (records, XML) at most

// Why answers are ACKed at once: a server that writes an answer's headers
// and its body in two writes with Nagle's algorithm on (Ceph RGW's beast
// frontend unless `tcp_nodelay=1`) holds the body until the headers are
// ACKed, and Linux delays that ACK by up to 40 ms on a request/response
// connection. Every small GET and every PUT's answer then took ~44 ms, and
// a save or restore makes several in a row (records, the commit, the
// latest-step hint). When an answer's first line and its header end
// arrive, the client ACKs at once (TCP_QUICKACK).
//
// Which socket: libcurl 7.88 names a transfer's socket only once it has
// ended (CURLINFO_ACTIVESOCKET), so the client records the sockets it opens
// and finds a transfer's by the local port its connection reports before
// the request is sent (CURLOPT_PREREQFUNCTION, libcurl 7.80). Every call
// is on the client's thread.
class ConnectionSockets {
 public:
  void Opened(int fd) { local_port_[fd] = 0; }
  void Closed(int fd) { local_port_.erase(fd); }
  // The open socket whose local port is `port`, or -1.
  int ByLocalPort(int port) {
    for (auto& [fd, known] : local_port_) {
      if (known == 0) {
        sockaddr_storage a{};
        socklen_t len = sizeof a;
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) continue;
        if (a.ss_family == AF_INET) known = ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
        if (a.ss_family == AF_INET6) known = ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port);
      }
      if (known == port) return fd;
    }
    return -1;
  }

 private:
  std::unordered_map<int, int> local_port_;  // fd -> local port (0: not looked up yet)
};

void AckAtOnce(int fd) {
#ifdef TCP_QUICKACK
  if (fd < 0) return;
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
#else
  (void)fd;
#endif
}

// A request on the wire: the caller's request, its response so far, and
// where its body is being read from.
struct Transfer {
  std::unique_ptr<HttpRequest> request;
  HttpResponse response;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  size_t piece = 0, piece_offset = 0;  // the body's read position
  uint64_t body_bytes = 0;
  bool overflow = false;  // a sink got more bytes than it holds
  Clock::time_point first_try;
  Clock::time_point retry_at;
  std::string url;
  char error[CURL_ERROR_SIZE] = {0};
  ConnectionSockets* sockets = nullptr;
  int fd = -1;  // the connection's socket, once known
};

int OnSocketOpened(void* sockets, curl_socket_t fd, curlsocktype) {
  static_cast<ConnectionSockets*>(sockets)->Opened(fd);
  return CURL_SOCKOPT_OK;
}

int OnSocketClosed(void* sockets, curl_socket_t fd) {
  static_cast<ConnectionSockets*>(sockets)->Closed(fd);
  return close(fd);
}

#if LIBCURL_VERSION_NUM >= 0x075000
int OnRequestReady(void* data, char*, char*, int, int local_port) {
  auto* t = static_cast<Transfer*>(data);
  t->fd = t->sockets->ByLocalPort(local_port);
  return CURL_PREREQFUNC_OK;
}
#endif

size_t ReadBody(char* out, size_t size, size_t n, void* data) {
  auto* t = static_cast<Transfer*>(data);
  const HttpRequest& r = *t->request;
  size_t room = size * n, given = 0;
  while (room > 0 && t->piece < r.body.size()) {
    const auto& [ptr, len] = r.body[t->piece];
    size_t take = std::min(room, len - t->piece_offset);
    if (take > 0) std::memcpy(out + given, ptr + t->piece_offset, take);
    given += take;
    room -= take;
    t->piece_offset += take;
    if (t->piece_offset == len) {
      ++t->piece;
      t->piece_offset = 0;
    }
  }
  return given;
}

int SeekBody(void* data, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(data);
  if (origin != SEEK_SET || offset < 0) return CURL_SEEKFUNC_CANTSEEK;
  t->piece = 0;
  t->piece_offset = 0;
  auto left = static_cast<uint64_t>(offset);
  const auto& body = t->request->body;
  while (t->piece < body.size() && left >= body[t->piece].second) {
    left -= body[t->piece].second;
    ++t->piece;
  }
  t->piece_offset = static_cast<size_t>(left);
  return CURL_SEEKFUNC_OK;
}

size_t WriteBody(char* in, size_t size, size_t n, void* data) {
  auto* t = static_cast<Transfer*>(data);
  const size_t len = size * n;
  long code = 0;
  curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
  HttpRequest& r = *t->request;
  if (r.sink != nullptr && code >= 200 && code < 300) {
    if (t->response.sunk + len > r.sink_capacity) {
      t->overflow = true;
      return 0;  // aborts the transfer
    }
    std::memcpy(r.sink + t->response.sunk, in, len);
    t->response.sunk += len;
    return len;
  }
  if (t->response.body.size() + len > kMaxTextBody) {
    t->overflow = true;
    return 0;
  }
  t->response.body.append(in, len);
  return len;
}

bool HeaderIs(const char* line, size_t len, const char* name) {
  size_t n = std::strlen(name);
  return len > n && strncasecmp(line, name, n) == 0 && line[n] == ':';
}

std::string HeaderValue(const char* line, size_t len, size_t name_len) {
  std::string v(line + name_len + 1, len - name_len - 1);
  size_t b = v.find_first_not_of(" \t"), e = v.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : v.substr(b, e - b + 1);
}

size_t OnHeader(char* line, size_t size, size_t n, void* data) {
  auto* t = static_cast<Transfer*>(data);
  const size_t len = size * n;
  if ((len >= 5 && std::memcmp(line, "HTTP/", 5) == 0) || (len <= 2 && len > 0 && line[0] == '\r')) {
    AckAtOnce(t->fd);  // an answer's first line, or its headers' end
  }
  if (HeaderIs(line, len, "ETag")) {
    t->response.etag = HeaderValue(line, len, 4);
  } else if (HeaderIs(line, len, "Content-Length")) {
    t->response.content_length = std::strtoull(HeaderValue(line, len, 14).c_str(), nullptr, 10);
    t->response.has_content_length = true;
  } else if (HeaderIs(line, len, "Last-Modified")) {
    std::string v = HeaderValue(line, len, 13);
    t->response.last_modified_ms = static_cast<int64_t>(curl_getdate(v.c_str(), nullptr)) * 1000;
  }
  return len;
}

bool Retryable(const Transfer& t, CURLcode rc) {
  if (t.overflow) return false;
  if (rc != CURLE_OK) return true;  // no answer, a dropped connection, a truncated body
  long c = t.response.code;
  return c == 429 || c == 500 || c == 502 || c == 503 || c == 504;
}

}  // namespace

std::string S3Query(std::vector<std::pair<std::string, std::string>> params) {
  for (auto& [k, v] : params) {
    k = S3Encode(k, false);
    v = S3Encode(v, false);
  }
  std::sort(params.begin(), params.end());
  std::string q;
  for (const auto& [k, v] : params) q += (q.empty() ? "" : "&") + k + "=" + v;
  return q;
}

class S3Http::Loop {
 public:
  explicit Loop(const S3Config& config) : config_(config) {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    multi_ = curl_multi_init();
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, static_cast<long>(config.connections));
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(config.connections));
    sigv4_ = "aws:amz:" + config.region + ":s3";
    thread_ = std::thread([this] { Run(); });
  }
  ~Loop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    curl_multi_wakeup(multi_);
    thread_.join();
    curl_multi_cleanup(multi_);
  }

  void Submit(std::unique_ptr<HttpRequest> request) {
    auto t = std::make_unique<Transfer>();
    t->request = std::move(request);
    t->first_try = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stopping_) {
        incoming_.push_back(std::move(t));
        t = nullptr;
      }
    }
    if (t) {
      t->response.transport_error = "the store is closing";
      Finish(std::move(t));
      return;
    }
    curl_multi_wakeup(multi_);
  }

  std::string Url(const HttpRequest& r) const {
    std::string key = S3Encode(r.key, true);
    std::string url;
    if (config_.path_style) {
      url = config_.endpoint + "/" + config_.bucket + (key.empty() ? "" : "/" + key);
    } else {
      size_t scheme_end = config_.endpoint.find("://") + 3;
      url = config_.endpoint.substr(0, scheme_end) + config_.bucket + "." + config_.endpoint.substr(scheme_end) +
            "/" + key;
    }
    if (!r.query.empty()) url += "?" + r.query;
    return url;
  }

 private:
  void Start(Transfer* t) {
    HttpRequest& r = *t->request;
    t->easy = curl_easy_init();
    t->url = Url(r);
    t->piece = t->piece_offset = 0;
    t->overflow = false;
    t->response.body.clear();
    t->response.sunk = 0;
    t->response.etag.clear();
    t->response.has_content_length = false;
    t->response.content_length = 0;
    t->response.transport_error.clear();
    t->error[0] = '\0';
    t->sockets = &sockets_;
    t->fd = -1;
    ++t->response.tries;
    CURL* e = t->easy;
    curl_easy_setopt(e, CURLOPT_URL, t->url.c_str());
    curl_easy_setopt(e, CURLOPT_PRIVATE, t);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sigv4_.c_str());
    curl_easy_setopt(e, CURLOPT_USERNAME, config_.credentials.access_key.c_str());
    curl_easy_setopt(e, CURLOPT_PASSWORD, config_.credentials.secret_key.c_str());
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 10L);
    // A transfer that moves under 1 byte/s for timeout_s is dead.
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, static_cast<long>(config_.timeout_s));
    // No wait for a "100 Continue" before a body: the request is signed,
    // so a refusal costs one body at most. (Not by removing the Expect
    // header: libcurl 7.88 would sign the removed header, and the server
    // would refuse the signature.)
    curl_easy_setopt(e, CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
    // Large socket reads and writes: fewer system calls and callbacks per
    // byte, so more of the cores are left to the rest of the host.
    curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 2L << 20);
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 1L << 20);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, WriteBody);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
    curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, OnSocketOpened);
    curl_easy_setopt(e, CURLOPT_SOCKOPTDATA, &sockets_);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, OnSocketClosed);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, &sockets_);
#if LIBCURL_VERSION_NUM >= 0x075000
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, OnRequestReady);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, t);
#endif
    curl_slist* h = nullptr;
    h = curl_slist_append(h, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!config_.credentials.session_token.empty()) {
      h = curl_slist_append(h, ("x-amz-security-token: " + config_.credentials.session_token).c_str());
    }
    for (const std::string& line : r.headers) h = curl_slist_append(h, line.c_str());
    if (!r.body_text.empty() && r.body.empty()) r.body.push_back({reinterpret_cast<const uint8_t*>(r.body_text.data()), r.body_text.size()});
    t->body_bytes = 0;
    for (const auto& piece : r.body) t->body_bytes += piece.second;
    if (r.method == "PUT") {
      curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(t->body_bytes));
    } else if (r.method == "POST") {
      curl_easy_setopt(e, CURLOPT_POST, 1L);
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(t->body_bytes));
      h = curl_slist_append(h, "Content-Type: application/xml");
    } else if (r.method == "HEAD") {
      curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (r.method != "GET") {
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    }
    if (r.method == "PUT" || r.method == "POST") {
      curl_easy_setopt(e, CURLOPT_READFUNCTION, ReadBody);
      curl_easy_setopt(e, CURLOPT_READDATA, t);
      curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, SeekBody);
      curl_easy_setopt(e, CURLOPT_SEEKDATA, t);
    }
    t->headers = h;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_multi_add_handle(multi_, e);
  }

  // Tears down the transfer's handle; retries it later or finishes it.
  void Done(Transfer* raw, CURLcode rc) {
    std::unique_ptr<Transfer> t(raw);
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->response.code);
    curl_multi_remove_handle(multi_, t->easy);
    curl_easy_cleanup(t->easy);
    curl_slist_free_all(t->headers);
    t->easy = nullptr;
    t->headers = nullptr;
    if (rc != CURLE_OK) {
      t->response.transport_error = t->overflow ? "the answer was larger than asked for"
                                                : (t->error[0] ? t->error : curl_easy_strerror(rc));
      if (rc == CURLE_PARTIAL_FILE) t->response.transport_error = "truncated answer: " + t->response.transport_error;
      t->response.code = t->response.code >= 200 && t->response.code < 300 ? 0 : t->response.code;
    }
    t->response.seconds = std::chrono::duration<double>(Clock::now() - t->first_try).count();
    if (Retryable(*t, rc) && t->response.tries <= config_.retries && !stopping_) {
      auto backoff = std::chrono::milliseconds(std::min<int64_t>(5000, 100ll << std::min(t->response.tries - 1, 6u)));
      std::uniform_int_distribution<int64_t> jitter(0, backoff.count() / 2);
      t->retry_at = Clock::now() + backoff + std::chrono::milliseconds(jitter(rng_));
      waiting_.push_back(std::move(t));
      return;
    }
    Finish(std::move(t));
  }

  static void Finish(std::unique_ptr<Transfer> t) {
    auto done = std::move(t->request->done);
    if (done) done(std::move(t->response));
  }

  void Run() {
    for (;;) {
      std::vector<std::unique_ptr<Transfer>> fresh;
      bool stopping;
      {
        std::lock_guard<std::mutex> lock(mu_);
        fresh.swap(incoming_);
        stopping = stopping_;
      }
      for (auto& t : fresh) Start(t.release());
      auto now = Clock::now();
      Clock::time_point next = now + std::chrono::seconds(1);
      for (size_t i = 0; i < waiting_.size();) {
        if (stopping || waiting_[i]->retry_at <= now) {
          std::unique_ptr<Transfer> t = std::move(waiting_[i]);
          waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
          if (stopping) {
            Finish(std::move(t));
          } else {
            Start(t.release());
          }
        } else {
          next = std::min(next, waiting_[i]->retry_at);
          ++i;
        }
      }
      int running = 0;
      curl_multi_perform(multi_, &running);
      int queued = 0;
      while (CURLMsg* m = curl_multi_info_read(multi_, &queued)) {
        if (m->msg != CURLMSG_DONE) continue;
        Transfer* t = nullptr;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
        Done(t, m->data.result);
      }
      if (stopping && running == 0 && waiting_.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        if (incoming_.empty()) return;
        continue;
      }
      auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
      curl_multi_poll(multi_, nullptr, 0, static_cast<int>(std::clamp<int64_t>(wait_ms, 0, 1000)), nullptr);
    }
  }

  const S3Config& config_;
  std::string sigv4_;
  ConnectionSockets sockets_;  // before multi_: its connections close into it
  CURLM* multi_ = nullptr;
  std::thread thread_;
  std::mutex mu_;
  std::atomic<bool> stopping_{false};  // set under mu_, so that Submit never queues past the loop's end
  std::vector<std::unique_ptr<Transfer>> incoming_;
  std::vector<std::unique_ptr<Transfer>> waiting_;  // to be retried at their retry_at
  std::mt19937_64 rng_{std::random_device{}()};
};

S3Http::S3Http(const S3Config& config, std::string what) : config_(config), what_(std::move(what)) {}

S3Http::~S3Http() = default;

Result<std::unique_ptr<S3Http>> S3Http::Start(const S3Config& config, std::string what) {
  std::unique_ptr<S3Http> http(new S3Http(config, std::move(what)));
  http->loop_ = std::make_unique<Loop>(http->config_);
  return http;
}

void S3Http::Submit(std::unique_ptr<HttpRequest> request) { loop_->Submit(std::move(request)); }

HttpResponse S3Http::Call(HttpRequest request) {
  auto promise = std::make_shared<std::promise<HttpResponse>>();
  auto answer = promise->get_future();
  auto r = std::make_unique<HttpRequest>(std::move(request));
  r->done = [promise](HttpResponse response) { promise->set_value(std::move(response)); };
  Submit(std::move(r));
  return answer.get();
}

Status S3Http::ToStatus(const HttpResponse& r, const std::string& what) const {
  if (r.code >= 200 && r.code < 300 && r.transport_error.empty()) return Status::OK();
  char took[64];
  snprintf(took, sizeof took, " (%u %s over %.1f s; retries=%u)", r.tries, r.tries == 1 ? "try" : "tries",
           r.seconds, config_.retries);
  const std::string head = what_ + ": " + what + ": ";
  if (r.code == 0) {
    return Status::Unavailable(head + "no answer from " + config_.endpoint + ": " + r.transport_error + took);
  }
  S3ErrorBody e = ParseS3Error(r.body);
  std::string server = std::to_string(r.code) + (e.code.empty() ? "" : " " + e.code) +
                       (e.message.empty() ? "" : " (" + e.message + ")");
  if (!r.transport_error.empty()) server += ", " + r.transport_error;
  if (e.code == "NoSuchBucket") {
    return Status::NotFound(what_ + ": bucket '" + config_.bucket + "' does not exist at " + config_.endpoint +
                            " (create it first, e.g. `aws s3 mb s3://" + config_.bucket + "`)");
  }
  if (e.code == "InvalidAccessKeyId" || e.code == "SignatureDoesNotMatch" || e.code == "AccessDenied" ||
      e.code == "ExpiredToken" || e.code == "InvalidToken" || (r.code == 403 && e.code.empty())) {
    return Status::IOError(head + server + ": check the credentials (from " + config_.credentials.source +
                           ") and the region (" + config_.region + ")");
  }
  if (r.code == 404) return Status::NotFound(head + server);
  if (r.code == 412) return Status::AlreadyExists(head + server);
  if (r.code >= 500) return Status::Unavailable(head + server + took);
  return Status::IOError(head + server);
}

}  // namespace sluice
