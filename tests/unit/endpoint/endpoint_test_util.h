#pragma once
// Test helpers for the Endpoint half, shared by tests/unit/endpoint and
// tests/integration/endpoint_*.cc:
//  - IoThread: an io_context running on its own thread (so Endpoint::Stop()
//    can block the test thread while the Endpoint finishes), and Await() to
//    run a coroutine there and wait for its result with a deadline;
//  - LinkClient: the Client side of a link, speaking raw protocol;
//  - FakeOrigin: a scripted "PostgreSQL server" on 127.0.0.1 port 0, for
//    faults a real server cannot produce.

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <asio/write.hpp>
#include <catch2/catch_test_macros.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hyperpool/transport.h"
#include "protocol/codec.h"
#include "unit/endpoint/frontend_builders.h"

namespace hyperpool::testing {

inline constexpr auto kTestAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

// An io_context run by one background thread until destruction.
class IoThread {
 public:
  IoThread() : guard_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~IoThread() {
    guard_.reset();
    io_.stop();
    thread_.join();
  }
  asio::io_context& io() { return io_; }
  asio::any_io_executor executor() { return io_.get_executor(); }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
};

// Runs `aw` on `io`'s thread and waits (bounded) for its result.
template <typename T>
T Await(IoThread& io, asio::awaitable<T> aw, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  std::future<T> f = asio::co_spawn(io.io(), std::move(aw), asio::use_future);
  if (f.wait_for(timeout) != std::future_status::ready) {
    FAIL("coroutine did not finish within " << timeout.count() << " ms");
  }
  return f.get();
}

// One backend message, copied.
struct Message {
  char tag = 0;
  std::string payload;
};

// What one request produced, up to its ReadyForQuery.
struct Result {
  std::vector<Message> messages;
  std::vector<std::vector<std::optional<std::string>>> rows;
  std::vector<std::string> command_tags;
  std::string sqlstate;  // of the first ErrorResponse ("" if none)
  std::string severity;
  std::string error_message;
  char status = 0;     // ReadyForQuery status; 0 if the link closed first
  bool closed = false; // the link ended before a ReadyForQuery
  bool Has(char tag) const {
    for (const auto& m : messages)
      if (m.tag == tag) return true;
    return false;
  }
  std::string Cell(std::size_t row = 0, std::size_t col = 0) const {
    if (row >= rows.size() || col >= rows[row].size() || !rows[row][col]) return "<none>";
    return *rows[row][col];
  }
};

// The Client side of a link.
class LinkClient {
 public:
  explicit LinkClient(std::unique_ptr<Link> link) : link_(std::move(link)) {}

  // Sends the hello (plus `then`, e.g. queries, in the same Send).
  asio::awaitable<absl::Status> Hello(std::string application_name = "hp_test", std::string then = {}) {
    protocol::StartupMessage hello;
    hello.parameters.emplace_back("application_name", application_name);
    hello.parameters.emplace_back("hyperpool.session_id", "0123456789abcdef");
    std::string out;
    protocol::Encode(hello, out);
    out += then;
    co_return co_await link_->Send(std::move(out));
  }

  asio::awaitable<absl::Status> Send(std::string bytes) { co_return co_await link_->Send(std::move(bytes)); }

