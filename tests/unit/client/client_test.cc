// The Client half over a real loopback socket, with a scripted in-process
// Endpoint (FakeEndpoint) behind an in-process transport. The app side is
// plain blocking POSIX sockets, so the test drives exactly the bytes a driver
// would send.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "client/client_util.h"
#include "hyperpool/admin.h"
#include "hyperpool/client.h"
#include "hyperpool/transport.h"
#include "protocol/auth/scram.h"
#include "protocol/codec.h"

namespace hyperpool {
namespace {

namespace pr = protocol;
using namespace std::chrono_literals;

// What FakeEndpoint saw on one link.
struct LinkRecord {
  std::string first_chunk;  // hello + buffered frames, as the transport delivered them
  std::string all_bytes;    // everything received
  bool saw_terminate = false;
  bool closed = false;
};

// A tiny scripted Endpoint: answers link-ready, then per Query: "FAIL" drops
// the link, "SLEEP" waits 300 ms, anything else gets CommandComplete + RFQ.
class FakeEndpoint final : public LinkAcceptor {
 public:
  explicit FakeEndpoint(asio::any_io_executor executor) : executor_(std::move(executor)) {}

  void Accept(std::unique_ptr<Link> link) override {
    std::shared_ptr<Link> shared(std::move(link));
    asio::co_spawn(executor_, Serve(shared), asio::detached);
  }

  std::vector<LinkRecord> Records() {
    std::lock_guard lock(mu_);
    return records_;
  }
  size_t LinkCount() {
    std::lock_guard lock(mu_);
    return records_.size();
  }
  // Waits (bounded) until `pred(records)` holds.
  template <typename Pred>
  bool WaitFor(Pred pred, std::chrono::milliseconds limit = 3000ms) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return pred(records_); });
  }

  std::atomic<bool> answer_ready{true};  // false: never send link-ready

 private:
  asio::awaitable<void> Serve(std::shared_ptr<Link> link) {
    size_t index;
    {
      std::lock_guard lock(mu_);
      index = records_.size();
      records_.emplace_back();
    }
    std::string buf;
    auto n = co_await link->Receive(buf);
    if (!n.ok()) co_return;
    Update(index, [&](LinkRecord& r) {
      r.first_chunk = buf;
      r.all_bytes = buf;
    });
    // The hello (startup mode).
    pr::FrameReader startup(pr::FrameReader::Mode::kStartup);
    auto hello = startup.Read(buf);
    if (!hello.is_frame()) co_return;
    size_t pos = hello.frame().size();
    bool is_cancel = std::string_view(hello.frame().payload).find("hyperpool.cancel_session") != std::string_view::npos;
    if (is_cancel) {
      std::string more;
      while ((co_await link->Receive(more)).ok()) {
      }
      Update(index, [&](LinkRecord& r) { r.closed = true; });
      co_return;
    }
    if (answer_ready) {
      std::string ready;
      pr::Encode(pr::ParameterStatus{"server_version", "15.99"}, ready);
      pr::Encode(pr::ParameterStatus{"client_encoding", "UTF8"}, ready);
      pr::Encode(pr::ParameterStatus{"application_name", "hyperpool"}, ready);
      pr::Encode(pr::ParameterStatus{"TimeZone", "UTC"}, ready);
      pr::Encode(pr::ReadyForQuery{pr::TransactionStatus::kIdle}, ready);
      if (!(co_await link->Send(std::move(ready))).ok()) co_return;
    }
    pr::FrameReader reader(pr::FrameReader::Mode::kTagged);
    for (;;) {
      for (;;) {
        auto r = reader.Read(std::string_view(buf).substr(pos));
        if (!r.is_frame()) break;
        const pr::Frame f = r.frame();
        pos += f.size();
        if (f.tag == 'X') {
          Update(index, [&](LinkRecord& rec) { rec.saw_terminate = true; });
          link->Close();
          co_return;
        }
        if (f.tag == 'Q') {
          auto q = pr::DecodeQuery(f.payload);
          std::string sql = q.ok() ? std::string(q->query) : "";
          if (sql == "FAIL") {
            link->Close();
            Update(index, [&](LinkRecord& rec) { rec.closed = true; });
            co_return;
          }
          std::string answer;
          pr::Encode(pr::CommandComplete{"SELECT 1"}, answer);
          // "BEGIN" leaves the session in a transaction, anything else idle.
          pr::Encode(pr::ReadyForQuery{sql == "BEGIN" ? pr::TransactionStatus::kInBlock
                                                      : pr::TransactionStatus::kIdle},
                     answer);
          if (!(co_await link->Send(std::move(answer))).ok()) co_return;
        }
      }
      std::string more;
      auto got = co_await link->Receive(more);
      if (!got.ok()) {
        Update(index, [&](LinkRecord& rec) { rec.closed = true; });
        co_return;
      }
      buf.append(more);
      Update(index, [&](LinkRecord& rec) { rec.all_bytes.append(more); });
    }
  }

  template <typename F>
  void Update(size_t index, F f) {
    std::lock_guard lock(mu_);
    f(records_[index]);
    cv_.notify_all();
  }

  asio::any_io_executor executor_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<LinkRecord> records_;
};

