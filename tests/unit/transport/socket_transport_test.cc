// The socket transport over loopback: a LinkListener and a SocketTransport in
// one process, each on its own io_context and thread (as the Endpoint and a
// Client worker would be), with certificates from tests/support/gencerts.sh.
#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <asio/write.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <fmt/format.h>

#include "hyperpool/transport.h"
#include "support/io_worker.h"
#include "support/pg_fixture.h"
#include "tls/tls_context.h"
#include "tls/tls_stream.h"

namespace hyperpool {
namespace {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;
using hyperpool::testing::TestCerts;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);
constexpr char kSecret[] = "correct horse battery staple, twice";

std::string Str(absl::string_view s) { return std::string(s.data(), s.size()); }

const hyperpool::testing::TestCerts& Certs() { return hyperpool::testing::SharedTestCerts(); }

// An io_context run by its own thread until Stop().
using Worker = hyperpool::testing::IoWorker;

// Runs `coro` on `io` and waits (bounded) for its result.
template <typename T>
T Await(asio::io_context& io, asio::awaitable<T> coro, seconds limit = seconds(20)) {
  auto future = asio::co_spawn(io, std::move(coro), asio::use_future);
  if (future.wait_for(limit) != std::future_status::ready) FAIL("a coroutine did not finish within the deadline");
  return future.get();
}

// Polls `condition` until it holds or `limit` passes.
bool WaitFor(const std::function<bool()>& condition, seconds limit = seconds(20)) {
  const auto deadline = Clock::now() + limit;
  while (!condition()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

// The Endpoint stand-in: keeps the links it is given.
class RecordingAcceptor final : public LinkAcceptor {
 public:
  void Accept(std::unique_ptr<Link> link) override {
    std::lock_guard lock(mu_);
    links_.push_back(std::move(link));
    ++count_;
    cv_.notify_all();
  }
  // The next accepted link, or nullptr after `limit`.
  std::unique_ptr<Link> Next(seconds limit = seconds(20)) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, limit, [&] { return !links_.empty(); })) return nullptr;
    auto link = std::move(links_.front());
    links_.pop_front();
    return link;
  }
  std::size_t count() {
    std::lock_guard lock(mu_);
    return count_;
  }
  void Clear() {
    std::lock_guard lock(mu_);
    links_.clear();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Link>> links_;
  std::size_t count_ = 0;
};

LinkListenerOptions ListenerOptions() {
  LinkListenerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.tls_cert_file = Certs().server_cert;
  options.tls_key_file = Certs().server_key;
  options.link_secret = kSecret;
  return options;
}

SocketTransportOptions TransportOptions(std::uint16_t port, std::size_t preopen = 0) {
  SocketTransportOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.tls_ca_file = Certs().ca_cert;
  options.link_secret = kSecret;
  options.preopen = preopen;
  return options;
}

// A listener on the "endpoint" worker and a transport on the "client" worker.
struct Harness {
  Worker endpoint;
  Worker client;
  RecordingAcceptor acceptor;
  std::unique_ptr<LinkListener> listener;
  std::unique_ptr<SocketTransport> transport;
  std::vector<std::unique_ptr<Link>> keep;  // links to destroy with the harness

  explicit Harness(LinkListenerOptions listener_options = ListenerOptions()) {
    auto made = MakeLinkListener(endpoint.io.get_executor(), acceptor, std::move(listener_options));
    if (!made.ok()) FAIL("MakeLinkListener: " << made.status().ToString());
    listener = *std::move(made);
  }
  void StartTransport(SocketTransportOptions options) {
    auto made = MakeSocketTransport({client.io.get_executor()}, std::move(options));
    if (!made.ok()) FAIL("MakeSocketTransport: " << made.status().ToString());
    transport = *std::move(made);
  }
  void StartTransport(std::size_t preopen) { StartTransport(TransportOptions(listener->port(), preopen)); }

  absl::StatusOr<std::unique_ptr<Link>> Open(std::string bytes) {
    return Await(client.io, transport->Open(client.io.get_executor(), std::move(bytes)));
  }
  std::unique_ptr<Link> OpenOk(std::string bytes) {
    auto link = Open(std::move(bytes));
    if (!link.ok()) FAIL("Open: " << link.status().ToString());
    return *std::move(link);
  }

