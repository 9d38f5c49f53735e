// WanProxy behaviour seen from outside: blocking POSIX sockets on both ends
// (no Asio here: one Asio translation unit per target is enough), real time.
// Lower bounds are the strict behaviour and hold for every sample; upper bounds
// are checked on the fastest of a few samples, because load on a shared machine
// only ever adds delay (a proxy bug that adds delay shows in every sample).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "wan/wan_proxy.h"

namespace hyperpool::wan {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kRtt = milliseconds(20);
// Scheduling noise allowed on top of the simulated delay.
constexpr auto kSlack = milliseconds(15);
// No blocking call in these tests waits longer than this.
constexpr auto kIoTimeout = std::chrono::seconds(5);

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void SetTimeouts(int fd) {
  timeval tv{static_cast<time_t>(kIoTimeout.count()), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// Connects to 127.0.0.1:port; -1 on failure (errno set).
int Connect(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  SetTimeouts(fd);
  sockaddr_in addr = Loopback(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Reads exactly n bytes, or fewer on EOF, error or timeout.
std::string RecvExact(int fd, std::size_t n) {
  std::string out(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = recv(fd, out.data() + got, n - got, 0);
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  out.resize(got);
  return out;
}

// True if the peer's EOF (or a reset) is the next thing on fd.
bool RecvEnd(int fd) {
  char c;
  const ssize_t r = recv(fd, &c, 1, 0);
  return r == 0 || (r < 0 && errno == ECONNRESET);
}

// A server on 127.0.0.1:0 running `handler(fd)` on a thread per connection.
// The destructor shuts every connection down and joins.
class TestServer {
 public:
  explicit TestServer(std::function<void(int)> handler) : handler_(std::move(handler)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listen_fd_ >= 0);
    sockaddr_in addr = Loopback(0);
    REQUIRE(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(listen(listen_fd_, 64) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~TestServer() {
    shutdown(listen_fd_, SHUT_RDWR);
    accept_thread_.join();
    close(listen_fd_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : connection_threads_) t.join();
  }

  uint16_t port() const { return port_; }

 private:
  void AcceptLoop() {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      SetTimeouts(fd);
      std::lock_guard<std::mutex> lock(mu_);
      open_fds_.push_back(fd);
      connection_threads_.emplace_back([this, fd] {
        handler_(fd);
        std::lock_guard<std::mutex> lock(mu_);
        open_fds_.erase(std::find(open_fds_.begin(), open_fds_.end(), fd));
        close(fd);
      });
    }
  }

  std::function<void(int)> handler_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<int> open_fds_;
  std::vector<std::thread> connection_threads_;
};

// Echoes until EOF, then half-closes.
void Echo(int fd) {
  std::vector<char> buf(64 * 1024);
  for (;;) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) break;
    if (!SendAll(fd, std::string_view(buf.data(), static_cast<std::size_t>(n)))) return;
  }
  shutdown(fd, SHUT_WR);
}

std::unique_ptr<WanProxy> StartProxy(uint16_t target_port, std::chrono::microseconds rtt,
                                     std::size_t max_queued = std::size_t{4} << 20) {
  WanOptions options;
  options.target_port = target_port;
  options.rtt = rtt;
  options.max_queued_bytes = max_queued;
  auto proxy = WanProxy::StartThread(options);
  REQUIRE(proxy.ok());
  REQUIRE((*proxy)->port() != 0);
  return std::move(*proxy);
}

// Times one request/response of `message` on an open connection.
Clock::duration RoundTrip(int fd, std::string_view message) {
  const auto start = Clock::now();
  REQUIRE(SendAll(fd, message));
  REQUIRE(RecvExact(fd, message.size()) == message);
  return Clock::now() - start;
}

Clock::duration Median(std::vector<Clock::duration> samples) {
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

Clock::duration Fastest(const std::vector<Clock::duration>& samples) {
  return *std::min_element(samples.begin(), samples.end());
}

constexpr int kAttempts = 3;

TEST_CASE("WanProxy reports the bound port and address") {
  TestServer server(Echo);
  auto proxy = StartProxy(server.port(), kRtt);
  CHECK(proxy->listen_address() == "127.0.0.1:" + std::to_string(proxy->port()));
}

TEST_CASE("a round trip on an established connection costs one RTT") {
  TestServer server(Echo);
  auto proxy = StartProxy(server.port(), kRtt);
  const int fd = Connect(proxy->port());
  REQUIRE(fd >= 0);
  RoundTrip(fd, "warm-up");
  std::vector<Clock::duration> samples;
  for (int i = 0; i < 5; ++i) samples.push_back(RoundTrip(fd, "ping " + std::to_string(i)));
  for (auto sample : samples) {
    CAPTURE(Ms(sample));
    CHECK(sample >= kRtt);
  }
  CAPTURE(Ms(Fastest(samples)), Ms(Median(samples)));
  CHECK(Fastest(samples) < kRtt + kSlack);
  close(fd);
}

TEST_CASE("the first request on a new connection costs two RTTs: connect hold plus round trip") {
  TestServer server(Echo);
  auto proxy = StartProxy(server.port(), kRtt);
  std::vector<Clock::duration> samples;
  for (int i = 0; i < kAttempts; ++i) {
    const auto start = Clock::now();
    const int fd = Connect(proxy->port());
    REQUIRE(fd >= 0);
    REQUIRE(SendAll(fd, "hello"));  // Sent at once: the proxy must count it as sent after the hold.
    REQUIRE(RecvExact(fd, 5) == "hello");
    samples.push_back(Clock::now() - start);
    close(fd);
    CAPTURE(Ms(samples.back()));
    CHECK(samples.back() >= 2 * kRtt);
  }
  CAPTURE(Ms(Fastest(samples)));
  CHECK(Fastest(samples) < 2 * kRtt + kSlack);
}

TEST_CASE("pipelined messages share one RTT instead of queueing behind each other") {
  TestServer server(Echo);
  auto proxy = StartProxy(server.port(), kRtt);
  const int fd = Connect(proxy->port());
  REQUIRE(fd >= 0);
  RoundTrip(fd, "warm-up");
  std::vector<Clock::duration> samples;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::string expected;
    const auto start = Clock::now();
    for (int i = 0; i < 10; ++i) {
      const std::string message = "message " + std::to_string(i) + ";";
      REQUIRE(SendAll(fd, message));
      expected += message;
    }
    REQUIRE(RecvExact(fd, expected.size()) == expected);
    samples.push_back(Clock::now() - start);
    CAPTURE(Ms(samples.back()));
    CHECK(samples.back() >= kRtt);
  }
  CAPTURE(Ms(Fastest(samples)));
  CHECK(Fastest(samples) < kRtt + kSlack);  // Not 10 x RTT.
  close(fd);
}

TEST_CASE("messages sent apart each come back one RTT after they were sent") {
  // The release times are absolute: a stream of spaced sends is shifted by RTT,
  // not stretched.
  TestServer server(Echo);
  auto proxy = StartProxy(server.port(), kRtt);
  const int fd = Connect(proxy->port());
  REQUIRE(fd >= 0);
  RoundTrip(fd, "warm-up");
  constexpr int kCount = 10;
  constexpr auto kSpacing = milliseconds(5);
  // Per attempt, the median delay: a proxy that stretched the stream would
  // delay the later half by several spacings.
  std::vector<Clock::duration> medians;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::vector<Clock::time_point> sent(kCount);
    std::thread sender([&] {
      const auto start = Clock::now();
      for (int i = 0; i < kCount; ++i) {
        std::this_thread::sleep_until(start + i * kSpacing);
        sent[i] = Clock::now();
        SendAll(fd, std::string(1, static_cast<char>('a' + i)));
      }
    });
    std::vector<std::string> got(kCount);
    std::vector<Clock::time_point> received(kCount);
    for (int i = 0; i < kCount; ++i) {
      got[i] = RecvExact(fd, 1);
      received[i] = Clock::now();
    }
    sender.join();
    std::vector<Clock::duration> delays;
    for (int i = 0; i < kCount; ++i) {
      REQUIRE(got[i] == std::string(1, static_cast<char>('a' + i)));
      delays.push_back(received[i] - sent[i]);
      CAPTURE(i, Ms(delays.back()));
      CHECK(delays.back() >= kRtt);
    }
    medians.push_back(Median(delays));
  }
  CAPTURE(Ms(Fastest(medians)));
  CHECK(Fastest(medians) < kRtt + kSlack);
  close(fd);
}

TEST_CASE("ordering is preserved across many small chunks") {
  TestServer server(Echo);
  auto proxy = StartProxy(server.port(), std::chrono::milliseconds(3));
  const int fd = Connect(proxy->port());
  REQUIRE(fd >= 0);
  std::mt19937 rng(20261129);
  std::string data;
  std::vector<std::size_t> sizes;
  for (int i = 0; i < 3000; ++i) {
    const std::size_t size = std::uniform_int_distribution<std::size_t>(1, 200)(rng);
    sizes.push_back(size);
    for (std::size_t j = 0; j < size; ++j) data.push_back(static_cast<char>(rng()));
  }
  std::thread sender([&] {
    std::size_t offset = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      SendAll(fd, std::string_view(data).substr(offset, sizes[i]));
      offset += sizes[i];
      if (i % 100 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  const std::string echoed = RecvExact(fd, data.size());
  sender.join();
  CHECK(echoed.size() == data.size());
  CHECK(echoed == data);
  close(fd);
}

TEST_CASE("a bulk transfer larger than the queue bound arrives intact") {
  TestServer server(Echo);
  auto proxy = StartProxy(server.port(), std::chrono::milliseconds(2), 512 * 1024);
  const int fd = Connect(proxy->port());
  REQUIRE(fd >= 0);
  std::mt19937 rng(7);
  std::string data(12 << 20, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  std::thread sender([&] {
    SendAll(fd, data);
    shutdown(fd, SHUT_WR);
  });
  const std::string echoed = RecvExact(fd, data.size());
  sender.join();
  CHECK(echoed.size() == data.size());
  CHECK(echoed == data);
  CHECK(RecvEnd(fd));
  const WanStats stats = proxy->stats();
  CHECK(stats.bytes_client_to_target == data.size());
  CHECK(stats.bytes_target_to_client == data.size());
  close(fd);
}

TEST_CASE("the proxy stops reading when a direction's queue is full") {
  constexpr std::size_t kBound = 256 * 1024;
  std::atomic<bool> release{false};
  TestServer server([&](int fd) {  // Accepts, never reads.
    while (!release.load()) std::this_thread::sleep_for(milliseconds(5));
  });
  auto proxy = StartProxy(server.port(), std::chrono::milliseconds(2), kBound);
  const int fd = Connect(proxy->port());
  REQUIRE(fd >= 0);
  // Push until the kernel buffers and the proxy's queue are all full: the
  // client's sends then stall.
  const std::string block(64 * 1024, 'x');
  std::size_t sent = 0;
  auto last_progress = Clock::now();
  while (Clock::now() - last_progress < milliseconds(300) && sent < (std::size_t{256} << 20)) {
    const ssize_t n = send(fd, block.data(), block.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      last_progress = Clock::now();
    } else {
      std::this_thread::sleep_for(milliseconds(1));
    }
  }
  const WanStats stats = proxy->stats();
  CAPTURE(sent, stats.peak_queued_bytes);
  CHECK(sent < (std::size_t{256} << 20));  // The sender was stopped.
  CHECK(stats.peak_queued_bytes > kBound);  // The proxy did queue up to the bound ...
  CHECK(stats.peak_queued_bytes <= kBound + 64 * 1024 + 64);  // ... and at most one read past it.
  release = true;
  close(fd);
}

TEST_CASE("a client half-close reaches the target after the data before it") {
  struct Seen {
    std::mutex mu;
    std::string data;
  } seen;
  TestServer server([&](int fd) {
    std::string got;
    char buf[256];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<std::size_t>(n));
    {
      std::lock_guard<std::mutex> lock(seen.mu);
      seen.data = got;
    }
    // The target can still answer after the client's FIN.
    SendAll(fd, "got:" + got);
    shutdown(fd, SHUT_WR);
  });
  auto proxy = StartProxy(server.port(), kRtt);
  const auto start = Clock::now();
  const int fd = Connect(proxy->port());
  REQUIRE(fd >= 0);
  REQUIRE(SendAll(fd, "abc"));
  REQUIRE(shutdown(fd, SHUT_WR) == 0);
  CHECK(RecvExact(fd, 7) == "got:abc");
  CHECK(RecvEnd(fd));
  const auto elapsed = Clock::now() - start;
  CAPTURE(Ms(elapsed));
  CHECK(elapsed >= 2 * kRtt);
  {
    std::lock_guard<std::mutex> lock(seen.mu);
    CHECK(seen.data == "abc");
  }
  close(fd);
}

TEST_CASE("a target close reaches the client after the data before it") {
  TestServer server([](int fd) {
    SendAll(fd, "bye");
    shutdown(fd, SHUT_WR);
  });
  auto proxy = StartProxy(server.port(), kRtt);
  std::vector<Clock::duration> samples;
  for (int i = 0; i < kAttempts; ++i) {
    const auto start = Clock::now();
    const int fd = Connect(proxy->port());
    REQUIRE(fd >= 0);
    CHECK(RecvExact(fd, 3) == "bye");
    samples.push_back(Clock::now() - start);
    CHECK(RecvEnd(fd));
    close(fd);
    CAPTURE(Ms(samples.back()));
    CHECK(samples.back() >= kRtt + kRtt / 2);  // Held one RTT, then half an RTT back.
  }
  CAPTURE(Ms(Fastest(samples)));
  CHECK(Fastest(samples) < kRtt + kRtt / 2 + kSlack);
}

TEST_CASE("a refused target closes the client's connection after the hold") {
  uint16_t dead_port;
  {
    TestServer gone(Echo);
    dead_port = gone.port();
  }
  auto proxy = StartProxy(dead_port, kRtt);
  const auto start = Clock::now();
  const int fd = Connect(proxy->port());
  REQUIRE(fd >= 0);
  CHECK(RecvEnd(fd));
  const auto elapsed = Clock::now() - start;
  CAPTURE(Ms(elapsed));
  CHECK(elapsed >= kRtt);
  CHECK(elapsed < kRtt + std::chrono::seconds(1));
  close(fd);
}

TEST_CASE("rtt 0 passes data straight through") {
  TestServer server(Echo);
  auto proxy = StartProxy(server.port(), std::chrono::microseconds(0));
  const int fd = Connect(proxy->port());
  REQUIRE(fd >= 0);
  std::vector<Clock::duration> samples;
  for (int i = 0; i < 5; ++i) samples.push_back(RoundTrip(fd, "quick " + std::to_string(i)));
  CAPTURE(Ms(Fastest(samples)));
  CHECK(Fastest(samples) < milliseconds(5));
  CHECK(proxy->stats().connections_accepted == 1);
  close(fd);
}

TEST_CASE("Stop closes live connections and the listener") {
  TestServer server(Echo);
  auto proxy = StartProxy(server.port(), std::chrono::milliseconds(2));
  const int fd = Connect(proxy->port());
  REQUIRE(fd >= 0);
  RoundTrip(fd, "alive");
  CHECK(proxy->stats().connections_open == 1);
  const uint16_t port = proxy->port();
  proxy->Stop();
  CHECK(RecvEnd(fd));
  CHECK(proxy->stats().connections_open == 0);
  CHECK(Connect(port) == -1);
  proxy->Stop();  // Idempotent.
  close(fd);
}

}  // namespace
}  // namespace hyperpool::wan