// Wraps a transport so that a Send carrying Terminate completes only after
// the Endpoint has closed the link and the Client's link reader has seen
// that: the order a fast Endpoint produces now and then (node-postgres saw
// a spurious 08006 on the way out when the Client called it a link failure).
class SlowTerminateTransport final : public Transport {
 public:
  explicit SlowTerminateTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}

  asio::awaitable<absl::StatusOr<std::unique_ptr<Link>>> Open(asio::any_io_executor executor,
                                                               std::string initial_bytes) override {
    // Only session links (the hello is followed by the app's frames); the
    // parameter probe's link carries the hello alone.
    std::uint32_t hello_size = 0;
    if (initial_bytes.size() >= 4) std::memcpy(&hello_size, initial_bytes.data(), 4);
    const bool session = initial_bytes.size() > ntohl(hello_size);
    auto link = co_await inner_->Open(executor, std::move(initial_bytes));
    if (!link.ok()) co_return link.status();
    if (!session) co_return std::move(*link);
    co_return std::unique_ptr<Link>(std::make_unique<SlowLink>(std::move(*link), executor));
  }

 private:
  class SlowLink final : public Link {
   public:
    SlowLink(std::unique_ptr<Link> inner, asio::any_io_executor executor)
        : inner_(std::move(inner)), timer_(std::move(executor)) {}

    asio::awaitable<absl::Status> Send(std::string bytes) override {
      const bool terminate = bytes.size() >= 5 && bytes[bytes.size() - 5] == 'X';
      absl::Status sent = co_await inner_->Send(std::move(bytes));
      // Bounded wait for the reader to see the close (3 s), then let it act.
      for (int i = 0; terminate && !receive_failed_ && i < 300; ++i) {
        timer_.expires_after(10ms);
        co_await timer_.async_wait(asio::use_awaitable);
      }
      timer_.expires_after(20ms);
      if (terminate) co_await timer_.async_wait(asio::use_awaitable);
      co_return sent;
    }
    asio::awaitable<absl::StatusOr<std::size_t>> Receive(std::string& buffer) override {
      auto n = co_await inner_->Receive(buffer);
      if (!n.ok()) receive_failed_ = true;
      co_return n;
    }
    void Close() override { inner_->Close(); }

   private:
    std::unique_ptr<Link> inner_;
    asio::steady_timer timer_;
    bool receive_failed_ = false;  // both coroutines run on the session's executor
  };

  std::unique_ptr<Transport> inner_;
};

// Two worker io_contexts, a FakeEndpoint and a Client on them.
class Harness {
 public:
  explicit Harness(ClientOptions options = DefaultOptions(), bool answer_ready = true,
                   bool slow_terminate = false)
      : io_a_(1), io_b_(1), guard_a_(io_a_.get_executor()), guard_b_(io_b_.get_executor()),
        endpoint_(io_b_.get_executor()) {
    endpoint_.answer_ready = answer_ready;
    transport_ = MakeInProcessTransport(endpoint_);
    if (slow_terminate) transport_ = std::make_unique<SlowTerminateTransport>(std::move(transport_));
    thread_a_ = std::thread([this] { io_a_.run(); });
    thread_b_ = std::thread([this] { io_b_.run(); });
    auto client = Client::Create({io_a_.get_executor(), io_b_.get_executor()}, *transport_, options);
    REQUIRE(client.ok());
    client_ = std::move(*client);
    port_ = ParsePort(client_->connection_string());
  }
  ~Harness() {
    client_->Stop();
    client_.reset();
    guard_a_.reset();
    guard_b_.reset();
    // Sessions unwind after Stop; bounded in case a test left a socket open.
    std::this_thread::sleep_for(50ms);
    io_a_.stop();
    io_b_.stop();
    thread_a_.join();
    thread_b_.join();
  }

  static ClientOptions DefaultOptions() {
    ClientOptions o;
    o.user = "app";
    o.password = "s3cret";
    o.database = "appdb";
    o.handshake_timeout = 3000ms;
    return o;
  }
  static uint16_t ParsePort(const std::string& url) {
    size_t at = url.rfind('@');
    size_t colon = url.find(':', at);
    size_t slash = url.find('/', colon);
    return static_cast<uint16_t>(std::stoi(url.substr(colon + 1, slash - colon - 1)));
  }

  uint16_t port() const { return port_; }
  Client& client() { return *client_; }
  FakeEndpoint& endpoint() { return endpoint_; }

 private:
  asio::io_context io_a_, io_b_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_a_, guard_b_;
  FakeEndpoint endpoint_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Client> client_;
  std::thread thread_a_, thread_b_;
  uint16_t port_ = 0;
};

// ---- the app side: blocking sockets ----

struct Message {
  char tag = 0;
  std::string payload;
};

class App {
 public:
  explicit App(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }
  ~App() { ::close(fd_); }

