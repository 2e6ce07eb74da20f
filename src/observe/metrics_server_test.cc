#include "sluice/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

namespace sluice {
namespace {

// Sends `request` raw to 127.0.0.1:port and returns what comes back until
// the server closes (or `read_limit` bytes, after which it hangs up).
std::string Exchange(int port, const std::string& request, size_t read_limit = 1 << 20) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "socket failed";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "connect failed";
  }
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  (void)!write(fd, request.data(), request.size());
  shutdown(fd, SHUT_WR);  // nothing more: a cut-short request ends here
  std::string out;
  char buf[4096];
  while (out.size() < read_limit) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

TEST(ListenAddressTest, ParsesAndDefaultsToLoopback) {
  auto a = ParseListenAddress("9100");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 9100);
  a = ParseListenAddress("0.0.0.0:0");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "0.0.0.0");
  a = ParseListenAddress("localhost:80");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  a = ParseListenAddress("[::1]:9100");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->ipv6);
  for (const char* bad : {"", "abc", "1.2.3:80", "127.0.0.1:", "127.0.0.1:65536", ":80", "[::1]", "[zz]:1",
                          "host.example:80", "127.0.0.1:-1", "127.0.0.1:8O"}) {
    auto r = ParseListenAddress(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.GetCounter("sluice_test_total", "A test counter", {{"tier", "0"}}).Add(42);
    auto s = MetricsServer::Start("127.0.0.1:0", registry_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    ASSERT_GT(server_->port(), 0);
  }
  MetricsRegistry registry_;
  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, ServesTheRegistryAtSlashMetrics) {
  std::string r = Exchange(server_->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
  EXPECT_NE(r.find("text/plain; version=0.0.4"), std::string::npos) << r;
  EXPECT_NE(r.find("sluice_test_total{tier=\"0\"} 42\n"), std::string::npos) << r;
  EXPECT_EQ(server_->url(), "http://127.0.0.1:" + std::to_string(server_->port()) + "/metrics");
}

TEST_F(MetricsServerTest, OtherPathsAndMethodsAreRefused) {
  EXPECT_EQ(Exchange(server_->port(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Exchange(server_->port(), "GET /etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Exchange(server_->port(), "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
                .rfind("HTTP/1.1 405", 0),
            0u);
}

TEST_F(MetricsServerTest, GarbageAndHangupsLeaveTheServerServing) {
  // Garbage, a request cut short, a huge header, binary noise, and a client
  // that reads a few bytes of a big answer and hangs up.
  for (int i = 0; i < 200; ++i) registry_.GetGauge("sluice_big", "Big", {{"i", std::to_string(i)}}).Set(i);
  (void)Exchange(server_->port(), "garbage\r\n\r\n");
  (void)Exchange(server_->port(), "GET /metr");
  (void)Exchange(server_->port(), "GET /metrics HTTP/1.1\r\nX: " + std::string(100000, 'a') + "\r\n\r\n");
  std::string noise;
  for (int i = 0; i < 4096; ++i) noise += static_cast<char>((i * 7919) & 0xff);
  (void)Exchange(server_->port(), noise);
  for (int i = 0; i < 20; ++i) (void)Exchange(server_->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 10);
  std::string r = Exchange(server_->port(), "GET /metrics HTTP/1.0\r\n\r\n");
  EXPECT_NE(r.find("sluice_big{i=\"199\"} 199\n"), std::string::npos) << r.substr(0, 200);
}

TEST_F(MetricsServerTest, APortInUseIsAClearErrorAtStart) {
  const std::string taken = "127.0.0.1:" + std::to_string(server_->port());
  auto second = MetricsServer::Start(taken, registry_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(taken), std::string::npos) << second.status().ToString();
}

TEST(MetricsServerStartTest, AnAddressNotOfThisHostIsRefused) {
  MetricsRegistry r;
  auto s = MetricsServer::Start("192.0.2.1:9100", r);  // TEST-NET-1: never local
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  auto bad = MetricsServer::Start("nonsense", r);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(MetricsServerTest, AScrapeOfAThousandSeriesAnswersFast) {
  for (int i = 0; i < 1000; ++i) registry_.GetGauge("sluice_many", "Many", {{"i", std::to_string(i)}}).Set(i);
  const auto t0 = std::chrono::steady_clock::now();
  std::string r = Exchange(server_->port(), "GET /metrics HTTP/1.0\r\n\r\n");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.find("sluice_many{i=\"999\"} 999\n"), std::string::npos);
  EXPECT_LT(ms, 50);
}

// civetweb polls its listening socket 2 s at a time; a command that served
// metrics must not wait that out at exit.
TEST(MetricsServerStopTest, StoppingDoesNotWaitOutThePoll) {
  MetricsRegistry r;
  for (const char* listen : {"127.0.0.1:0", "0.0.0.0:0"}) {
    auto s = MetricsServer::Start(listen, r);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the master thread is polling
    const auto t0 = std::chrono::steady_clock::now();
    s->reset();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(ms, 1000) << listen;
  }
}

}  // namespace
}  // namespace sluice
