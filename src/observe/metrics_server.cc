#include "sluice/metrics_server.h"

#include <arpa/inet.h>
#include <civetweb.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

namespace sluice {

Result<ListenAddress> ParseListenAddress(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("metrics address '" + std::string(text) + "': " + why +
                                   " (expected PORT, HOST:PORT or [IPV6]:PORT)");
  };
  ListenAddress a;
  a.host = "127.0.0.1";
  std::string_view port = text;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("an IPv6 address needs [ADDR]:PORT");
    }
    a.host = std::string(text.substr(1, close - 1));
    a.ipv6 = true;
    port = text.substr(close + 2);
    in6_addr v6;
    if (inet_pton(AF_INET6, a.host.c_str(), &v6) != 1) return bad("'" + a.host + "' is not an IPv6 address");
  } else if (const size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    a.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
    if (a.host == "localhost") a.host = "127.0.0.1";
    in_addr v4;
    if (a.host.empty() || inet_pton(AF_INET, a.host.c_str(), &v4) != 1) {
      return bad("'" + a.host + "' is not an IPv4 address");
    }
  }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) {
    return bad("the port must be a number from 0 to 65535");
  }
  a.port = std::stoi(std::string(port));
  if (a.port > 65535) return bad("the port must be a number from 0 to 65535");
  return a;
}

int MetricsServer::Handle(::mg_connection* conn, void* self_ptr) {
  auto* self = static_cast<MetricsServer*>(self_ptr);
  const mg_request_info* req = mg_get_request_info(conn);
  const bool head = req != nullptr && req->request_method != nullptr && std::strcmp(req->request_method, "HEAD") == 0;
  if (req == nullptr || req->request_method == nullptr ||
      (std::strcmp(req->request_method, "GET") != 0 && !head)) {
    mg_send_http_error(conn, 405, "%s", "only GET and HEAD\n");
    return 405;
  }
  const std::string body = self->registry_.RenderPrometheus();
  mg_send_http_ok(conn, "text/plain; version=0.0.4; charset=utf-8", static_cast<long long>(body.size()));
  // A client gone mid-answer makes mg_write fail; nothing else to undo.
  if (!head) mg_write(conn, body.data(), body.size());
  return 200;
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(std::string_view listen, MetricsRegistry& registry) {
  auto address = ParseListenAddress(listen);
  if (!address.ok()) return address.status();
  static std::once_flag init_once;
  std::call_once(init_once, [] { mg_init_library(0); });
  std::unique_ptr<MetricsServer> server(new MetricsServer(registry, *address));
  const std::string ports =
      (address->ipv6 ? "[" + address->host + "]" : address->host) + ":" + std::to_string(address->port);
  const char* options[] = {"listening_ports", ports.c_str(),
                           "num_threads", "2",
                           "request_timeout_ms", "10000",
                           "enable_keep_alive", "no",
                           nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  // civetweb's own log lines would go to stderr; the failure is reported
  // through the error text below instead.
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
  mg_init_data init;
  std::memset(&init, 0, sizeof(init));
  init.callbacks = &callbacks;
  init.user_data = server.get();
  init.configuration_options = options;
  char text[256] = {0};
  unsigned code = 0;
  mg_error_data error;
  std::memset(&error, 0, sizeof(error));
  error.code = &code;
  error.text = text;
  error.text_buffer_size = sizeof(text);
  server->ctx_ = mg_start2(&init, &error);
  if (server->ctx_ == nullptr) {
    return Status::Unavailable("cannot serve metrics on " + ports + ": " +
                               (text[0] != '\0' ? std::string(text) : "the server did not start"));
  }
  mg_set_request_handler(server->ctx_, "/metrics$", &MetricsServer::Handle, server.get());
  mg_server_port bound[4];
  std::memset(bound, 0, sizeof(bound));
  const int n = mg_get_server_ports(server->ctx_, 4, bound);
  server->port_ = n > 0 ? bound[0].port : address->port;
  return server;
}

namespace {

// Opens and drops a connection to `address`:`port` (the wildcard addresses
// as loopback), to wake a server polling its listening socket.
void Poke(const ListenAddress& address, int port) {
  sockaddr_storage sa;
  std::memset(&sa, 0, sizeof(sa));
  socklen_t len = 0;
  if (address.ipv6) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&sa);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    if (address.host == "::" || inet_pton(AF_INET6, address.host.c_str(), &v6->sin6_addr) != 1) {
      v6->sin6_addr = in6addr_loopback;
    }
    len = sizeof(*v6);
  } else {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&sa);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    if (address.host == "0.0.0.0" || inet_pton(AF_INET, address.host.c_str(), &v4->sin_addr) != 1) {
      v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    len = sizeof(*v4);
  }
  const int fd = ::socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  (void)::connect(fd, reinterpret_cast<sockaddr*>(&sa), len);
  ::close(fd);
}

}  // namespace

MetricsServer::~MetricsServer() {
  if (ctx_ == nullptr) return;
  // civetweb's master thread looks at its stop flag only between polls of
  // the listening socket, which time out after 2 s: mg_stop would wait that
  // long at every exit. A connection made while it waits wakes the poll.
  std::atomic<bool> stopped{false};
  std::thread stopper([this, &stopped] {
    mg_stop(ctx_);
    stopped.store(true);
  });
  while (!stopped.load()) {
    Poke(address_, port_);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stopper.join();
}

std::string MetricsServer::url() const {
  const std::string host = address_.ipv6 ? "[" + address_.host + "]" : address_.host;
  return "http://" + host + ":" + std::to_string(port_) + "/metrics";
}

}  // namespace sluice