  void Send(std::string_view bytes) {
    REQUIRE(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
  }
  // Reads exactly n bytes; nullopt on EOF/error/timeout.
  std::optional<std::string> ReadExact(size_t n) {
    std::string out(n, '\0');
    size_t got = 0;
    while (got < n) {
      ssize_t r = ::recv(fd_, out.data() + got, n - got, 0);
      if (r <= 0) return std::nullopt;
      got += static_cast<size_t>(r);
    }
    return out;
  }
  std::optional<Message> Read() {
    auto header = ReadExact(5);
    if (!header) return std::nullopt;
    uint32_t len = 0;
    std::memcpy(&len, header->data() + 1, sizeof(len));  // unaligned: never dereference a cast pointer
    len = ntohl(len);
    auto body = ReadExact(len - 4);
    if (!body) return std::nullopt;
    return Message{(*header)[0], *body};
  }
  // True once the peer has closed (EOF), within the receive timeout.
  bool Closed() {
    char c;
    for (;;) {
      ssize_t r = ::recv(fd_, &c, 1, 0);
      if (r == 0) return true;
      if (r < 0) return errno == ECONNRESET;
    }
  }

  void SendStartup(std::vector<std::pair<std::string, std::string>> params, int32_t version = pr::kProtocolVersion30) {
    pr::StartupMessage m;
    m.protocol_version = version;
    for (auto& [k, v] : params) m.parameters.emplace_back(k, v);
    std::string out;
    pr::Encode(m, out);
    Send(out);
  }
  void SendQuery(std::string_view sql) {
    std::string out;
    pr::Encode(pr::Query{sql}, out);
    Send(out);
  }

  // Runs the SCRAM exchange after AuthenticationSASL; returns the first
  // message that is not part of it (AuthenticationOk or ErrorResponse).
  std::optional<Message> Scram(const std::string& password) {
    auto sasl = Read();
    if (!sasl || sasl->tag != 'R') return sasl;
    auto client = auth::ScramClient::Create({.password = password});
    REQUIRE(client.ok());
    std::string out;
    pr::Encode(pr::SaslInitialResponse{client->mechanism(), client->ClientFirstMessage()}, out);
    Send(out);
    auto cont = Read();
    if (!cont || cont->tag != 'R') return cont;
    auto decoded = pr::DecodeAuthentication(cont->payload);
    REQUIRE(decoded.ok());
    auto final_msg = client->HandleServerFirst(std::get<pr::AuthenticationSaslContinue>(*decoded).data);
    REQUIRE(final_msg.ok());
    out.clear();
    pr::Encode(pr::SaslResponse{*final_msg}, out);
    Send(out);
    auto fin = Read();
    if (!fin || fin->tag != 'R') return fin;
    auto fin_decoded = pr::DecodeAuthentication(fin->payload);
    REQUIRE(fin_decoded.ok());
    REQUIRE(client->HandleServerFinal(std::get<pr::AuthenticationSaslFinal>(*fin_decoded).data).ok());
    return Read();
  }

  // Startup + SCRAM + reads through ReadyForQuery. Returns the ParameterStatus
  // values and fills pid/secret.
  std::map<std::string, std::string> Login(std::vector<std::pair<std::string, std::string>> extra = {}) {
    std::vector<std::pair<std::string, std::string>> params = {{"user", "app"}, {"database", "appdb"}};
    for (auto& p : extra) params.push_back(p);
    SendStartup(params);
    auto ok = Scram("s3cret");
    REQUIRE(ok);
    REQUIRE(ok->tag == 'R');
    std::map<std::string, std::string> status;
    for (;;) {
      auto m = Read();
      REQUIRE(m);
      if (m->tag == 'S') {
        auto ps = pr::DecodeParameterStatus(m->payload);
        REQUIRE(ps.ok());
        status[std::string(ps->name)] = std::string(ps->value);
      } else if (m->tag == 'K') {
        auto k = pr::DecodeBackendKeyData(m->payload);
        REQUIRE(k.ok());
        pid = k->process_id;
        secret = std::string(k->secret_key);
      } else {
        REQUIRE(m->tag == 'Z');
        REQUIRE(m->payload == "I");
        return status;
      }
    }
  }

  int fd() const { return fd_; }
  int32_t pid = 0;
  std::string secret;

 private:
  int fd_ = -1;
};

std::string SqlState(const Message& m) {
  auto e = pr::DecodeErrorResponse(m.payload);
  if (!e.ok()) return "undecodable";
  return std::string(e->sqlstate());
}
std::string ErrorMessage(const Message& m) {
  auto e = pr::DecodeErrorResponse(m.payload);
  if (!e.ok()) return "undecodable";
  return std::string(e->message());
}

std::string SslRequest() {
  std::string out;
  pr::Encode(pr::SslRequest{}, out);
  return out;
}

TEST_CASE("SSLRequest is refused with 'N', then the login and a query work") {
  Harness h;
  App app(h.port());
  app.Send(SslRequest());
  auto answer = app.ReadExact(1);
  REQUIRE(answer);
  CHECK(*answer == "N");
  auto status = app.Login({{"application_name", "unit"}});
  CHECK(status["server_version"] == "15.99");
  CHECK(status["application_name"] == "unit");
  CHECK(app.pid != 0);
  CHECK(app.secret.size() == 4);
  app.SendQuery("SELECT 1");
  auto cc = app.Read();
  REQUIRE(cc);
  CHECK(cc->tag == 'C');
  auto rfq = app.Read();
  REQUIRE(rfq);
  CHECK(rfq->tag == 'Z');
}

TEST_CASE("bytes after SSLRequest in the same packet close the connection unanswered") {
  Harness h;
  App app(h.port());
  std::string attack = SslRequest();
  pr::StartupMessage m;
  m.parameters = {{"user", "app"}, {"database", "appdb"}};
  pr::Encode(m, attack);
  app.Send(attack);
  auto answer = app.ReadExact(1);
  CHECK(!answer);  // closed without the 'N'
}

TEST_CASE("a wrong password gets 28P01 and the connection closes") {
  Harness h;
  App app(h.port());
  app.SendStartup({{"user", "app"}, {"database", "appdb"}});
  auto m = app.Scram("wrong");
  REQUIRE(m);
  REQUIRE(m->tag == 'E');
  CHECK(SqlState(*m) == "28P01");
  CHECK(ErrorMessage(*m) == "password authentication failed for user \"app\"");
  CHECK(app.Closed());
}

TEST_CASE("an unknown user runs SCRAM and gets the wrong-password 28P01") {
  Harness h;
  App app(h.port());
  app.SendStartup({{"user", "mallory"}, {"database", "appdb"}});
  auto m = app.Scram("s3cret");
  REQUIRE(m);
  REQUIRE(m->tag == 'E');
  CHECK(SqlState(*m) == "28P01");
  CHECK(ErrorMessage(*m) == "password authentication failed for user \"mallory\"");
  CHECK(app.Closed());
}

TEST_CASE("a wrong database gets 3D000 after authentication") {
  Harness h;
  App app(h.port());
  app.SendStartup({{"user", "app"}, {"database", "other"}});
  auto ok = app.Scram("s3cret");
  REQUIRE(ok);
  REQUIRE(ok->tag == 'R');  // AuthenticationOk first, as from PostgreSQL
  auto m = app.Read();
  REQUIRE(m);
  REQUIRE(m->tag == 'E');
  CHECK(SqlState(*m) == "3D000");
  CHECK(app.Closed());
}

TEST_CASE("protocol 3.2 is downgraded with NegotiateProtocolVersion listing _pq_ options") {
  Harness h;
  App app(h.port());
  app.SendStartup({{"user", "app"}, {"database", "appdb"}, {"_pq_.fancy", "1"}}, pr::kProtocolVersion32);
  auto m = app.Read();
  REQUIRE(m);
  REQUIRE(m->tag == 'v');
  auto npv = pr::DecodeNegotiateProtocolVersion(m->payload);
  REQUIRE(npv.ok());
  CHECK(npv->newest_minor_version == 0);
  REQUIRE(npv->unrecognized_options.size() == 1);
  CHECK(npv->unrecognized_options[0] == "_pq_.fancy");
  auto ok = app.Scram("s3cret");
  REQUIRE(ok);
  CHECK(ok->tag == 'R');
}

TEST_CASE("protocol 4.0 gets 0A000") {
  Harness h;
  App app(h.port());
  app.SendStartup({{"user", "app"}}, pr::MakeProtocolVersion(4, 0));
  auto m = app.Read();
  REQUIRE(m);
  REQUIRE(m->tag == 'E');
  CHECK(SqlState(*m) == "0A000");
  CHECK(app.Closed());
}

TEST_CASE("an absurd startup length closes without an answer, as PostgreSQL does") {
  // The second is node-postgres's Terminate before its startup packet.
  const std::string bytes = GENERATE(std::string("\x7f\xff\xff\xff\x00\x03\x00\x00", 8), std::string("X\0\0\0\x04", 5));
  Harness h;
  App app(h.port());
  app.Send(bytes);
  CHECK(!app.ReadExact(1));
}

TEST_CASE("a message above max_message_size gets 54000 at its header") {
  ClientOptions options = Harness::DefaultOptions();
  options.max_message_size = 1 << 20;
  Harness h(options);
  App app(h.port());
  app.Login();
  app.Send(std::string("Q\x00\x20\x00\x00", 5));  // 2 MiB declared, nothing more sent
  auto m = app.Read();
  REQUIRE(m);
  REQUIRE(m->tag == 'E');
  CHECK(SqlState(*m) == "54000");
  CHECK(app.Closed());
}

TEST_CASE("a message up to max_message_size goes through whole") {
  ClientOptions options = Harness::DefaultOptions();
  options.max_message_size = 1 << 20;
  Harness h(options);
  App app(h.port());
  app.Login();
  std::string sql = "SELECT '" + std::string(900 << 10, 'x') + "'";
  app.SendQuery(sql);
  REQUIRE(app.Read()->tag == 'C');
  REQUIRE(app.Read()->tag == 'Z');
  CHECK(h.endpoint().WaitFor([&](const std::vector<LinkRecord>& r) {
    return r.size() >= 2 && r.back().all_bytes.find(sql) != std::string::npos;
  }));
}

TEST_CASE("the idle timeout ends an idle session with 57P05, with or without a link") {
  const bool with_link = GENERATE(false, true);
  ClientOptions options = Harness::DefaultOptions();
  options.idle_timeout = 200ms;
  Harness h(options);
  App app(h.port());
  app.Login();
  if (with_link) {
    app.SendQuery("SELECT 1");
    REQUIRE(app.Read()->tag == 'C');
    REQUIRE(app.Read()->tag == 'Z');
  }
  auto m = app.Read();
  REQUIRE(m);
  REQUIRE(m->tag == 'E');
  CHECK(SqlState(*m) == "57P05");
  CHECK(ErrorMessage(*m) == "terminating connection due to idle-session timeout");
  CHECK(app.Closed());
  if (with_link) {
    // The Endpoint was told with Terminate: a clean end, not a vanished client.
    CHECK(h.endpoint().WaitFor([](const std::vector<LinkRecord>& r) { return !r.empty() && r.back().saw_terminate; }));
  }
}

TEST_CASE("the idle timeout does not apply inside a transaction") {
  ClientOptions options = Harness::DefaultOptions();
  options.idle_timeout = 150ms;
  Harness h(options);
  App app(h.port());
  app.Login();
  app.SendQuery("BEGIN");
  REQUIRE(app.Read()->tag == 'C');
  auto z = app.Read();
  REQUIRE(z->payload == "T");
  // Four timeout periods without a byte from the Client.
  timeval tv{0, 600000};
  ::setsockopt(app.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char c;
  CHECK(::recv(app.fd(), &c, 1, 0) < 0);
  CHECK((errno == EAGAIN || errno == EWOULDBLOCK));
  timeval normal{5, 0};
  ::setsockopt(app.fd(), SOL_SOCKET, SO_RCVTIMEO, &normal, sizeof normal);
  app.SendQuery("COMMIT");
  REQUIRE(app.Read()->tag == 'C');
  REQUIRE(app.Read()->payload == "I");
  auto m = app.Read();  // idle outside a transaction again
  REQUIRE(m);
  CHECK(SqlState(*m) == "57P05");
}

TEST_CASE("an absurd message length after login: 54000 if above the limit, 08P01 if malformed") {
  // 0x7ffffff0 is well-formed but above max_message_size; 0x80000000 and 3
  // cannot be a length at all.
  auto [header, sqlstate] = GENERATE(table<std::string, std::string>({
      {std::string("Q\x7f\xff\xff\xf0", 5), "54000"},
      {std::string("Q\x80\x00\x00\x00", 5), "08P01"},
      {std::string("Q\x00\x00\x00\x03", 5), "08P01"},
  }));
  Harness h;
  App app(h.port());
  app.Login();
  app.Send(header);
  auto m = app.Read();
  REQUIRE(m);
  REQUIRE(m->tag == 'E');
  CHECK(SqlState(*m) == sqlstate);
  CHECK(app.Closed());
}

TEST_CASE("an unknown message type after a query gets 08P01 through the link leg") {
  Harness h;
  App app(h.port());
  app.Login();
  app.SendQuery("SELECT 1");
  REQUIRE(app.Read()->tag == 'C');
  REQUIRE(app.Read()->tag == 'Z');
  app.Send(std::string("\x01\x00\x00\x00\x04", 5));
  auto m = app.Read();
  REQUIRE(m);
  REQUIRE(m->tag == 'E');
  CHECK(SqlState(*m) == "08P01");
  CHECK(app.Closed());
  CHECK(h.endpoint().WaitFor([](auto& r) { return !r.empty() && r.back().closed; }));
}

TEST_CASE("an app that never finishes its handshake is closed at the timeout") {
  ClientOptions options = Harness::DefaultOptions();
  options.handshake_timeout = 200ms;
  Harness h(options);
  App app(h.port());
  auto start = std::chrono::steady_clock::now();
  app.SendStartup({{"user", "app"}, {"database", "appdb"}});
  auto sasl = app.Read();
  REQUIRE(sasl);
  CHECK(sasl->tag == 'R');
  CHECK(app.Closed());
  CHECK(std::chrono::steady_clock::now() - start < 2s);
}

TEST_CASE("the hello carries the app's parameters and the first query in one chunk") {
  Harness h;
  App app(h.port());
  app.Login({{"application_name", "hello_test"}, {"search_path", "s1"}});
  app.SendQuery("SELECT 42");
  REQUIRE(app.Read()->tag == 'C');
  REQUIRE(app.Read()->tag == 'Z');
  // The probe link is first; the session's link is the one with a query.
  auto records = h.endpoint().Records();
  const LinkRecord* session = nullptr;
  for (auto& r : records) {
    if (r.first_chunk.find("SELECT 42") != std::string::npos) session = &r;
  }
  REQUIRE(session != nullptr);
  pr::FrameReader startup(pr::FrameReader::Mode::kStartup);
  auto hello = startup.Read(session->first_chunk);
  REQUIRE(hello.is_frame());
  auto decoded = pr::DecodeStartupPacket(hello.frame().payload);
  REQUIRE(decoded.ok());
  const auto& msg = std::get<pr::StartupMessage>(*decoded);
  CHECK(msg.Find("application_name") == std::optional<std::string_view>("hello_test"));
  CHECK(msg.Find("search_path") == std::optional<std::string_view>("s1"));
  CHECK(!msg.Find("user"));
  CHECK(!msg.Find("database"));
  auto id = msg.Find("hyperpool.session_id");
  REQUIRE(id);
  // 64 random bits in 11 characters: every copy of the id fits std::string's
  // inline buffer (client_util.h, NewSessionId).
  CHECK(id->size() == 11);
  CHECK(id->size() < std::string().capacity());
  // The query follows the hello in the same first chunk.
  pr::FrameReader tagged(pr::FrameReader::Mode::kTagged);
  auto q = tagged.Read(std::string_view(session->first_chunk).substr(hello.frame().size()));
  REQUIRE(q.is_frame());
  CHECK(q.frame().tag == 'Q');
}

TEST_CASE("Terminate is forwarded on the link and closes both") {
  Harness h;
  App app(h.port());
  app.Login();
  app.SendQuery("SELECT 1");
  REQUIRE(app.Read()->tag == 'C');
  REQUIRE(app.Read()->tag == 'Z');
  std::string x;
  pr::Encode(pr::Terminate{}, x);
  app.Send(x);
  CHECK(app.Closed());
  CHECK(h.endpoint().WaitFor([](auto& r) {
    for (auto& rec : r) {
      if (rec.all_bytes.find("SELECT 1") != std::string::npos) return rec.saw_terminate;
    }
    return false;
  }));
}

TEST_CASE("an Endpoint that closes the link on Terminate before Send returns gets no 08006 to the app") {
  Harness h(Harness::DefaultOptions(), true, /*slow_terminate=*/true);
  App app(h.port());
  app.Login();
  app.SendQuery("SELECT 1");
  REQUIRE(app.Read()->tag == 'C');
  REQUIRE(app.Read()->tag == 'Z');
  std::string x;
  pr::Encode(pr::Terminate{}, x);
  app.Send(x);
  // The app waits for the server to close, as node-postgres does: nothing
  // but EOF may arrive.
  auto m = app.Read();
  CHECK_FALSE(m.has_value());
  if (m) CHECK(m->tag == '?');  // shows the unexpected message's tag
}

TEST_CASE("a connection that only logs in and terminates opens no session link") {
  Harness h;
  {
    App warm(h.port());
    warm.Login();  // waits for the probe's parameters
  }
  size_t before = h.endpoint().LinkCount();
  App app(h.port());
  app.Login();
  std::string x;
  pr::Encode(pr::Terminate{}, x);
  app.Send(x);
  CHECK(app.Closed());
  CHECK(h.endpoint().LinkCount() == before);
}

TEST_CASE("the app disconnecting closes the link (a vanished client)") {
  Harness h;
  {
    App app(h.port());
    app.Login();
    app.SendQuery("SELECT 7");
    REQUIRE(app.Read()->tag == 'C');
    REQUIRE(app.Read()->tag == 'Z');
  }
  CHECK(h.endpoint().WaitFor([](auto& r) {
    for (auto& rec : r) {
      if (rec.all_bytes.find("SELECT 7") != std::string::npos) return rec.closed && !rec.saw_terminate;
    }
    return false;
  }));
}

TEST_CASE("a failed link gets 08006 to the app") {
  Harness h;
  App app(h.port());
  app.Login();
  app.SendQuery("FAIL");
  auto m = app.Read();
  REQUIRE(m);
  REQUIRE(m->tag == 'E');
  CHECK(SqlState(*m) == "08006");
  CHECK(app.Closed());
}

TEST_CASE("a CancelRequest with the right key opens a cancel link naming the session") {
  Harness h;
  App app(h.port());
  app.Login();
  app.SendQuery("SELECT 1");
  REQUIRE(app.Read()->tag == 'C');
  REQUIRE(app.Read()->tag == 'Z');
  {
    App wrong(h.port());
    std::string cancel;
    pr::Encode(pr::CancelRequest{app.pid, "nope"}, cancel);
    wrong.Send(cancel);
    CHECK(wrong.Closed());
  }
  App canceller(h.port());
  std::string cancel;
  pr::Encode(pr::CancelRequest{app.pid, app.secret}, cancel);
  canceller.Send(cancel);
  CHECK(canceller.Closed());
  CHECK(h.endpoint().WaitFor([](auto& r) {
    int cancels = 0;
    for (auto& rec : r) {
      if (rec.first_chunk.find("hyperpool.cancel_session") != std::string::npos) ++cancels;
    }
    return cancels == 1;
  }));
  // The cancel link names the session's id.
  auto records = h.endpoint().Records();
  std::string session_id, cancel_id;
  for (auto& rec : records) {
    pr::FrameReader startup(pr::FrameReader::Mode::kStartup);
    auto f = startup.Read(rec.first_chunk);
    if (!f.is_frame()) continue;
    auto d = pr::DecodeStartupPacket(f.frame().payload);
    if (!d.ok()) continue;
    auto& msg = std::get<pr::StartupMessage>(*d);
    if (rec.first_chunk.find("SELECT 1") != std::string::npos) session_id = std::string(*msg.Find("hyperpool.session_id"));
    if (auto c = msg.Find("hyperpool.cancel_session")) cancel_id = std::string(*c);
  }
  CHECK(!session_id.empty());
  CHECK(session_id == cancel_id);
}

TEST_CASE("the first app waits for link-ready; an Endpoint that never answers times it out with 08006") {
  ClientOptions options = Harness::DefaultOptions();
  options.handshake_timeout = 300ms;
  Harness h(options, /*answer_ready=*/false);
  App app(h.port());
  app.SendStartup({{"user", "app"}, {"database", "appdb"}});
  auto ok = app.Scram("s3cret");
  REQUIRE(ok);
  CHECK(ok->tag == 'R');
  auto m = app.Read();
  REQUIRE(m);
  REQUIRE(m->tag == 'E');
  CHECK(SqlState(*m) == "08006");
}

TEST_CASE("connection_string has the generated password percent-encoded") {
  asio::io_context io(1);
  FakeEndpoint endpoint(io.get_executor());
  auto transport = MakeInProcessTransport(endpoint);
  ClientOptions options;
  options.user = "a user";
  options.database = "d/b";
  auto client = Client::Create({io.get_executor()}, *transport, options);
  REQUIRE(client.ok());
  const std::string& url = (*client)->connection_string();
  CHECK(url.rfind("postgresql://a%20user:", 0) == 0);
  CHECK(url.find("@127.0.0.1:") != std::string::npos);
  CHECK(url.find("/d%2Fb?sslmode=disable") != std::string::npos);
  (*client)->Stop();
}

TEST_CASE("helpers: overlay, redaction, scanner") {
  client::ParamList origin = {{"server_version", "15"}, {"TimeZone", "UTC"}, {"application_name", "hyperpool"}};
  auto out = client::OverlayParams(origin, {{"TimeZone", "Europe/Paris"}});
  CHECK(out[1].second == "Europe/Paris");
  CHECK(out[2].second == "");
  CHECK(client::RedactOrigin("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db");
  CHECK(client::RedactOrigin("host=h password=secret user=u") == "host=h password=*** user=u");
  std::string stream;
  pr::Encode(pr::CommandComplete{"SELECT 1"}, stream);
  pr::Encode(pr::ReadyForQuery{pr::TransactionStatus::kInBlock}, stream);
  client::BackendStreamScanner scanner;
  std::string seen;
  for (char c : stream) REQUIRE(scanner.Scan(std::string_view(&c, 1), [&](char s) { seen.push_back(s); }));
  CHECK(seen == "T");
  CHECK(scanner.at_boundary());
  CHECK(!scanner.Scan(std::string_view("Z\0\0\0\2", 5), [](char) {}));
}

// Speed is measured in bench/ (login per transaction, side by side with
// PgBouncer), never asserted here: a bound of 5 ms failed under ASan on a
// loaded 2-core machine (5.4 ms). What this asserts is that 200 logins in a
// row each reach ReadyForQuery; the time is reported.
TEST_CASE("200 local handshakes in a row (time reported, not asserted)") {
  Harness h;
  { App warm(h.port()); warm.Login(); }
  constexpr int kRounds = 200;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRounds; ++i) {
    App app(h.port());
    app.Login();
  }
  auto per = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start) / kRounds;
  // The app side's SCRAM client runs PBKDF2 (4096 iterations) per login;
  // subtract it to estimate what the Client itself costs.
  auto pbkdf2_start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) REQUIRE(auth::MakeScramVerifier("s3cret", "0123456789abcdef", 4096).ok());
  auto pbkdf2 = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - pbkdf2_start) / 20;
  WARN("local handshake (connect + SCRAM + ReadyForQuery): " << per.count() << " us, of which the app's PBKDF2 "
       << pbkdf2.count() << " us");
}