  ~Harness() {
    if (transport) transport->Stop();
    if (listener) listener->Stop();
    client.Stop();
    endpoint.Stop();
    keep.clear();
    acceptor.Clear();
    transport.reset();
    listener.reset();
  }
};

// Receives on `link` (on `io`) until `n` bytes have arrived or it fails.
absl::StatusOr<std::string> ReceiveExactly(asio::io_context& io, Link& link, std::size_t n) {
  return Await(io, [&]() -> asio::awaitable<absl::StatusOr<std::string>> {
    std::string got;
    while (got.size() < n) {
      auto r = co_await link.Receive(got);
      if (!r.ok()) co_return r.status();
    }
    co_return got;
  }());
}

absl::Status SendOn(asio::io_context& io, Link& link, std::string bytes) {
  return Await(io, link.Send(std::move(bytes)));
}

// A StartupMessage-shaped hello (as the Client sends) and a simple Query.
std::string Hello() {
  std::string body;
  auto put32 = [](std::string& s, std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((v >> shift) & 0xff));
  };
  std::string params = std::string("application_name\0test\0hyperpool.session_id\0c0ffee\0\0", 52);
  put32(body, 8 + params.size());
  put32(body, 196608);
  return body + params;
}

std::string Query(const std::string& sql) {
  std::string out = "Q";
  const std::uint32_t len = 4 + sql.size() + 1;
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((len >> shift) & 0xff));
  out += sql;
  out.push_back('\0');
  return out;
}

TEST_CASE("a socket link carries bytes in order both ways") {
  Harness h;
  h.StartTransport(0);
  auto client_link = h.OpenOk("hello");
  auto endpoint_link = h.acceptor.Next();
  REQUIRE(endpoint_link != nullptr);
  auto first = ReceiveExactly(h.endpoint.io, *endpoint_link, 5);
  REQUIRE(first.ok());
  CHECK(*first == "hello");

  for (int i = 0; i < 5; ++i) REQUIRE(SendOn(h.endpoint.io, *endpoint_link, "e" + std::to_string(i)).ok());
  auto from_endpoint = ReceiveExactly(h.client.io, *client_link, 10);
  REQUIRE(from_endpoint.ok());
  CHECK(*from_endpoint == "e0e1e2e3e4");

  for (int i = 0; i < 5; ++i) REQUIRE(SendOn(h.client.io, *client_link, "c" + std::to_string(i)).ok());
  auto from_client = ReceiveExactly(h.endpoint.io, *endpoint_link, 10);
  REQUIRE(from_client.ok());
  CHECK(*from_client == "c0c1c2c3c4");

  // Receive appends, keeping what the caller already buffered.
  REQUIRE(SendOn(h.endpoint.io, *endpoint_link, "tail").ok());
  std::string kept = Await(h.client.io, [&]() -> asio::awaitable<std::string> {
    std::string buffer = "head:";
    while (buffer.size() < 9) {
      auto n = co_await client_link->Receive(buffer);
      if (!n.ok()) break;
    }
    co_return buffer;
  }());
  CHECK(kept == "head:tail");

  CHECK(h.transport->Stats().opened_on_demand == 1);
  CHECK(h.transport->Stats().opened_preopened == 0);
  CHECK(h.listener->Stats().accepted == 1);
}

