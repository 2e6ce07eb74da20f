// S3Http: the HTTP side of the s3:// backend, on libcurl's multi interface.
// One thread per backend drives every request in flight over a pool of
// kept-alive connections; libcurl signs each request with AWS Signature
// Version 4 (CURLOPT_AWS_SIGV4) from the store's credentials, so no
// signing code of ours sits between the bytes and the wire. Request bodies
// are read straight from the caller's buffers (no copy of ours); a GET's
// body is written straight into the caller's buffer.
//
// Requests that fail in a way a retry may cure (no connection, a dropped or
// truncated answer, 429, 500, 502, 503 SlowDown, 504) are retried with
// exponential backoff and jitter, config.retries times at most (100 ms
// doubling to 5 s between tries); the error then says how many tries over
// how long.
//
// Credentials reach libcurl only; they are never put in a URL, a message or
// a log line.
//
// Thread-safety: Submit and Call from any thread. `done` callbacks run on
// the client's thread and must not block on another request, nor own the
// S3Http (the last owner's release would join the thread from itself):
// whoever submits keeps the client alive until its callbacks have run.
#ifndef SLUICE_BACKENDS_S3_S3_HTTP_H_
#define SLUICE_BACKENDS_S3_S3_HTTP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/s3/s3_config.h"
#include "sluice/status.h"

namespace sluice {

struct HttpResponse {
  long code = 0;                // HTTP status; 0 when no answer came
  std::string transport_error;  // libcurl's reason, when code is 0 or the answer was cut short
  std::string etag;
  uint64_t content_length = 0;  // the Content-Length header (a HEAD's object size)
  bool has_content_length = false;
  int64_t last_modified_ms = 0;
  std::string body;             // the answer's body when it went to no sink (XML, an error, a small object)
  size_t sunk = 0;              // bytes written into the request's sink
  unsigned tries = 0;
  double seconds = 0;           // from the first try to the last answer
};

struct HttpRequest {
  std::string method;  // GET, HEAD, PUT, POST or DELETE
  std::string key;     // the object key in the bucket (not encoded); empty for the bucket itself
  // The query: "name=value" pairs, each URI-encoded, sorted by name and
  // joined with '&' (S3Query makes one), as SigV4's canonical form needs.
  std::string query;
  std::vector<std::string> headers;  // "Name: value"
  // The body to send: these pieces in order (not owned: they stay valid
  // until `done`), else `body_text`.
  std::vector<std::pair<const uint8_t*, size_t>> body;
  std::string body_text;
  // Where a 2xx answer's body goes: `sink` (at most sink_capacity bytes;
  // more is an error) when set, else HttpResponse::body.
  uint8_t* sink = nullptr;
  size_t sink_capacity = 0;
  std::function<void(HttpResponse)> done;
};

// "name=value&..." from pairs, encoded and sorted (HttpRequest::query).
std::string S3Query(std::vector<std::pair<std::string, std::string>> params);

class S3Http {
 public:
  // Starts the client's thread. `what` names the store in messages.
  static Result<std::unique_ptr<S3Http>> Start(const S3Config& config, std::string what);
  // Stops the thread once the requests in flight have run to their end;
  // those waiting to be retried complete with their last answer.
  ~S3Http();
  S3Http(const S3Http&) = delete;
  S3Http& operator=(const S3Http&) = delete;

  // Sends `request`; its `done` is called once, on the client's thread.
  void Submit(std::unique_ptr<HttpRequest> request);
  // Sends `request` and waits for its answer (its `done` is replaced).
  HttpResponse Call(HttpRequest request);

  // The error a finished request stands for (OK for 2xx): NotFound for
  // 404, AlreadyExists for 412, Unavailable when no answer came or the
  // server stayed busy past the retries, IOError otherwise. One line, naming
  // `what` (e.g. "PUT ckpt/x"), the server's code and message, and for
  // credential errors where the credentials came from (never them).
  Status ToStatus(const HttpResponse& response, const std::string& what) const;

  const S3Config& config() const { return config_; }
  const std::string& store() const { return what_; }

  class Loop;

 private:
  S3Http(const S3Config& config, std::string what);
  S3Config config_;
  std::string what_;
  std::unique_ptr<Loop> loop_;
};

}  // namespace sluice

#endif  // SLUICE_BACKENDS_S3_S3_HTTP_H_