// ---- The admin console hook (include/hyperpool/admin.h) and Kill ----

class EchoAdminSession final : public AdminSession {
 public:
  void Greeting(std::string& out) override { pr::Encode(pr::ReadyForQuery{pr::TransactionStatus::kIdle}, out); }
  bool OnMessage(char tag, std::string_view body, std::string& out) override {
    if (tag != 'Q') return false;
    auto q = pr::DecodeQuery(body);
    pr::Encode(pr::CommandComplete{q.ok() ? q->query : "?"}, out);
    pr::Encode(pr::ReadyForQuery{pr::TransactionStatus::kIdle}, out);
    return true;
  }
};

class FakeConsole final : public AdminConsole {
 public:
  bool IsAdmin(std::string_view user) const override { return user == "ops"; }
  std::unique_ptr<AdminSession> Open(const AdminLogin& login) override {
    std::lock_guard lock(mu);
    logins.push_back(login);
    return std::make_unique<EchoAdminSession>();
  }
  std::mutex mu;
  std::vector<AdminLogin> logins;
};

ClientOptions ConsoleOptions(std::shared_ptr<FakeConsole> console) {
  ClientOptions o = Harness::DefaultOptions();
  o.admin = std::move(console);
  return o;
}

TEST_CASE("the admin database: a non-admin gets 42501 after AuthenticationOk") {
  auto console = std::make_shared<FakeConsole>();
  Harness h(ConsoleOptions(console));
  App app(h.port());
  app.SendStartup({{"user", "app"}, {"database", "hyperpool"}});
  auto ok = app.Scram("s3cret");
  REQUIRE(ok);
  REQUIRE(ok->tag == 'R');
  auto m = app.Read();
  REQUIRE(m);
  REQUIRE(m->tag == 'E');
  CHECK(SqlState(*m) == "42501");
  CHECK(ErrorMessage(*m) == "permission denied for database \"hyperpool\"");
  CHECK(app.Closed());
  CHECK(console->logins.empty());
}

