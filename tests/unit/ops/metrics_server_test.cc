// The /metrics and /healthz listener over real loopback sockets: answers,
// draining, the read timeout for a silent peer, the request-size bound,
// Stop() with a connection open; and RenderMetrics over stats snapshots.

#include "ops/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <catch2/catch_test_macros.hpp>

#include "ops/metrics.h"

namespace hyperpool::ops {
namespace {

// A blocking client socket to 127.0.0.1:port; receive calls give up after 5 s.
int Connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

// Everything until the server closes (or the 5 s receive limit).
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string Request(uint16_t port, const std::string& text) {
  int fd = Connect(port);
  ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
  std::string out = ReadAll(fd);
  ::close(fd);
  return out;
}

std::unique_ptr<MetricsServer> StartServer(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  MetricsServerOptions options;
  options.read_timeout = timeout;
  auto server = MetricsServer::Start(options, [] { return std::string("hp_up 1\n"); });
  REQUIRE(server.ok());
  return *std::move(server);
}

TEST_CASE("the listener serves /metrics and /healthz, and 503 once draining") {
  auto server = StartServer();
  REQUIRE(server->port() != 0);
  CHECK(server->address() == "127.0.0.1:" + std::to_string(server->port()));
  const std::string metrics = Request(server->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(metrics.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(metrics.substr(metrics.size() - 8) == "hp_up 1\n");
  CHECK(Request(server->port(), "GET /healthz HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200 OK", 0) == 0);
  server->SetDraining(true);
  CHECK(Request(server->port(), "GET /healthz HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 503", 0) == 0);
}

TEST_CASE("a peer that never finishes its request is closed after the read timeout") {
  auto server = StartServer(std::chrono::milliseconds(200));
  int fd = Connect(server->port());
  ::send(fd, "GET /met", 8, MSG_NOSIGNAL);
  const auto start = std::chrono::steady_clock::now();
  const std::string got = ReadAll(fd);  // returns at the server's close, or after 5 s
  const auto waited = std::chrono::steady_clock::now() - start;
  ::close(fd);
  CHECK(got.empty());
  CHECK(waited < std::chrono::seconds(4));
}

TEST_CASE("a request head over the bound gets 431 and a close, not a bigger buffer") {
  auto server = StartServer();
  std::string text = "GET /metrics HTTP/1.1\r\n";
  while (text.size() < 2 * kMaxRequestHeadBytes) text += "X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
  CHECK(Request(server->port(), text).rfind("HTTP/1.1 431", 0) == 0);
}

TEST_CASE("Stop() returns with a connection still open, and the port is closed after") {
  auto server = StartServer();
  const uint16_t port = server->port();
  int fd = Connect(port);
  const auto start = std::chrono::steady_clock::now();
  server->Stop();
  CHECK(ReadAll(fd).empty());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(4));  // closed, not the 5 s limit
  ::close(fd);
  int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(::connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0);
  ::close(probe);
}

TEST_CASE("connections beyond max_connections are closed at once; those within are served") {
  MetricsServerOptions options;
  options.max_connections = 2;
  auto started = MetricsServer::Start(options, [] { return std::string("hp_up 1\n"); });
  REQUIRE(started.ok());
  auto& server = *started;
  int a = Connect(server->port());
  int b = Connect(server->port());
  // Both are being served (each waits for its request head) once a request
  // on a third connection is refused: poll for that, bounded.
  std::string third;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  do {
    int c = Connect(server->port());
    constexpr std::string_view kRequest = "GET /healthz HTTP/1.1\r\n\r\n";
    ::send(c, kRequest.data(), kRequest.size(), MSG_NOSIGNAL);
    third = ReadAll(c);
    ::close(c);
  } while (!third.empty() && std::chrono::steady_clock::now() < deadline);
  CHECK(third.empty());  // closed without an answer
  const std::string text = "GET /healthz HTTP/1.1\r\n\r\n";
  ::send(a, text.data(), text.size(), MSG_NOSIGNAL);
  CHECK(ReadAll(a).rfind("HTTP/1.1 200 OK", 0) == 0);
  ::close(a);
  ::close(b);
}

TEST_CASE("a host that is not an IP address is refused") {
  MetricsServerOptions options;
  options.host = "not-an-address";
  CHECK(!MetricsServer::Start(options, [] { return std::string(); }).ok());
}

TEST_CASE("RenderMetrics exposes pools, transactions, histogram, pins, cancels and both cache tiers") {
  ProcessMetrics m;
  EndpointStats e;
  e.origin_open = 3;
  e.origin_idle = 1;
  e.waiting = 4;
  e.transactions = 7;
  e.queries = 9;
  e.pins_listen = 2;
  e.cancels_forwarded = 5;
  e.cache_hits = 11;
  e.transaction_time.counts[0] = 1;
  e.transaction_time.count = 1;
  e.transaction_time.sum_us = 50;
  m.endpoint = e;
  m.pool_max = 10;
  ClientStats c;
  c.sessions = 2;
  c.accepted = 6;
  c.cache_enabled = true;
  c.cache_local_hits = 13;
  m.client = c;
  const std::string t = RenderMetrics(m);
  CHECK(t.find("hyperpool_pool_connections{state=\"active\"} 2\n") != std::string::npos);
  CHECK(t.find("hyperpool_pool_connections{state=\"idle\"} 1\n") != std::string::npos);
  CHECK(t.find("hyperpool_pool_max_connections 10\n") != std::string::npos);
  CHECK(t.find("hyperpool_pool_waiting 4\n") != std::string::npos);
  CHECK(t.find("hyperpool_transactions_total 7\n") != std::string::npos);
  CHECK(t.find("hyperpool_queries_total 9\n") != std::string::npos);
  CHECK(t.find("hyperpool_transaction_duration_seconds_count 1\n") != std::string::npos);
  CHECK(t.find("# TYPE hyperpool_pool_acquire_wait_seconds histogram\n") != std::string::npos);
  CHECK(t.find("hyperpool_pins_total{reason=\"listen\"} 2\n") != std::string::npos);
  CHECK(t.find("hyperpool_cancels_total{result=\"forwarded\"} 5\n") != std::string::npos);
  CHECK(t.find("hyperpool_cache_hits_total{tier=\"endpoint\"} 11\n") != std::string::npos);
  CHECK(t.find("hyperpool_cache_hits_total{tier=\"client\"} 13\n") != std::string::npos);
  CHECK(t.find("hyperpool_client_connections 2\n") != std::string::npos);
  CHECK(t.find("hyperpool_client_connections_accepted_total 6\n") != std::string::npos);
  // One TYPE per family even with several samples.
  CHECK(t.find("# TYPE hyperpool_cache_hits_total counter") == t.rfind("# TYPE hyperpool_cache_hits_total counter"));
}

TEST_CASE("RenderMetrics with several databases: one sample per database, each family's samples together") {
  ProcessMetrics m;
  EndpointStats a;
  a.transactions = 7;
  a.pool_max_size = 4;
  a.origin_open = 2;
  EndpointStats b;
  b.transactions = 3;
  b.pool_max_size = 6;
  b.waiting = 1;
  m.endpoint = a;  // the default database's, for the cache families
  m.databases = {{"alpha", a}, {"beta", b}};
  const std::string t = RenderMetrics(m);
  CHECK(t.find("hyperpool_transactions_total{database=\"alpha\"} 7\n") != std::string::npos);
  CHECK(t.find("hyperpool_transactions_total{database=\"beta\"} 3\n") != std::string::npos);
  CHECK(t.find("hyperpool_pool_max_connections{database=\"beta\"} 6\n") != std::string::npos);
  CHECK(t.find("hyperpool_pool_waiting{database=\"beta\"} 1\n") != std::string::npos);
  CHECK(t.find("hyperpool_pool_connections{database=\"alpha\",state=\"active\"} 2\n") != std::string::npos);
  CHECK(t.find("hyperpool_pins_total{database=\"beta\",reason=\"listen\"} 0\n") != std::string::npos);
  CHECK(t.find("hyperpool_transaction_duration_seconds_count{database=\"beta\"} 0\n") != std::string::npos);
  CHECK(t.find("hyperpool_transactions_total 7") == std::string::npos);  // no unlabelled sample beside them
  // Each family's samples follow its TYPE line before the next family starts.
  const size_t type = t.find("# TYPE hyperpool_transactions_total counter\n");
  const size_t beta = t.find("hyperpool_transactions_total{database=\"beta\"}");
  REQUIRE(type != std::string::npos);
  CHECK(t.find("# TYPE", type + 1) > beta);
}

TEST_CASE("RenderMetrics exposes the Client's login time as a histogram in seconds") {
  ProcessMetrics m;
  ClientStats c;
  c.login_time.counts[3] = 2;   // <= 1 ms
  c.login_time.counts[5] = 1;   // <= 5 ms
  c.login_time.counts.back() = 1;  // above 30 s
  c.login_time.count = 4;
  c.login_time.sum_us = 31004000;
  m.client = c;
  const std::string t = RenderMetrics(m);
  CHECK(t.find("# TYPE hyperpool_client_login_duration_seconds histogram\n") != std::string::npos);
  CHECK(t.find("hyperpool_client_login_duration_seconds_bucket{le=\"0.001\"} 2\n") != std::string::npos);
  CHECK(t.find("hyperpool_client_login_duration_seconds_bucket{le=\"0.005\"} 3\n") != std::string::npos);
  CHECK(t.find("hyperpool_client_login_duration_seconds_bucket{le=\"+Inf\"} 4\n") != std::string::npos);
  CHECK(t.find("hyperpool_client_login_duration_seconds_sum 31.004\n") != std::string::npos);
  CHECK(t.find("hyperpool_client_login_duration_seconds_count 4\n") != std::string::npos);
}

TEST_CASE("RenderMetrics has no login histogram without a Client (hyperpool endpoint)") {
  ProcessMetrics m;
  m.endpoint = EndpointStats{};
  CHECK(RenderMetrics(m).find("hyperpool_client_login") == std::string::npos);
}

TEST_CASE("RenderMetrics for a Client alone (hyperpool client) has no Endpoint families") {
  ProcessMetrics m;
  m.client = ClientStats{};
  const std::string t = RenderMetrics(m);
  CHECK(t.find("hyperpool_client_connections 0\n") != std::string::npos);
  CHECK(t.find("hyperpool_client_login_duration_seconds_count 0\n") != std::string::npos);
  CHECK(t.find("hyperpool_pool_") == std::string::npos);
  CHECK(t.find("hyperpool_cache_hits_total") == std::string::npos);  // its tier is off
}

}  // namespace
}  // namespace hyperpool::ops