  // Reads messages until a ReadyForQuery (or the link closes).
  asio::awaitable<Result> ReadUntilReady() {
    Result result;
    protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
    for (;;) {
      auto r = reader.Read(buffer_);
      if (r.is_frame()) {
        const protocol::Frame& f = r.frame();
        Message m{f.tag, std::string(f.payload)};
        if (f.tag == 'D') {
          auto row = protocol::DecodeDataRow(f.payload);
          if (row.ok()) {
            std::vector<std::optional<std::string>> cells;
            for (auto v : *row) cells.push_back(v ? std::optional<std::string>(std::string(*v)) : std::nullopt);
            result.rows.push_back(std::move(cells));
          }
        } else if (f.tag == 'C') {
          auto c = protocol::DecodeCommandComplete(f.payload);
          if (c.ok()) result.command_tags.emplace_back(c->tag);
        } else if (f.tag == 'E') {
          auto e = protocol::DecodeErrorResponse(f.payload);
          if (e.ok() && result.sqlstate.empty()) {
            result.sqlstate = std::string(e->sqlstate());
            result.severity = std::string(e->severity());
            result.error_message = std::string(e->message());
          }
        }
        buffer_.erase(0, f.size());
        result.messages.push_back(std::move(m));
        if (result.messages.back().tag == 'Z') {
          result.status = result.messages.back().payload.empty() ? '?' : result.messages.back().payload[0];
          co_return result;
        }
        continue;
      }
      if (r.is_error()) {
        result.closed = true;
        co_return result;
      }
      auto n = co_await link_->Receive(buffer_);
      if (!n.ok()) {
        result.closed = true;
        co_return result;
      }
    }
  }

  // Reads the next backend message, whatever it is (e.g. a
  // NotificationResponse pushed to an idle session); nullopt if the link
  // closes first.
  asio::awaitable<std::optional<Message>> ReadOne() {
    protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
    for (;;) {
      auto r = reader.Read(buffer_);
      if (r.is_frame()) {
        Message m{r.frame().tag, std::string(r.frame().payload)};
        buffer_.erase(0, r.frame().size());
        co_return m;
      }
      if (r.is_error()) co_return std::nullopt;
      auto n = co_await link_->Receive(buffer_);
      if (!n.ok()) co_return std::nullopt;
    }
  }

  // Sends a simple Query and reads its answer.
  asio::awaitable<Result> Query(std::string sql) {
    absl::Status sent = co_await link_->Send(QueryBytes(sql));
    if (!sent.ok()) {
      Result r;
      r.closed = true;
      co_return r;
    }
    co_return co_await ReadUntilReady();
  }

  // Hello, then link-ready.
  asio::awaitable<Result> Open(std::string application_name = "hp_test") {
    absl::Status sent = co_await Hello(std::move(application_name));
    if (!sent.ok()) {
      Result r;
      r.closed = true;
      co_return r;
    }
    co_return co_await ReadUntilReady();
  }

  // A placement probe link: the probe hello, then its answer.
  asio::awaitable<Result> Probe() {
    protocol::StartupMessage hello;
    hello.parameters.emplace_back("hyperpool.probe", "1");
    std::string out;
    protocol::Encode(hello, out);
    absl::Status sent = co_await link_->Send(std::move(out));
    if (!sent.ok()) {
      Result r;
      r.closed = true;
      co_return r;
    }
    co_return co_await ReadUntilReady();
  }

  // True once the peer has closed the link (and nothing more arrived).
  asio::awaitable<bool> ClosedByPeer() {
    auto n = co_await link_->Receive(buffer_);
    co_return !n.ok();
  }

  void Close() { link_->Close(); }
  Link& link() { return *link_; }