TEST_CASE("large transfers in both directions at once arrive intact") {
  Harness h;
  h.StartTransport(0);
  auto client_link = h.OpenOk("x");
  auto endpoint_link = h.acceptor.Next();
  REQUIRE(endpoint_link != nullptr);
  REQUIRE(ReceiveExactly(h.endpoint.io, *endpoint_link, 1).ok());

  constexpr std::size_t kBytes = 8u << 20;
  auto pattern = [](std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::string data(kBytes, '\0');
    for (auto& c : data) c = static_cast<char>(rng());
    return data;
  };
  const std::string up = pattern(1), down = pattern(2);
  // Each end writes 8 MiB while the other does too: neither may wait for the
  // other to read first (both send in chunks of varying size).
  auto send_all = [](Link& link, const std::string& data) -> asio::awaitable<absl::Status> {
    std::mt19937 rng(7);
    std::size_t at = 0;
    while (at < data.size()) {
      std::size_t n = std::min<std::size_t>(data.size() - at, 1 + rng() % (256 << 10));
      absl::Status st = co_await link.Send(data.substr(at, n));
      if (!st.ok()) co_return st;
      at += n;
    }
    co_return absl::OkStatus();
  };
  auto receive_all = [](Link& link, std::size_t n) -> asio::awaitable<std::string> {
    std::string got;
    while (got.size() < n) {
      auto r = co_await link.Receive(got);
      if (!r.ok()) break;
    }
    co_return got;
  };
  auto client_sent = asio::co_spawn(h.client.io, send_all(*client_link, up), asio::use_future);
  auto endpoint_sent = asio::co_spawn(h.endpoint.io, send_all(*endpoint_link, down), asio::use_future);
  auto endpoint_got = asio::co_spawn(h.endpoint.io, receive_all(*endpoint_link, kBytes), asio::use_future);
  auto client_got = asio::co_spawn(h.client.io, receive_all(*client_link, kBytes), asio::use_future);
  for (auto* f : {&client_sent, &endpoint_sent}) {
    REQUIRE(f->wait_for(seconds(60)) == std::future_status::ready);
    CHECK(f->get().ok());
  }
  REQUIRE(endpoint_got.wait_for(seconds(60)) == std::future_status::ready);
  REQUIRE(client_got.wait_for(seconds(60)) == std::future_status::ready);
  CHECK(endpoint_got.get() == up);
  CHECK(client_got.get() == down);
}

TEST_CASE("bytes sent before Close reach the peer, then both ends report the link closed") {
  Harness h;
  h.StartTransport(0);
  auto client_link = h.OpenOk("x");
  auto endpoint_link = h.acceptor.Next();
  REQUIRE(endpoint_link != nullptr);
  REQUIRE(ReceiveExactly(h.endpoint.io, *endpoint_link, 1).ok());

  REQUIRE(SendOn(h.client.io, *client_link, "last words").ok());
  asio::post(h.client.io, [&] { client_link->Close(); });
  auto got = ReceiveExactly(h.endpoint.io, *endpoint_link, 10);
  REQUIRE(got.ok());
  CHECK(*got == "last words");
  auto after = ReceiveExactly(h.endpoint.io, *endpoint_link, 1);
  REQUIRE_FALSE(after.ok());
  CHECK(after.status().code() == absl::StatusCode::kUnavailable);
  // The peer's end of stream was seen: its Send fails at once.
  CHECK_FALSE(SendOn(h.endpoint.io, *endpoint_link, "anyone?").ok());
  // The closed end fails every later operation.
  auto send_after_close = SendOn(h.client.io, *client_link, "more");
  CHECK(send_after_close.code() == absl::StatusCode::kCancelled);
  CHECK_FALSE(ReceiveExactly(h.client.io, *client_link, 1).ok());
}

TEST_CASE("Close fails a pending Receive on both ends") {
  Harness h;
  h.StartTransport(0);
  auto client_link = h.OpenOk("x");
  auto endpoint_link = h.acceptor.Next();
  REQUIRE(endpoint_link != nullptr);
  REQUIRE(ReceiveExactly(h.endpoint.io, *endpoint_link, 1).ok());

  auto pending_receive = [](Link& link) -> asio::awaitable<absl::StatusCode> {
    std::string buffer;
    auto n = co_await link.Receive(buffer);
    co_return n.status().code();
  };
  // Both Receives start (and wait: nothing was sent) before the Close,
  // which is queued behind them on the client's single thread.
  auto client_waiting = asio::co_spawn(h.client.io, pending_receive(*client_link), asio::use_future);
  auto endpoint_waiting = asio::co_spawn(h.endpoint.io, pending_receive(*endpoint_link), asio::use_future);
  asio::post(h.client.io, [&] { client_link->Close(); });
  REQUIRE(client_waiting.wait_for(seconds(10)) == std::future_status::ready);
  CHECK(client_waiting.get() != absl::StatusCode::kOk);
  REQUIRE(endpoint_waiting.wait_for(seconds(10)) == std::future_status::ready);
  CHECK(endpoint_waiting.get() == absl::StatusCode::kUnavailable);
}

