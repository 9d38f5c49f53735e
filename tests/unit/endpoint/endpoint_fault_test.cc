// Faults a real PostgreSQL cannot be made to produce, from a scripted fake
// origin on 127.0.0.1: malformed or hostile login messages, bytes injected
// after the SSLRequest answer, unsupported authentication, silence, and
// connections dying mid-result or mid-transaction under an Endpoint session.
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "endpoint/origin_config.h"
#include "endpoint/origin_connection.h"
#include "hyperpool/endpoint.h"
#include "unit/endpoint/endpoint_test_util.h"

namespace hyperpool::testing {
namespace {

using namespace std::chrono_literals;
using endpoint::ConnectOptions;
using endpoint::ConnectOrigin;
using endpoint::ConnectResult;

std::string Frame(char tag, std::string_view payload) {
  std::string out;
  protocol::AppendFrame(out, tag, payload);
  return out;
}

std::string AuthFrame(int32_t type, std::string_view rest = {}) {
  std::string payload;
  protocol::AppendInt32(payload, type);
  payload.append(rest);
  return Frame('R', payload);
}

ConnectResult Connect(IoThread& io, const FakeOrigin& fake, std::string params = "sslmode=disable",
                      std::chrono::milliseconds timeout = 5s) {
  auto config = ParseOriginConfig(fake.Origin(params));
  REQUIRE(config.ok());
  ConnectOptions options;
  options.timeout = timeout;
  return Await(io, ConnectOrigin(io.executor(), *config, options));
}

// A script that reads the StartupMessage, then sends `reply` and waits for EOF.
FakeOrigin::Script ReplyToStartup(std::string reply) {
  return [reply](asio::ip::tcp::socket& s, int) -> asio::awaitable<void> {
    if (!co_await ReadStartupPacket(s)) co_return;
    co_await WriteBytes(s, reply);
    while (co_await ReadTagged(s)) {
    }
  };
}

TEST_CASE("an ErrorResponse without SQLSTATE during login is a clean failure") {
  IoThread io;
  FakeOrigin fake(io, ReplyToStartup(Frame('E', std::string("SFATAL\0Mno sqlstate here\0\0", 26))));
  ConnectResult r = Connect(io, fake);
  REQUIRE_FALSE(r.ok());
  CHECK(r.failure.failure == ValidationFailure::kOther);
  CHECK(r.failure.message.find("no sqlstate here") != std::string::npos);
  CHECK(r.failure.sqlstate == kSqlStateCannotConnect);
}

TEST_CASE("absurd or oversized message lengths during login fail at once") {
  std::string absurd_high = std::string("R\x7f\xff\xff\xff", 5);
  std::string absurd_low = std::string("R\x00\x00\x00\x02", 5);
  // A 100 KiB notice: more than the login limit of 64 KiB.
  std::string big_notice = Frame('N', std::string("SNOTICE\0M", 9) + std::string(100 * 1024, 'x') + std::string("\0\0", 2));
  auto reply = GENERATE_COPY(absurd_high, absurd_low, big_notice);
  IoThread io;
  FakeOrigin fake(io, ReplyToStartup(reply));
  auto start = std::chrono::steady_clock::now();
  ConnectResult r = Connect(io, fake);
  REQUIRE_FALSE(r.ok());
  CHECK(r.failure.message.find("protocol violation") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < 3s);
}

// Answers SASL with a server-first whose nonce is `extra` characters longer.
FakeOrigin::Script HugeNonce(std::size_t extra) {
  return [extra](asio::ip::tcp::socket& s, int) -> asio::awaitable<void> {
    if (!co_await ReadStartupPacket(s)) co_return;
    co_await WriteBytes(s, AuthFrame(10, std::string("SCRAM-SHA-256\0\0", 15)));
    auto initial = co_await ReadTagged(s);
    if (!initial) co_return;
    auto r = initial->payload.find("r=");
    std::string nonce = r == std::string::npos ? "x" : initial->payload.substr(r + 2);
    std::string server_first = "r=" + nonce + std::string(extra, 'N') + ",s=c2FsdHNhbHQ=,i=4096";
    co_await WriteBytes(s, AuthFrame(11, server_first));
    while (co_await ReadTagged(s)) {
    }
  };
}

TEST_CASE("a huge SCRAM nonce from the origin is refused, not overflowed") {
  auto extra = GENERATE(std::size_t{3000}, std::size_t{60000}, std::size_t{200000});
  CAPTURE(extra);
  IoThread io;
  FakeOrigin fake(io, HugeNonce(extra));
  ConnectResult r = Connect(io, fake);
  REQUIRE_FALSE(r.ok());
  CHECK(r.failure.failure == ValidationFailure::kOther);
  CHECK(r.failure.message.find("secret") == std::string::npos);
}

TEST_CASE("AuthenticationOk before the SCRAM exchange completes is refused") {
  IoThread io;
  FakeOrigin fake(io, [](asio::ip::tcp::socket& s, int) -> asio::awaitable<void> {
    if (!co_await ReadStartupPacket(s)) co_return;
    co_await WriteBytes(s, AuthFrame(10, std::string("SCRAM-SHA-256\0\0", 15)));
    if (!co_await ReadTagged(s)) co_return;
    co_await WriteBytes(s, TrustLoginBytes());
    while (co_await ReadTagged(s)) {
    }
  });
  ConnectResult r = Connect(io, fake);
  REQUIRE_FALSE(r.ok());
  CHECK(r.failure.message.find("SCRAM") != std::string::npos);
}

TEST_CASE("bytes after the origin's 'S' and before the TLS handshake are rejected (CVE-2021-23222)") {
  IoThread io;
  FakeOrigin fake(io, [](asio::ip::tcp::socket& s, int) -> asio::awaitable<void> {
    if (!co_await ReadStartupPacket(s)) co_return;
    co_await WriteBytes(s, "S" + TrustLoginBytes());
    while (co_await ReadTagged(s)) {
    }
  });
  ConnectResult r = Connect(io, fake, "sslmode=require");
  REQUIRE_FALSE(r.ok());
  CHECK(r.failure.message.find("CVE-2021-23222") != std::string::npos);
}

FakeOrigin::Script RefuseTlsThenTrust() {
  return [](asio::ip::tcp::socket& s, int) -> asio::awaitable<void> {
    auto first = co_await ReadStartupPacket(s);
    if (!first) co_return;
    if (first->size() == 4) {  // SSLRequest: refuse, then expect the StartupMessage
      co_await WriteBytes(s, "N");
      if (!co_await ReadStartupPacket(s)) co_return;
    }
    co_await WriteBytes(s, TrustLoginBytes());
    while (auto m = co_await ReadTagged(s)) {
      if (m->tag == 'X') co_return;
      if (m->tag == 'Q') {
        std::string out = Frame('I', "");
        protocol::Encode(protocol::ReadyForQuery{protocol::TransactionStatus::kIdle}, out);
        co_await WriteBytes(s, out);
      }
    }
  };
}

TEST_CASE("an origin without TLS fails sslmode=require and serves sslmode=prefer in plaintext") {
  IoThread io;
  FakeOrigin fake(io, RefuseTlsThenTrust());
  ConnectResult required = Connect(io, fake, "sslmode=require");
  REQUIRE_FALSE(required.ok());
  CHECK(required.failure.failure == ValidationFailure::kTlsUnavailable);
  ConnectResult preferred = Connect(io, fake, "sslmode=prefer");
  INFO(preferred.failure.message);
  REQUIRE(preferred.ok());
  CHECK_FALSE(preferred.connection->is_tls());
  CHECK(preferred.connection->backend_key().process_id == 4242);
  CHECK(preferred.connection->backend_key().secret_key == "abcd");
  CHECK(Await(io, preferred.connection->Ping()).ok());
}

TEST_CASE("unsupported authentication methods get a clear error") {
  auto type = GENERATE(2, 7, 9);  // Kerberos V5, GSS, SSPI
  IoThread io;
  FakeOrigin fake(io, ReplyToStartup(AuthFrame(type)));
  ConnectResult r = Connect(io, fake);
  REQUIRE_FALSE(r.ok());
  CHECK(r.failure.message.find("GSSAPI/SSPI/Kerberos") != std::string::npos);
}

TEST_CASE("an origin that accepts and stays silent times out") {
  IoThread io;
  FakeOrigin fake(io, [](asio::ip::tcp::socket& s, int) -> asio::awaitable<void> {
    while (co_await ReadTagged(s)) {
    }
  });
  auto start = std::chrono::steady_clock::now();
  ConnectResult r = Connect(io, fake, "sslmode=prefer", 300ms);
  REQUIRE_FALSE(r.ok());
  CHECK(r.failure.failure == ValidationFailure::kTimeout);
  CHECK(std::chrono::steady_clock::now() - start < 3s);
}

TEST_CASE("the origin asking for a password the origin string lacks is bad credentials") {
  IoThread io;
  FakeOrigin fake(io, ReplyToStartup(AuthFrame(3)));
  auto config = ParseOriginConfig("postgresql://fake@127.0.0.1:" + std::to_string(fake.port()) + "/db?sslmode=disable");
  REQUIRE(config.ok());
  ConnectResult r = Await(io, ConnectOrigin(io.executor(), *config, {}));
  REQUIRE_FALSE(r.ok());
  CHECK(r.failure.failure == ValidationFailure::kBadCredentials);
}

// ---------------------------------------------------------------------------
// Endpoint sessions against the fake origin.
// ---------------------------------------------------------------------------

std::string RowDescription() {
  protocol::RowDescription desc;
  desc.fields.push_back(protocol::FieldDescription{.name = "v", .type_oid = 25, .type_size = -1});
  std::string out;
  protocol::Encode(desc, out);
  return out;
}

std::string Row(std::string_view value) {
  std::string out;
  std::vector<protocol::NullableValue> cells = {value};
  protocol::EncodeDataRow(cells, out);
  return out;
}

std::string Ready(char status) {
  std::string out;
  protocol::AppendFrame(out, 'Z', std::string_view(&status, 1));
  return out;
}

// A fake backend that logs in with trust and answers simple queries:
//   "die"       two rows, half a third, then the connection closes;
//   "BEGIN"     BEGIN, 'T';
//   "kill"      FATAL 57P01, then close (as pg_terminate_backend);
//   "nosqlstate" an ErrorResponse without SQLSTATE;
//   anything else: one row "ok" and the current status.
FakeOrigin::Script Backend() {
  return [](asio::ip::tcp::socket& s, int) -> asio::awaitable<void> {
    if (!co_await ReadStartupPacket(s)) co_return;
    co_await WriteBytes(s, TrustLoginBytes());
    char status = 'I';
    while (auto m = co_await ReadTagged(s)) {
      if (m->tag != 'Q') continue;
      std::string sql = m->payload.substr(0, m->payload.find('\0'));
      if (sql == "die") {
        std::string partial = Row(std::string(100, 'z'));
        co_await WriteBytes(s, RowDescription() + Row("1") + Row("2") + partial.substr(0, 20));
        co_return;
      }
      if (sql == "kill") {
        std::string out;
        protocol::EncodeErrorResponse(out, "FATAL", "57P01", "terminating connection due to administrator command");
        co_await WriteBytes(s, out);
        co_return;
      }
      if (sql == "BEGIN") {
        status = 'T';
        std::string out;
        protocol::Encode(protocol::CommandComplete{"BEGIN"}, out);
        co_await WriteBytes(s, out + Ready(status));
        continue;
      }
      if (sql == "nosqlstate") {
        co_await WriteBytes(s, Frame('E', std::string("SERROR\0Mplain error\0\0", 21)) + Ready(status));
        continue;
      }
      std::string out = RowDescription() + Row("ok");
      protocol::Encode(protocol::CommandComplete{"SELECT 1"}, out);
      co_await WriteBytes(s, out + Ready(status));
    }
  };
}

std::unique_ptr<Endpoint> MakeEndpoint(IoThread& io, const FakeOrigin& fake) {
  EndpointOptions options;
  options.origin = fake.Origin();
  options.pool.max_size = 2;
  options.pool.acquire_timeout = 2s;
  auto ep = Endpoint::Create(io.executor(), options);
  REQUIRE(ep.ok());
  return std::move(*ep);
}

TEST_CASE("an origin dying mid-DataRow stream: rows so far, then FATAL 08006, and the session ends") {
  IoThread io;
  FakeOrigin fake(io, Backend());
  auto ep = MakeEndpoint(io, fake);
  auto client = OpenSession(io, *ep);
  Result r = Await(io, client->Query("die"));
  CHECK(r.rows.size() == 2);
  CHECK(r.sqlstate == "08006");
  CHECK(r.severity == "FATAL");
  CHECK(r.closed);  // as a direct connection whose server died: no ReadyForQuery
  for (int i = 0; i < 200 && ep->Stats().sessions > 0; ++i) std::this_thread::sleep_for(10ms);
  CHECK(ep->Stats().sessions == 0);
  CHECK(ep->Stats().discarded == 1);
  // Other sessions are unaffected.
  auto other = OpenSession(io, *ep);
  CHECK(Await(io, other->Query("SELECT")).Cell() == "ok");
  ep->Stop();
}

TEST_CASE("an origin FATAL mid-transaction reaches the client as it is, and the session ends") {
  IoThread io;
  FakeOrigin fake(io, Backend());
  auto ep = MakeEndpoint(io, fake);
  auto client = OpenSession(io, *ep);
  REQUIRE(Await(io, client->Query("BEGIN")).status == 'T');
  Result killed = Await(io, client->Query("kill"));
  CHECK(killed.sqlstate == "57P01");
  CHECK(killed.severity == "FATAL");
  CHECK(killed.error_message == "terminating connection due to administrator command");
  int errors = 0;
  for (const auto& m : killed.messages) errors += m.tag == 'E';
  CHECK(errors == 1);  // the origin's, not a second one of ours
  CHECK(killed.closed);
  ep->Stop();
}

TEST_CASE("an origin FATAL in autocommit also ends the session (no ReadyForQuery after a FATAL)") {
  IoThread io;
  FakeOrigin fake(io, Backend());
  auto ep = MakeEndpoint(io, fake);
  auto client = OpenSession(io, *ep);
  Result killed = Await(io, client->Query("kill"));
  CHECK(killed.sqlstate == "57P01");
  CHECK(killed.severity == "FATAL");
  CHECK(killed.closed);
  CHECK_FALSE(killed.Has('Z'));
  ep->Stop();
}

TEST_CASE("an origin that accepts and never answers is reported to every waiter as 08001, not 53300") {
  IoThread io;
  FakeOrigin fake(io, [](asio::ip::tcp::socket& s, int) -> asio::awaitable<void> {
    while (co_await ReadTagged(s)) {
    }
  });
  EndpointOptions options;
  options.origin = fake.Origin();
  options.pool.max_size = 1;
  options.pool.connect_timeout = 300ms;
  options.pool.acquire_timeout = 800ms;
  auto created = Endpoint::Create(io.executor(), options);
  REQUIRE(created.ok());
  auto& ep = *created;
  // Link-ready needs one origin login first; the first session pays for it.
  LinkPair pair = MakeInProcessLinkPair(io.executor(), io.executor());
  ep->Accept(std::move(pair.second));
  LinkClient first(std::move(pair.first));
  Result ready = Await(io, first.Open());
  CHECK(ready.sqlstate == "08001");
  CHECK(ready.error_message.find("timed out after 300 ms") != std::string::npos);
  CHECK(ready.closed);
  // Three at once, sharing one slot: all hear the origin's failure.
  std::vector<std::unique_ptr<LinkClient>> clients;
  std::vector<std::future<Result>> results;
  for (int i = 0; i < 3; ++i) {
    LinkPair p = MakeInProcessLinkPair(io.executor(), io.executor());
    ep->Accept(std::move(p.second));
    clients.push_back(std::make_unique<LinkClient>(std::move(p.first)));
    results.push_back(asio::co_spawn(io.io(), clients.back()->Open(), asio::use_future));
  }
  for (auto& f : results) {
    REQUIRE(f.wait_for(5s) == std::future_status::ready);
    Result r = f.get();
    INFO(r.error_message);
    CHECK(r.sqlstate == "08001");
    CHECK(r.error_message.find("timed out") != std::string::npos);
  }
  CHECK(ep->Stats().acquire_timeouts == 0);
  ep->Stop();
}

TEST_CASE("the default connect timeout is shorter than the acquire timeout") {
  PoolOptions defaults;
  CHECK(defaults.connect_timeout == std::chrono::milliseconds(5000));
  CHECK(defaults.connect_timeout < defaults.acquire_timeout);
}

TEST_CASE("an ErrorResponse without SQLSTATE from the origin is forwarded untouched") {
  IoThread io;
  FakeOrigin fake(io, Backend());
  auto ep = MakeEndpoint(io, fake);
  auto client = OpenSession(io, *ep);
  Result r = Await(io, client->Query("nosqlstate"));
  CHECK(r.Has('E'));
  CHECK(r.sqlstate.empty());
  CHECK(r.error_message == "plain error");
  CHECK(r.status == 'I');
  CHECK(Await(io, client->Query("SELECT")).Cell() == "ok");
  ep->Stop();
}

TEST_CASE("a hello that is not a StartupMessage ends the link with 08P01") {
  IoThread io;
  FakeOrigin fake(io, Backend());
  auto ep = MakeEndpoint(io, fake);
  LinkPair pair = MakeInProcessLinkPair(io.executor(), io.executor());
  ep->Accept(std::move(pair.second));
  LinkClient client(std::move(pair.first));
  std::string ssl_request;
  protocol::Encode(protocol::SslRequest{}, ssl_request);
  REQUIRE(Await(io, client.Send(ssl_request)).ok());
  Result r = Await(io, client.ReadUntilReady());
  CHECK(r.sqlstate == "08P01");
  CHECK(r.severity == "FATAL");
  CHECK(r.closed);
  ep->Stop();
}

TEST_CASE("pipelined queries are answered in order across a released and re-acquired connection") {
  IoThread io;
  FakeOrigin fake(io, Backend());
  auto ep = MakeEndpoint(io, fake);
  auto client = OpenSession(io, *ep);
  std::string many;
  for (int i = 0; i < 50; ++i) many += QueryBytes(i % 7 == 3 ? "nosqlstate" : "SELECT");
  REQUIRE(Await(io, client->Send(many)).ok());
  for (int i = 0; i < 50; ++i) {
    CAPTURE(i);
    Result r = Await(io, client->ReadUntilReady());
    REQUIRE(r.status == 'I');
    CHECK(r.Has('E') == (i % 7 == 3));
  }
  ep->Stop();
  CHECK(ep->Stats().sessions == 0);
}

TEST_CASE("pool exhaustion mid-pipeline: one 53300, a ReadyForQuery per Query/Sync, the rest skipped until Sync") {
  IoThread io;
  FakeOrigin fake(io, Backend());
  EndpointOptions options;
  options.origin = fake.Origin();
  options.pool.max_size = 1;
  options.pool.acquire_timeout = 200ms;
  auto created = Endpoint::Create(io.executor(), options);
  REQUIRE(created.ok());
  auto& ep = *created;
  auto holder = OpenSession(io, *ep);
  auto waiter = OpenSession(io, *ep);
  REQUIRE(Await(io, holder->Query("BEGIN")).status == 'T');

  // A Query, then an extended unit cut before its Sync.
  std::string batch = QueryBytes("SELECT");
  protocol::Encode(protocol::Parse{"", "SELECT 1", {}}, batch);
  protocol::Encode(protocol::Bind{}, batch);
  protocol::Encode(protocol::Execute{"", 0}, batch);
  REQUIRE(Await(io, waiter->Send(batch)).ok());
  Result first = Await(io, waiter->ReadUntilReady());
  CHECK(first.sqlstate == "53300");
  CHECK(first.status == 'I');
  // The unit's Sync (and anything before it) arrives later: only a ReadyForQuery.
  std::string rest;
  protocol::Encode(protocol::Execute{"", 0}, rest);
  protocol::Encode(protocol::Sync{}, rest);
  REQUIRE(Await(io, waiter->Send(rest)).ok());
  Result synced = Await(io, waiter->ReadUntilReady());
  CHECK_FALSE(synced.Has('E'));
  CHECK(synced.messages.size() == 1);
  CHECK(synced.status == 'I');
  CHECK(ep->Stats().acquire_timeouts == 1);
  ep->Stop();
}

TEST_CASE("Terminate from the link ends the session without reaching the origin") {
  IoThread io;
  auto terminated = std::make_shared<std::atomic<bool>>(false);
  FakeOrigin fake(io, [terminated](asio::ip::tcp::socket& s, int) -> asio::awaitable<void> {
    if (!co_await ReadStartupPacket(s)) co_return;
    co_await WriteBytes(s, TrustLoginBytes());
    while (auto m = co_await ReadTagged(s)) {
      if (m->tag == 'X') *terminated = true;
      if (m->tag == 'Q') {
        std::string out;
        protocol::Encode(protocol::CommandComplete{"SELECT 0"}, out);
        co_await WriteBytes(s, out + Ready('I'));
      }
    }
  });
  auto ep = MakeEndpoint(io, fake);
  auto client = OpenSession(io, *ep);
  REQUIRE(Await(io, client->Query("SELECT")).status == 'I');
  std::string x;
  protocol::Encode(protocol::Terminate{}, x);
  REQUIRE(Await(io, client->Send(x)).ok());
  for (int i = 0; i < 200 && ep->Stats().sessions > 0; ++i) std::this_thread::sleep_for(10ms);
  CHECK(ep->Stats().sessions == 0);
  CHECK(ep->Stats().origin_idle == 1);  // returned, still open
  CHECK_FALSE(terminated->load());
  ep->Stop();  // now the pool closes it politely
  for (int i = 0; i < 200 && !terminated->load(); ++i) std::this_thread::sleep_for(10ms);
  CHECK(terminated->load());
}

}  // namespace
}  // namespace hyperpool::testing