 private:
  std::unique_ptr<Link> link_;
  std::string buffer_;
};

// A session link to `acceptor` (an Endpoint), past its link-ready.
inline std::unique_ptr<LinkClient> OpenSession(IoThread& io, LinkAcceptor& acceptor) {
  LinkPair pair = MakeInProcessLinkPair(io.executor(), io.executor());
  acceptor.Accept(std::move(pair.second));
  auto client = std::make_unique<LinkClient>(std::move(pair.first));
  Result ready = Await(io, client->Open());
  REQUIRE(ready.status == 'I');
  return client;
}

// ---------------------------------------------------------------------------
// FakeOrigin
// ---------------------------------------------------------------------------

// Raw socket helpers for scripts.
inline asio::awaitable<bool> WriteBytes(asio::ip::tcp::socket& s, std::string bytes) {
  auto [ec, n] = co_await asio::async_write(s, asio::buffer(bytes), kTestAsTuple);
  co_return !ec;
}

// Reads one untagged startup-mode packet (SSLRequest, StartupMessage);
// returns its payload (starting at the code), or nullopt on EOF.
inline asio::awaitable<std::optional<std::string>> ReadStartupPacket(asio::ip::tcp::socket& s) {
  char header[4];
  auto [ec, n] = co_await asio::async_read(s, asio::buffer(header, 4), kTestAsTuple);
  if (ec) co_return std::nullopt;
  uint32_t len = (uint8_t(header[0]) << 24) | (uint8_t(header[1]) << 16) | (uint8_t(header[2]) << 8) | uint8_t(header[3]);
  if (len < 4 || len > 100000) co_return std::nullopt;
  std::string body(len - 4, '\0');
  auto [ec2, n2] = co_await asio::async_read(s, asio::buffer(body), kTestAsTuple);
  if (ec2) co_return std::nullopt;
  co_return body;
}

// Reads one tagged message; nullopt on EOF.
inline asio::awaitable<std::optional<Message>> ReadTagged(asio::ip::tcp::socket& s) {
  char header[5];
  auto [ec, n] = co_await asio::async_read(s, asio::buffer(header, 5), kTestAsTuple);
  if (ec) co_return std::nullopt;
  uint32_t len = (uint8_t(header[1]) << 24) | (uint8_t(header[2]) << 16) | (uint8_t(header[3]) << 8) | uint8_t(header[4]);
  if (len < 4 || len > 10000000) co_return std::nullopt;
  std::string body(len - 4, '\0');
  auto [ec2, n2] = co_await asio::async_read(s, asio::buffer(body), kTestAsTuple);
  if (ec2) co_return std::nullopt;
  co_return Message{header[0], std::move(body)};
}

// The messages of a successful trust login: AuthenticationOk, a few
// ParameterStatus, BackendKeyData, ReadyForQuery 'I'.
inline std::string TrustLoginBytes() {
  std::string out;
  protocol::Encode(protocol::AuthenticationOk{}, out);
  protocol::Encode(protocol::ParameterStatus{"server_version", "15.99-fake"}, out);
  protocol::Encode(protocol::ParameterStatus{"client_encoding", "UTF8"}, out);
  protocol::Encode(protocol::BackendKeyData{4242, "abcd"}, out);
  protocol::Encode(protocol::ReadyForQuery{protocol::TransactionStatus::kIdle}, out);
  return out;
}

// A scripted server on 127.0.0.1 (port 0). Each accepted connection runs
// `script` (a coroutine on the socket) on the io thread.
class FakeOrigin {
 public:
  using Script = std::function<asio::awaitable<void>(asio::ip::tcp::socket&, int connection_index)>;

  FakeOrigin(IoThread& io, Script script)
      : acceptor_(io.io(), asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        script_(std::move(script)) {
    port_ = acceptor_.local_endpoint().port();
    asio::co_spawn(io.io(), AcceptLoop(), asio::detached);
  }
  ~FakeOrigin() {
    // Closing from the test thread races with the io thread; post it.
    std::promise<void> done;
    asio::post(acceptor_.get_executor(), [&] {
      std::error_code ignored;
      acceptor_.close(ignored);
      done.set_value();
    });
    done.get_future().wait();
  }

  uint16_t port() const { return port_; }
  int accepted() const { return accepted_.load(); }
  std::string Origin(std::string extra = "sslmode=disable") const {
    return "postgresql://fake:secret@127.0.0.1:" + std::to_string(port_) + "/fakedb?" + extra;
  }

 private:
  asio::awaitable<void> AcceptLoop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(kTestAsTuple);
      if (ec) co_return;
      int index = accepted_.fetch_add(1);
      auto shared = std::make_shared<asio::ip::tcp::socket>(std::move(socket));
      asio::co_spawn(
          acceptor_.get_executor(),
          [shared, index, script = script_]() -> asio::awaitable<void> { co_await script(*shared, index); },
          asio::detached);
    }
  }

  asio::ip::tcp::acceptor acceptor_;
  Script script_;
  uint16_t port_ = 0;
  std::atomic<int> accepted_{0};
};

}  // namespace hyperpool::testing