TEST_CASE("a link opened ahead carries the hello and the buffered query as its first message") {
  Harness h;
  h.StartTransport(2);
  REQUIRE(WaitFor([&] { return h.transport->Stats().preopen_ready == 2; }));
  CHECK(h.listener->Stats().accepted == 0);  // nothing is handed over before its first bytes
  // Nothing arrives on a ready link by itself (e.g. TLS 1.3 session tickets
  // after the answer), or the pool would take it for closed.
  CHECK(h.transport->Stats().preopen_dead == 0);

  const std::string first = Hello() + Query("SELECT 1");
  auto client_link = h.OpenOk(first);
  CHECK(h.transport->Stats().opened_preopened == 1);
  CHECK(h.transport->Stats().opened_on_demand == 0);
  auto endpoint_link = h.acceptor.Next();
  REQUIRE(endpoint_link != nullptr);
  // One Receive on the Endpoint's side returns the hello and the query together.
  std::string received = Await(h.endpoint.io, [&]() -> asio::awaitable<std::string> {
    std::string buffer;
    auto n = co_await endpoint_link->Receive(buffer);
    if (!n.ok()) co_return "error: " + Str(n.status().message());
    co_return buffer;
  }());
  CHECK(received == first);
  // The pool refills behind the taken link.
  CHECK(WaitFor([&] { return h.transport->Stats().preopen_ready == 2; }));
  h.keep.push_back(std::move(client_link));
  h.keep.push_back(std::move(endpoint_link));
}

TEST_CASE("Open latency with a link opened ahead and without (reported, not asserted)") {
  Harness h;
  h.StartTransport(4);
  REQUIRE(WaitFor([&] { return h.transport->Stats().preopen_ready == 4; }));
  auto time_open = [&](SocketTransport& transport) {
    const auto start = Clock::now();
    auto link = Await(h.client.io, transport.Open(h.client.io.get_executor(), Hello()));
    const auto elapsed = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (!link.ok()) FAIL(link.status().ToString());
    h.keep.push_back(*std::move(link));
    return elapsed;
  };
  std::vector<double> ahead, on_demand;
  for (int i = 0; i < 4; ++i) ahead.push_back(time_open(*h.transport));
  auto cold = MakeSocketTransport({h.client.io.get_executor()}, TransportOptions(h.listener->port(), 0));
  REQUIRE(cold.ok());
  for (int i = 0; i < 4; ++i) on_demand.push_back(time_open(**cold));
  (*cold)->Stop();
  std::sort(ahead.begin(), ahead.end());
  std::sort(on_demand.begin(), on_demand.end());
  fmt::print("socket transport Open() on loopback, median of 4: opened ahead {:.0f} us, on demand {:.0f} us\n",
             (ahead[1] + ahead[2]) / 2, (on_demand[1] + on_demand[2]) / 2);
  CHECK(h.transport->Stats().opened_preopened == 4);
  CHECK((*cold)->Stats().opened_on_demand == 4);
  REQUIRE(WaitFor([&] { return h.acceptor.count() == 8; }));
}

TEST_CASE("a wrong link secret is rejected and no link reaches the acceptor") {
  Harness h;
  SocketTransportOptions options = TransportOptions(h.listener->port(), 1);
  options.link_secret = "not the secret the endpoint knows";
  std::vector<std::string> log;
  std::mutex log_mu;
  options.log = [&](const std::string& line) {
    std::lock_guard lock(log_mu);
    log.push_back(line);
  };
  h.StartTransport(options);
  // Opening ahead fails in the background, and says why.
  REQUIRE(WaitFor([&] { return h.transport->Stats().preopen_failures >= 1; }));
  CHECK(h.transport->Stats().preopen_ready == 0);
  {
    std::lock_guard lock(log_mu);
    REQUIRE_FALSE(log.empty());
    CHECK(log.front().find("rejected the link secret") != std::string::npos);
  }
  // On demand the secret and the first bytes go out together, so the
  // rejection arrives with the first Receive.
  auto link = h.OpenOk(Hello());
  auto got = ReceiveExactly(h.client.io, *link, 1);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(h.listener->Stats().rejected >= 2);
  CHECK(h.acceptor.count() == 0);
  h.keep.push_back(std::move(link));
}