TEST_CASE("the admin database: an admin's frames go to the console, never to a link") {
  auto console = std::make_shared<FakeConsole>();
  Harness h(ConsoleOptions(console));
  App app(h.port());
  app.SendStartup({{"user", "ops"}, {"database", "hyperpool"}});
  auto ok = app.Scram("s3cret");
  REQUIRE(ok);
  REQUIRE(ok->tag == 'R');
  REQUIRE(app.Read()->tag == 'Z');  // the console's greeting
  app.SendQuery("SHOW POOLS");
  auto c = app.Read();
  REQUIRE(c);
  REQUIRE(c->tag == 'C');
  CHECK(c->payload == std::string("SHOW POOLS\0", 11));
  REQUIRE(app.Read()->tag == 'Z');
  std::vector<ClientSessionInfo> sessions = h.client().Sessions();
  REQUIRE(sessions.size() == 1);
  CHECK(sessions[0].state == "admin");
  CHECK(sessions[0].user == "ops");
  {
    std::lock_guard lock(console->mu);
    REQUIRE(console->logins.size() == 1);
    CHECK(console->logins[0].user == "ops");
    CHECK(console->logins[0].client_id == sessions[0].id);
  }
  std::string terminate;
  pr::Encode(pr::Terminate{}, terminate);
  app.Send(terminate);
  CHECK(app.Closed());
  // (The Client's own probe link may exist: nothing of this session is on any link.)
  for (const LinkRecord& r : h.endpoint().Records()) CHECK(r.all_bytes.find("SHOW POOLS") == std::string::npos);
}

