// MetricsServer: serves a metrics registry over HTTP for Prometheus to
// scrape: GET /metrics answers in the text exposition format (0.0.4); every
// other path is 404. It runs on civetweb (Debian's libcivetweb), with no
// document root, so it never serves a file.
//
// A scrape renders the registry (memory only: no store is listed), so it
// answers in well under a millisecond however many checkpoints the stores
// hold. A client that disconnects mid-answer, or sends garbage, costs the
// server nothing but that connection.
//
// Thread-safety: requests are answered on civetweb's threads; the registry is
// thread-safe. Destroying the server stops it, waiting for requests under way.
#ifndef SLUICE_METRICS_SERVER_H_
#define SLUICE_METRICS_SERVER_H_

#include <memory>
#include <string>
#include <string_view>

#include "sluice/metrics.h"
#include "sluice/status.h"

struct mg_context;
struct mg_connection;

namespace sluice {

struct ListenAddress {
  std::string host;  // an IPv4 address, or an IPv6 one without brackets
  int port = 0;      // 0: any free port
  bool ipv6 = false;
};

// "PORT", "HOST:PORT" or "[V6]:PORT"; HOST is an IPv4 address or
// "localhost", and defaults to 127.0.0.1 so that metrics are not exposed
// beyond this host unless asked (0.0.0.0 for all). InvalidArgument naming
// what is wrong.
Result<ListenAddress> ParseListenAddress(std::string_view text);

class MetricsServer {
 public:
  // Listens at once: Unavailable naming the address if it cannot (in use,
  // not an address of this host, no permission).
  static Result<std::unique_ptr<MetricsServer>> Start(std::string_view listen, MetricsRegistry& registry);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  // http://HOST:PORT/metrics
  std::string url() const;

 private:
  MetricsServer(MetricsRegistry& registry, ListenAddress address) : registry_(registry), address_(std::move(address)) {}
  static int Handle(::mg_connection* conn, void* self);

  MetricsRegistry& registry_;
  ListenAddress address_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
};

}  // namespace sluice

#endif  // SLUICE_METRICS_SERVER_H_