// A client of our own on the client worker: raw TCP, optionally TLS.
struct RawPeer {
  // Connects, optionally completes TLS (verifying like a Client), writes
  // `bytes`, then reads until the listener closes the connection. Returns
  // what the listener sent, or an error if it did not close within `limit`.
  static absl::StatusOr<std::string> Run(Harness& h, bool tls, std::string bytes, seconds limit = seconds(20)) {
    return Await(
        h.client.io,
        [&]() -> asio::awaitable<absl::StatusOr<std::string>> {
          tcp::socket socket(h.client.io);
          auto [ec] = co_await socket.async_connect(
              tcp::endpoint(asio::ip::make_address("127.0.0.1"), h.listener->port()), kAsTuple);
          if (ec) co_return absl::UnavailableError(ec.message());
          std::string got;
          std::array<char, 4096> chunk;
          if (!tls) {
            if (!bytes.empty()) {
              auto [wec, wn] = co_await asio::async_write(socket, asio::buffer(bytes), kAsTuple);
              (void)wec;
              (void)wn;
            }
            for (;;) {
              auto [rec, n] = co_await socket.async_read_some(asio::buffer(chunk), kAsTuple);
              if (rec) break;
              got.append(chunk.data(), n);
            }
            co_return got;
          }
          auto context = tls::ClientContext::Create({.mode = tls::SslMode::kVerifyFull, .root_cert_file = Certs().ca_cert});
          if (!context.ok()) co_return context.status();
          auto stream = tls::TlsStream::Client(std::move(socket), *context, "127.0.0.1");
          if (!stream.ok()) co_return stream.status();
          absl::Status hs = co_await stream->Handshake();
          if (!hs.ok()) co_return hs;
          if (!bytes.empty()) {
            absl::Status st = co_await stream->WriteAll(asio::buffer(bytes));
            (void)st;
          }
          for (;;) {
            auto n = co_await stream->ReadSome(asio::buffer(chunk));
            if (!n.ok() || *n == 0) break;
            got.append(chunk.data(), *n);
          }
          co_return got;
        }(),
        limit);
  }
};

TEST_CASE("a plaintext client is disconnected without a link") {
  Harness h;
  // A PostgreSQL StartupMessage, as a driver pointed at the wrong port would send.
  auto got = RawPeer::Run(h, /*tls=*/false, Hello());
  REQUIRE(got.ok());
  CHECK(got->find("HPOK") == std::string::npos);
  CHECK(WaitFor([&] { return h.listener->Stats().tls_failures == 1; }));
  CHECK(h.acceptor.count() == 0);
  CHECK(WaitFor([&] { return h.listener->Stats().pending == 0; }));
}