TEST_CASE("a console whose database is the application's is refused at Create") {
  ClientOptions o = ConsoleOptions(std::make_shared<FakeConsole>());
  o.admin_database = o.database;
  asio::io_context io;
  FakeEndpoint endpoint(io.get_executor());
  std::unique_ptr<Transport> t = MakeInProcessTransport(endpoint);
  CHECK_FALSE(Client::Create({io.get_executor()}, *t, o).ok());
}

TEST_CASE("Kill ends a session with FATAL 57P01, with or without a link; Sessions lists it first") {
  const bool with_link = GENERATE(false, true);
  Harness h;
  App app(h.port());
  app.Login();
  if (with_link) {
    app.SendQuery("SELECT 1");
    REQUIRE(app.Read()->tag == 'C');
    REQUIRE(app.Read()->tag == 'Z');
  }
  std::vector<ClientSessionInfo> sessions = h.client().Sessions();
  REQUIRE(sessions.size() == 1);
  CHECK(sessions[0].user == "app");
  CHECK(sessions[0].database == "appdb");
  CHECK(sessions[0].state == "idle");
  CHECK(sessions[0].address.rfind("127.0.0.1:", 0) == 0);
  CHECK(h.client().Stats().bytes_received > 0);
  CHECK(h.client().Stats().bytes_sent > 0);
  CHECK_FALSE(h.client().Kill(sessions[0].id + 1000));
  REQUIRE(h.client().Kill(sessions[0].id));
  auto m = app.Read();
  REQUIRE(m);
  REQUIRE(m->tag == 'E');
  CHECK(SqlState(*m) == "57P01");
  CHECK(ErrorMessage(*m) == "terminating connection due to administrator command");
  CHECK(app.Closed());
  if (with_link) {
    CHECK(h.endpoint().WaitFor([](const std::vector<LinkRecord>& r) { return !r.empty() && r.back().saw_terminate; }));
  }
}

}  // namespace
}  // namespace hyperpool