TEST_CASE("a proof frame that is not one is disconnected without an answer") {
  Harness h;
  auto bad = GENERATE(std::string("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(20, 'x')),
                      std::string(1 << 20, '\xff'));
  auto got = RawPeer::Run(h, /*tls=*/true, bad);
  REQUIRE(got.ok());
  CHECK(got->empty());
  CHECK(h.listener->Stats().rejected == 1);
  CHECK(h.acceptor.count() == 0);
}

TEST_CASE("a proof with the wrong secret is answered HPNO and closed") {
  Harness h;
  std::string frame = "HPLINK/1" + std::string(32, 'A') + Hello();
  auto got = RawPeer::Run(h, /*tls=*/true, frame);
  REQUIRE(got.ok());
  CHECK(*got == "HPNO");
  CHECK(h.acceptor.count() == 0);
}

TEST_CASE("a peer that stays silent is disconnected after the handshake timeout") {
  LinkListenerOptions options = ListenerOptions();
  options.handshake_timeout = milliseconds(300);
  Harness h(options);
  const bool tls = GENERATE(false, true);  // silent before TLS, or after it
  auto got = RawPeer::Run(h, tls, "", seconds(10));
  REQUIRE(got.ok());  // closed by the listener, not by our deadline
  CHECK(got->empty());
  CHECK(WaitFor([&] { return h.listener->Stats().timeouts == 1; }));
  CHECK(WaitFor([&] { return h.listener->Stats().pending == 0; }));
}

TEST_CASE("a verified link that never sends its first bytes is closed after first_bytes_timeout") {
  LinkListenerOptions options = ListenerOptions();
  options.first_bytes_timeout = milliseconds(300);
  Harness h(options);
  SocketTransportOptions transport_options = TransportOptions(h.listener->port(), 1);
  h.StartTransport(transport_options);
  // The listener closes the idle link; the pool notices (without reading
  // from it) and replaces it, so no session is ever handed a dead link.
  REQUIRE(WaitFor([&] { return h.transport->Stats().preopen_dead >= 2; }));
  // The listener counts a close after it made it: the transport may see it first.
  CHECK(WaitFor([&] { return h.listener->Stats().idle_closed >= 2; }));
  CHECK(h.acceptor.count() == 0);
}

TEST_CASE("an unreachable endpoint fails Open promptly with a clear status") {
  Worker client;
  // A bound socket that does not listen: connections to its port are refused.
  tcp::acceptor bound(client.io);
  bound.open(tcp::v4());
  bound.bind(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const std::uint16_t port = bound.local_endpoint().port();
  auto transport = MakeSocketTransport({client.io.get_executor()}, TransportOptions(port, 0));
  REQUIRE(transport.ok());
  auto link = Await(client.io, (*transport)->Open(client.io.get_executor(), Hello()));
  REQUIRE_FALSE(link.ok());
  CHECK(link.status().code() == absl::StatusCode::kUnavailable);
  CHECK(Str(link.status().message()).find(fmt::format("127.0.0.1:{}", port)) != std::string::npos);
  CHECK((*transport)->Stats().open_failures == 1);
  (*transport)->Stop();
  client.Stop();
}

TEST_CASE("an endpoint that accepts TCP but never answers TLS fails Open after connect_timeout") {
  Worker client;
  tcp::acceptor silent(client.io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));  // never accepts
  SocketTransportOptions options = TransportOptions(silent.local_endpoint().port(), 0);
  options.connect_timeout = milliseconds(300);
  auto transport = MakeSocketTransport({client.io.get_executor()}, options);
  REQUIRE(transport.ok());
  auto link = Await(client.io, (*transport)->Open(client.io.get_executor(), Hello()), seconds(10));
  REQUIRE_FALSE(link.ok());
  CHECK(link.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(Str(link.status().message()).find("timed out") != std::string::npos);
  (*transport)->Stop();
  client.Stop();
}

TEST_CASE("the endpoint's certificate must verify against the CA and name the host") {
  Harness h;
  auto [ca, server_name, expected] = GENERATE(table<std::string, std::string, std::string>({
      {"other", "", "verify failed"},
      {"ca", "wrong.example", "does not match"},
  }));
  SocketTransportOptions options = TransportOptions(h.listener->port(), 0);
  options.tls_ca_file = ca == "other" ? Certs().other_ca_cert : Certs().ca_cert;
  options.tls_server_name = server_name;
  h.StartTransport(options);
  auto link = h.Open(Hello());
  REQUIRE_FALSE(link.ok());
  CHECK(link.status().code() == absl::StatusCode::kUnauthenticated);
  CHECK(Str(link.status().message()).find(expected) != std::string::npos);
  CHECK(h.acceptor.count() == 0);
}

TEST_CASE("ready links unused past preopen_max_idle are replaced") {
  Harness h;
  SocketTransportOptions options = TransportOptions(h.listener->port(), 1);
  options.preopen_max_idle = milliseconds(200);
  h.StartTransport(options);
  REQUIRE(WaitFor([&] { return h.transport->Stats().preopen_expired >= 2; }));
  REQUIRE(WaitFor([&] { return h.transport->Stats().preopen_ready == 1; }));
  CHECK(h.acceptor.count() == 0);
  // The replacements work.
  auto link = h.OpenOk(Hello());
  auto endpoint_link = h.acceptor.Next();
  REQUIRE(endpoint_link != nullptr);
  auto got = ReceiveExactly(h.endpoint.io, *endpoint_link, Hello().size());
  REQUIRE(got.ok());
  CHECK(*got == Hello());
  h.keep.push_back(std::move(link));
  h.keep.push_back(std::move(endpoint_link));
}

TEST_CASE("after an endpoint restart the dead ready links are replaced, not handed out") {
  Harness h;
  const std::uint16_t port = h.listener->port();
  h.StartTransport(2);
  REQUIRE(WaitFor([&] { return h.transport->Stats().preopen_ready == 2; }));
  h.listener->Stop();  // closes the two links waiting for their first bytes
  REQUIRE(WaitFor([&] { return h.transport->Stats().preopen_dead == 2; }));
  REQUIRE(WaitFor([&] { return h.transport->Stats().preopen_failures >= 1; }));  // nothing listens now

  LinkListenerOptions options = ListenerOptions();
  options.port = port;
  RecordingAcceptor second;
  auto restarted = MakeLinkListener(h.endpoint.io.get_executor(), second, options);
  REQUIRE(restarted.ok());
  REQUIRE(WaitFor([&] { return h.transport->Stats().preopen_ready == 2; }));
  auto link = h.OpenOk(Hello());
  CHECK(h.transport->Stats().opened_preopened == 1);
  auto endpoint_link = second.Next();
  REQUIRE(endpoint_link != nullptr);
  auto got = ReceiveExactly(h.endpoint.io, *endpoint_link, Hello().size());
  REQUIRE(got.ok());
  CHECK(*got == Hello());
  (*restarted)->Stop();
  h.transport->Stop();
  h.client.Stop();
  h.endpoint.Stop();
}

TEST_CASE("a link taken from another worker's pool completes on the opener's thread") {
  Harness h;
  Worker other;
  // One link ahead, on the first io_context only.
  auto made = MakeSocketTransport({h.client.io.get_executor(), other.io.get_executor()},
                                  TransportOptions(h.listener->port(), 1));
  REQUIRE(made.ok());
  h.transport = *std::move(made);
  REQUIRE(WaitFor([&] { return h.transport->Stats().preopen_ready == 1; }));
  auto link = Await(other.io, h.transport->Open(other.io.get_executor(), "ping"));
  REQUIRE(link.ok());
  CHECK(h.transport->Stats().opened_preopened == 1);
  auto endpoint_link = h.acceptor.Next();
  REQUIRE(endpoint_link != nullptr);
  REQUIRE(ReceiveExactly(h.endpoint.io, *endpoint_link, 4).ok());
  REQUIRE(SendOn(h.endpoint.io, *endpoint_link, "pong").ok());
  auto [got, thread] = Await(other.io, [&]() -> asio::awaitable<std::pair<std::string, std::thread::id>> {
    std::string buffer;
    while (buffer.size() < 4) {
      auto n = co_await (*link)->Receive(buffer);
      if (!n.ok()) break;
    }
    co_return std::make_pair(buffer, std::this_thread::get_id());
  }());
  CHECK(got == "pong");
  CHECK(thread == other.id());
  h.transport->Stop();
  Await(other.io, [&]() -> asio::awaitable<bool> {
    (*link)->Close();
    co_return true;
  }());
  h.client.Stop();
  other.Stop();
  link->reset();
  h.transport.reset();  // before `other`'s io_context, which one of its pools uses
  h.keep.push_back(std::move(endpoint_link));
}

TEST_CASE("Stop closes the ready links and later Opens fail") {
  Harness h;
  h.StartTransport(2);
  REQUIRE(WaitFor([&] { return h.transport->Stats().preopen_ready == 2; }));
  REQUIRE(h.listener->Stats().pending == 2);
  h.transport->Stop();
  CHECK(WaitFor([&] { return h.listener->Stats().pending == 0; }));
  CHECK(h.transport->Stats().preopen_ready == 0);
  auto link = h.Open(Hello());
  REQUIRE_FALSE(link.ok());
  CHECK(link.status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("bad options are refused up front") {
  Worker w;
  SocketTransportOptions options = TransportOptions(5432, 0);
  const std::string bad = GENERATE("short secret", "no CA", "missing CA file", "no port");
  if (bad == "short secret") options.link_secret = "short";
  if (bad == "no CA") options.tls_ca_file.clear();
  if (bad == "missing CA file") options.tls_ca_file = "/nonexistent/ca.crt";
  if (bad == "no port") options.port = 0;
  INFO(bad);
  auto transport = MakeSocketTransport({w.io.get_executor()}, options);
  REQUIRE_FALSE(transport.ok());
  CHECK(transport.status().code() == absl::StatusCode::kInvalidArgument);

  RecordingAcceptor acceptor;
  LinkListenerOptions listener_options = ListenerOptions();
  listener_options.tls_key_file = Certs().client_key;  // not the certificate's key
  auto listener = MakeLinkListener(w.io.get_executor(), acceptor, listener_options);
  REQUIRE_FALSE(listener.ok());
  CHECK(listener.status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hyperpool
