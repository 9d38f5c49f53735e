// ServerHandshake (src/client/server_handshake.h) without sockets: bytes in,
// bytes and decisions out, fed whole or one byte at a time.

#include "client/server_handshake.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "protocol/auth/scram.h"
#include "protocol/codec.h"

namespace hyperpool::client {
namespace {

namespace pr = protocol;
using Event = ServerHandshake::Event;

HandshakeConfig Config() {
  static const auth::ScramVerifier verifier = *auth::MakeScramVerifier("s3cret", "0123456789abcdef", 4096);
  HandshakeConfig c;
  c.user = "app";
  c.database = "appdb";
  c.verifier = verifier;
  c.mock_secret = "mock-secret-for-tests";
  c.server_nonce = "ServerNonce";
  return c;
}

std::string Startup(std::vector<std::pair<std::string_view, std::string_view>> params,
                    int32_t version = pr::kProtocolVersion30) {
  pr::StartupMessage m;
  m.protocol_version = version;
  m.parameters = std::move(params);
  std::string out;
  pr::Encode(m, out);
  return out;
}

// Drives a ServerHandshake like the session does; records every step.
struct Driver {
  explicit Driver(HandshakeConfig config = Config()) : hs(std::move(config)) {}
  ServerHandshake hs;
  std::string pending;  // bytes "received", not yet consumed
  std::string written;  // what the handshake asked to write, not yet taken
  std::string all_written;  // everything it asked to write
  std::vector<Event> events;
  bool auth_failed = false;  // some step said so

  // Feeds `bytes` (all at once, or one byte per Advance when `bytewise`) and
  // runs until it needs more or reaches a final event.
  Event Feed(std::string_view bytes, bool bytewise = false) {
    size_t fed = 0;
    for (;;) {
      if (bytewise) {
        if (fed < bytes.size()) pending.push_back(bytes[fed++]);
      } else {
        pending.append(bytes);
        fed = bytes.size();
      }
      for (;;) {
        ServerHandshake::Step s = hs.Advance(pending);
        REQUIRE(s.consumed <= pending.size());
        pending.erase(0, s.consumed);
        written += s.output;
        all_written += s.output;
        events.push_back(s.event);
        auth_failed = auth_failed || s.auth_failed;
        if (s.event == Event::kEncryptionRefused) continue;
        if (s.event != Event::kNeedMore) return s.event;
        // Progress is guaranteed: it never asks for bytes it already has.
        REQUIRE(s.bytes_needed > pending.size());
        break;
      }
      if (fed == bytes.size()) return Event::kNeedMore;
    }
  }
  // The last whole message written (nullopt when none); takes them all.
  std::optional<std::pair<char, std::string>> LastWritten() {
    std::optional<std::pair<char, std::string>> last;
    while (auto m = NextWritten()) last = std::move(m);
    return last;
  }
  // Takes the next whole message written (nullopt when none).
  std::optional<std::pair<char, std::string>> NextWritten() {
    pr::FrameReader reader(pr::FrameReader::Mode::kTagged);
    auto r = reader.Read(written);
    if (!r.is_frame()) return std::nullopt;
    std::pair<char, std::string> m{r.frame().tag, std::string(r.frame().payload)};
    written.erase(0, r.frame().size());
    return m;
  }
};

// Runs SCRAM from the client side against `d` with `password`; returns the
// final event.
Event RunScram(Driver& d, const std::string& password, bool bytewise = false) {
  auto sasl = d.NextWritten();
  REQUIRE(sasl);
  REQUIRE(sasl->first == 'R');
  auto client = auth::ScramClient::Create({.password = password, .client_nonce = "ClientNonce"});
  REQUIRE(client.ok());
  std::string out;
  pr::Encode(pr::SaslInitialResponse{client->mechanism(), client->ClientFirstMessage()}, out);
  Event e = d.Feed(out, bytewise);
  if (e != Event::kNeedMore) return e;
  auto cont = d.NextWritten();
  REQUIRE(cont);
  REQUIRE(cont->first == 'R');
  auto decoded = pr::DecodeAuthentication(cont->second);
  REQUIRE(decoded.ok());
  auto final_msg = client->HandleServerFirst(std::get<pr::AuthenticationSaslContinue>(*decoded).data);
  REQUIRE(final_msg.ok());
  out.clear();
  pr::Encode(pr::SaslResponse{*final_msg}, out);
  return d.Feed(out, bytewise);
}

std::string SqlStateOf(const std::pair<char, std::string>& m) {
  auto e = pr::DecodeErrorResponse(m.second);
  return e.ok() ? std::string(e->sqlstate()) : "undecodable";
}

TEST_CASE("a full SCRAM login authenticates and reports the startup parameters") {
  const bool bytewise = GENERATE(false, true);
  Driver d;
  REQUIRE(d.Feed(Startup({{"user", "app"}, {"database", "appdb"}, {"application_name", "t"}}), bytewise) ==
          Event::kNeedMore);
  REQUIRE(RunScram(d, "s3cret", bytewise) == Event::kAuthenticated);
  CHECK(d.hs.user() == "app");
  CHECK(d.hs.database() == "appdb");
  REQUIRE(d.hs.parameters().size() == 1);
  CHECK(d.hs.parameters()[0].first == "application_name");
  auto final_msg = d.NextWritten();
  REQUIRE(final_msg);
  CHECK(final_msg->first == 'R');  // SASLFinal
  auto ok = d.NextWritten();
  REQUIRE(ok);
  CHECK(ok->second == std::string("\0\0\0\0", 4));  // AuthenticationOk
  CHECK(d.pending.empty());
}

std::string Replace(std::string text, std::string_view from, std::string_view to) {
  for (size_t at; (at = text.find(from)) != std::string::npos;) text.replace(at, from.size(), to);
  return text;
}

TEST_CASE("an unknown user runs the whole SCRAM exchange and gets the wrong-password answer") {
  Event wrong_password_end, unknown_user_end;
  Driver wrong;
  REQUIRE(wrong.Feed(Startup({{"user", "app"}, {"database", "appdb"}})) == Event::kNeedMore);
  wrong_password_end = RunScram(wrong, "not-it");
  Driver unknown;
  REQUIRE(unknown.Feed(Startup({{"user", "mallory"}, {"database", "appdb"}})) == Event::kNeedMore);
  unknown_user_end = RunScram(unknown, "s3cret");
  CHECK(wrong_password_end == Event::kClose);
  CHECK(unknown_user_end == Event::kClose);
  // Same sequence of decisions: the unknown user got a server-first too.
  CHECK(wrong.events == unknown.events);
  auto a = wrong.LastWritten();
  auto b = unknown.LastWritten();
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->first == 'E');
  CHECK(b->first == 'E');
  CHECK(SqlStateOf(*a) == "28P01");
  CHECK(SqlStateOf(*b) == "28P01");
  CHECK(pr::DecodeErrorResponse(b->second)->message() == "password authentication failed for user \"mallory\"");
  // Byte for byte the same answer apart from the name.
  CHECK(Replace(a->second, "\"app\"", "\"<user>\"") == Replace(b->second, "\"mallory\"", "\"<user>\""));
}

TEST_CASE("the mock salt of an unknown user is the same on every attempt") {
  Driver a, b;
  REQUIRE(a.Feed(Startup({{"user", "mallory"}})) == Event::kNeedMore);
  REQUIRE(b.Feed(Startup({{"user", "mallory"}})) == Event::kNeedMore);
  auto client = auth::ScramClient::Create({.password = "x", .client_nonce = "ClientNonce"});
  REQUIRE(client.ok());
  std::string initial;
  pr::Encode(pr::SaslInitialResponse{client->mechanism(), client->ClientFirstMessage()}, initial);
  REQUIRE(a.Feed(initial) == Event::kNeedMore);
  REQUIRE(b.Feed(initial) == Event::kNeedMore);
  CHECK(a.written == b.written);
  CHECK(a.written.find("s=") != std::string::npos);
}

TEST_CASE("an unknown user's server-first names the real verifier's iteration count") {
  // ClientOptions::scram_iterations may lower the count; the mock must not
  // stand out by keeping 4096.
  HandshakeConfig config = Config();
  config.verifier = *auth::MakeScramVerifier("s3cret", "0123456789abcdef", 16);
  for (std::string_view user : {"app", "mallory"}) {
    CAPTURE(user);
    Driver d(config);
    REQUIRE(d.Feed(Startup({{"user", user}})) == Event::kNeedMore);
    auto client = auth::ScramClient::Create({.password = "x", .client_nonce = "ClientNonce"});
    REQUIRE(client.ok());
    std::string initial;
    pr::Encode(pr::SaslInitialResponse{client->mechanism(), client->ClientFirstMessage()}, initial);
    REQUIRE(d.Feed(initial) == Event::kNeedMore);
    CHECK(d.written.find(",i=16") != std::string::npos);
  }
}

TEST_CASE("AcceptsQuickScram: base64 nonces without extra_float_digits") {
  CHECK(AcceptsQuickScram(false, "n,,n=,r=Z8mR+/abcdEFGH0123456789=="));      // libpq, node-postgres, postgres.js
  CHECK(AcceptsQuickScram(false, "y,,n=*,r=abc"));
  CHECK(AcceptsQuickScram(false, "p=tls-server-end-point,,n=,r=abc,x=ext"));  // channel binding, an extension
  CHECK(AcceptsQuickScram(false, "n,a=authz,n=user,r=abc"));
  CHECK_FALSE(AcceptsQuickScram(true, "n,,n=,r=Z8mR"));                       // PgJDBC always sets extra_float_digits
  CHECK_FALSE(AcceptsQuickScram(false, "n,,n=,r=rOprNGfwEbeRWgbNEkqO%hvYD"));  // ongres: any printable character
  CHECK_FALSE(AcceptsQuickScram(false, "n,,n=,r=a)b"));
  CHECK_FALSE(AcceptsQuickScram(false, "n,,n=,r="));
  CHECK_FALSE(AcceptsQuickScram(false, "n,,n=user"));
  CHECK_FALSE(AcceptsQuickScram(false, "n,,"));
  CHECK_FALSE(AcceptsQuickScram(false, ""));
}

namespace {

// The count a server-first message names (",i=N"), or 0.
uint32_t IterationsIn(const std::string& written) {
  const std::size_t at = written.find(",i=");
  return at == std::string::npos ? 0 : static_cast<uint32_t>(std::stoul(written.substr(at + 3)));
}

HandshakeConfig QuickConfig() {
  HandshakeConfig c = Config();
  c.quick_verifier = *auth::MakeScramVerifier("s3cret", "fedcba9876543210", kQuickScramIterations);
  return c;
}

}  // namespace

TEST_CASE("a generated password's quick verifier: 16 iterations where the client accepts them") {
  SECTION("a libpq-like client logs in with 16") {
    Driver d(QuickConfig());
    REQUIRE(d.Feed(Startup({{"user", "app"}, {"database", "appdb"}})) == Event::kNeedMore);
    REQUIRE(RunScram(d, "s3cret") == Event::kAuthenticated);
    CHECK(IterationsIn(d.all_written) == kQuickScramIterations);
  }
  SECTION("a startup with extra_float_digits (PgJDBC) gets 4096 and logs in") {
    Driver d(QuickConfig());
    REQUIRE(d.Feed(Startup({{"user", "app"}, {"database", "appdb"}, {"extra_float_digits", "3"}})) ==
            Event::kNeedMore);
    REQUIRE(RunScram(d, "s3cret") == Event::kAuthenticated);
    CHECK(IterationsIn(d.all_written) == 4096);
    // The parameter still reaches the session.
    CHECK(d.hs.parameters() == std::vector<std::pair<std::string, std::string>>{{"extra_float_digits", "3"}});
  }
  SECTION("a wrong password is 28P01 with 16 as with 4096") {
    Driver d(QuickConfig());
    REQUIRE(d.Feed(Startup({{"user", "app"}})) == Event::kNeedMore);
    REQUIRE(RunScram(d, "nope") == Event::kClose);
    CHECK(IterationsIn(d.all_written) == kQuickScramIterations);
    CHECK(d.auth_failed);
  }
  SECTION("an unknown user is offered the same count as the Client's user") {
    Driver d(QuickConfig());
    REQUIRE(d.Feed(Startup({{"user", "mallory"}})) == Event::kNeedMore);
    REQUIRE(RunScram(d, "s3cret") == Event::kClose);
    CHECK(IterationsIn(d.all_written) == kQuickScramIterations);
    CHECK(d.auth_failed);
  }
  SECTION("with more users (their own counts) unknown users and those users keep theirs") {
    HandshakeConfig c = QuickConfig();
    c.other_users.emplace("batch", *auth::MakeScramVerifier("b4tch", "0011223344556677", 4096));
    for (std::string_view user : {"mallory", "batch"}) {
      CAPTURE(user);
      Driver d(c);
      REQUIRE(d.Feed(Startup({{"user", user}})) == Event::kNeedMore);
      (void)RunScram(d, "b4tch");
      CHECK(IterationsIn(d.all_written) == 4096);
    }
  }
}

TEST_CASE("an unknown database is reported only after authentication") {
  SECTION("right password: AuthenticationOk, then 3D000") {
    Driver d;
    REQUIRE(d.Feed(Startup({{"user", "app"}, {"database", "other"}})) == Event::kNeedMore);
    REQUIRE(RunScram(d, "s3cret") == Event::kClose);
    REQUIRE(d.NextWritten()->first == 'R');  // SASLFinal
    REQUIRE(d.NextWritten()->first == 'R');  // AuthenticationOk
    auto e = d.NextWritten();
    REQUIRE(e);
    CHECK(SqlStateOf(*e) == "3D000");
    CHECK(pr::DecodeErrorResponse(e->second)->message() == "database \"other\" does not exist");
  }
  SECTION("wrong password: 28P01, the database is not mentioned") {
    Driver d;
    REQUIRE(d.Feed(Startup({{"user", "app"}, {"database", "other"}})) == Event::kNeedMore);
    REQUIRE(RunScram(d, "nope") == Event::kClose);
    auto e = d.NextWritten();
    REQUIRE(e);
    CHECK(SqlStateOf(*e) == "28P01");
  }
}

TEST_CASE("the admin console's database authenticates any user name with the Client's password") {
  HandshakeConfig config = Config();
  config.admin_database = "hyperpool";
  SECTION("an admin name (who is an admin is the session's decision, after authentication)") {
    Driver d(config);
    REQUIRE(d.Feed(Startup({{"user", "ops"}, {"database", "hyperpool"}})) == Event::kNeedMore);
    REQUIRE(RunScram(d, "s3cret") == Event::kAuthenticated);
    CHECK(d.hs.user() == "ops");
    CHECK(d.hs.database() == "hyperpool");
  }
  SECTION("a wrong password is still 28P01") {
    Driver d(config);
    REQUIRE(d.Feed(Startup({{"user", "ops"}, {"database", "hyperpool"}})) == Event::kNeedMore);
    REQUIRE(RunScram(d, "nope") == Event::kClose);
    CHECK(SqlStateOf(*d.LastWritten()) == "28P01");
  }
  SECTION("other databases keep the user check") {
    Driver d(config);
    REQUIRE(d.Feed(Startup({{"user", "ops"}, {"database", "appdb"}})) == Event::kNeedMore);
    REQUIRE(RunScram(d, "s3cret") == Event::kClose);
    CHECK(SqlStateOf(*d.LastWritten()) == "28P01");
  }
  SECTION("without a console the name is an unknown database") {
    Driver d;
    REQUIRE(d.Feed(Startup({{"user", "app"}, {"database", "hyperpool"}})) == Event::kNeedMore);
    REQUIRE(RunScram(d, "s3cret") == Event::kClose);
    CHECK(SqlStateOf(*d.LastWritten()) == "3D000");
  }
}

TEST_CASE("during SASL any message that is not 'p' fails at once with 08P01, from its tag alone") {
  const std::string first_byte = GENERATE(std::string(1, '\0'), std::string("X"), std::string("Q"), std::string("S"));
  Driver d;
  REQUIRE(d.Feed(Startup({{"user", "app"}})) == Event::kNeedMore);
  REQUIRE(d.NextWritten()->first == 'R');
  // Only the tag byte has arrived: no length is known yet.
  REQUIRE(d.Feed(first_byte) == Event::kClose);
  auto e = d.NextWritten();
  REQUIRE(e);
  CHECK(SqlStateOf(*e) == "08P01");
  CHECK(pr::DecodeErrorResponse(e->second)->message() ==
        "expected SASL response, got message type " + std::to_string(int(static_cast<unsigned char>(first_byte[0]))));
}

TEST_CASE("a second StartupMessage during SASL gets 08P01 without waiting for its bogus length") {
  Driver d;
  REQUIRE(d.Feed(Startup({{"user", "app"}})) == Event::kNeedMore);
  REQUIRE(d.Feed(Startup({{"user", "app"}})) == Event::kClose);
  d.NextWritten();  // AuthenticationSASL
  auto e = d.NextWritten();
  REQUIRE(e);
  CHECK(SqlStateOf(*e) == "08P01");
}

TEST_CASE("a SASL message longer than any SCRAM payload fails when its header arrives") {
  Driver d;
  REQUIRE(d.Feed(Startup({{"user", "app"}})) == Event::kNeedMore);
  REQUIRE(d.Feed(std::string("p\x00\x10\x00\x01", 5)) == Event::kClose);
  d.NextWritten();
  auto e = d.NextWritten();
  REQUIRE(e);
  CHECK(SqlStateOf(*e) == "08P01");
}

TEST_CASE("an invalid startup packet length closes silently, as PostgreSQL does") {
  // 'X' 0 0 0 4 is node-postgres's Terminate sent before any startup packet.
  const std::string bytes = GENERATE(std::string("X\0\0\0\x04", 5), std::string("\x7f\xff\xff\xff", 4),
                                     std::string("\x00\x00\x00\x03", 4), std::string("\xff\xff\xff\xff", 4));
  Driver d;
  CHECK(d.Feed(bytes) == Event::kClose);
  CHECK(d.written.empty());
  CHECK(d.hs.state() == ServerHandshake::State::kFailed);
}

TEST_CASE("an unsupported protocol version gets 0A000 as from PostgreSQL") {
  Driver d;
  REQUIRE(d.Feed(Startup({{"user", "app"}}, pr::MakeProtocolVersion(4, 0))) == Event::kClose);
  auto e = d.NextWritten();
  REQUIRE(e);
  CHECK(SqlStateOf(*e) == "0A000");
  CHECK(pr::DecodeErrorResponse(e->second)->message() == "unsupported frontend protocol 4.0: server supports 3.0 to 3.0");
}

TEST_CASE("SSLRequest is refused with N; bytes pipelined after it close unanswered") {
  std::string ssl;
  pr::Encode(pr::SslRequest{}, ssl);
  SECTION("alone") {
    ServerHandshake hs(Config());
    ServerHandshake::Step s = hs.Advance(ssl);
    CHECK(s.event == Event::kEncryptionRefused);
    CHECK(s.output == "N");
    CHECK(s.consumed == ssl.size());
    CHECK(hs.Advance("").event == Event::kNeedMore);
  }
  SECTION("with a StartupMessage behind it") {
    ServerHandshake hs(Config());
    ServerHandshake::Step s = hs.Advance(ssl + Startup({{"user", "app"}}));
    CHECK(s.event == Event::kClose);
    CHECK(s.output.empty());
  }
  SECTION("twice") {
    Driver d;
    REQUIRE(d.Feed(ssl) == Event::kNeedMore);
    REQUIRE(d.Feed(ssl) == Event::kClose);
    CHECK(d.written.substr(0, 1) == "N");
  }
}

HandshakeConfig TlsConfig(bool require) {
  HandshakeConfig c = Config();
  c.offer_tls = true;
  c.require_tls = require;
  return c;
}

TEST_CASE("with TLS offered, SSLRequest is answered S and the login continues inside TLS") {
  std::string ssl;
  pr::Encode(pr::SslRequest{}, ssl);
  const bool require = GENERATE(false, true);
  CAPTURE(require);
  Driver d(TlsConfig(require));
  ServerHandshake::Step s = d.hs.Advance(ssl);
  CHECK(s.event == Event::kTlsAccepted);
  CHECK(s.output == "S");
  CHECK(s.consumed == ssl.size());
  d.hs.OnTlsEstablished();
  CHECK(d.hs.encrypted());
  REQUIRE(d.Feed(Startup({{"user", "app"}, {"database", "appdb"}})) == Event::kNeedMore);
  CHECK(RunScram(d, "s3cret") == Event::kAuthenticated);
}

TEST_CASE("with TLS offered, bytes sent together with the SSLRequest get 08P01 and no S (CVE-2021-23222)") {
  std::string ssl;
  pr::Encode(pr::SslRequest{}, ssl);
  // Any bytes at all, not only a StartupMessage: one stray byte is enough.
  const std::string extra = GENERATE(std::string("Q"), Startup({{"user", "app"}}));
  ServerHandshake hs(TlsConfig(false));
  ServerHandshake::Step s = hs.Advance(ssl + extra);
  REQUIRE(s.event == Event::kClose);
  CHECK(s.output.find('S') != 0);
  pr::FrameReader reader(pr::FrameReader::Mode::kTagged);
  auto r = reader.Read(s.output);
  REQUIRE(r.is_frame());
  CHECK(r.frame().tag == 'E');
  auto e = pr::DecodeErrorResponse(r.frame().payload);
  REQUIRE(e.ok());
  CHECK(std::string(e->sqlstate()) == "08P01");
  CHECK(std::string(e->message()) == "received unencrypted data after SSL request");
  CHECK(hs.state() == ServerHandshake::State::kFailed);
}

TEST_CASE("with TLS required, a plaintext StartupMessage gets FATAL 28000 before authentication") {
  // Known and unknown users alike: the refusal says nothing about either.
  const std::string user = GENERATE(std::string("app"), std::string("mallory"));
  Driver d(TlsConfig(true));
  d.hs.set_peer_host("192.0.2.7");
  REQUIRE(d.Feed(Startup({{"user", user}, {"database", "appdb"}})) == Event::kClose);
  CHECK_FALSE(d.auth_failed);
  auto m = d.LastWritten();
  REQUIRE(m);
  CHECK(m->first == 'E');
  CHECK(SqlStateOf(*m) == "28000");
  CHECK(std::string(pr::DecodeErrorResponse(m->second)->message()) ==
        "no pg_hba.conf entry for host \"192.0.2.7\", user \"" + user + "\", database \"appdb\", no encryption");
}

TEST_CASE("with TLS allowed, plaintext logins still work and GSSENCRequest is still refused") {
  std::string gss;
  pr::Encode(pr::GssEncRequest{}, gss);
  Driver d(TlsConfig(false));
  REQUIRE(d.Feed(gss) == Event::kNeedMore);
  CHECK(d.written == "N");
  d.written.clear();
  REQUIRE(d.Feed(Startup({{"user", "app"}, {"database", "appdb"}})) == Event::kNeedMore);
  CHECK(RunScram(d, "s3cret") == Event::kAuthenticated);
}

TEST_CASE("on a Unix socket TLS is neither offered nor required, as PostgreSQL") {
  std::string ssl;
  pr::Encode(pr::SslRequest{}, ssl);
  Driver d(TlsConfig(true));
  d.hs.set_unix_socket();
  REQUIRE(d.Feed(ssl) == Event::kNeedMore);
  CHECK(d.written == "N");
  d.written.clear();
  REQUIRE(d.Feed(Startup({{"user", "app"}, {"database", "appdb"}})) == Event::kNeedMore);
  CHECK(RunScram(d, "s3cret") == Event::kAuthenticated);
}

HandshakeConfig TwoUsersConfig() {
  HandshakeConfig c = Config();
  c.other_users.emplace("reporting", *auth::MakeScramVerifier("r3ports", "fedcba9876543210", 4096));
  return c;
}

TEST_CASE("several app users each log in with their own password") {
  for (auto [user, password] : {std::pair{"app", "s3cret"}, std::pair{"reporting", "r3ports"}}) {
    CAPTURE(user);
    Driver d(TwoUsersConfig());
    REQUIRE(d.Feed(Startup({{"user", user}, {"database", "appdb"}})) == Event::kNeedMore);
    CHECK(RunScram(d, password) == Event::kAuthenticated);
    CHECK(d.hs.user() == user);
  }
  // One user's password is not another's.
  Driver d(TwoUsersConfig());
  REQUIRE(d.Feed(Startup({{"user", "reporting"}, {"database", "appdb"}})) == Event::kNeedMore);
  CHECK(RunScram(d, "s3cret") == Event::kClose);
}

TEST_CASE("with several users, a wrong password and an unknown user get identical 28P01 answers") {
  Driver wrong(TwoUsersConfig());
  REQUIRE(wrong.Feed(Startup({{"user", "reporting"}, {"database", "appdb"}})) == Event::kNeedMore);
  const Event wrong_end = RunScram(wrong, "nope");
  Driver unknown(TwoUsersConfig());
  REQUIRE(unknown.Feed(Startup({{"user", "reportinf"}, {"database", "appdb"}})) == Event::kNeedMore);
  const Event unknown_end = RunScram(unknown, "r3ports");
  CHECK(wrong_end == Event::kClose);
  CHECK(unknown_end == Event::kClose);
  CHECK(wrong.events == unknown.events);
  // Both are logged as auth_failed.
  CHECK(wrong.auth_failed);
  CHECK(unknown.auth_failed);
  auto a = wrong.LastWritten();
  auto b = unknown.LastWritten();
  REQUIRE(a);
  REQUIRE(b);
  CHECK(SqlStateOf(*a) == "28P01");
  CHECK(Replace(a->second, "\"reporting\"", "\"<u>\"") == Replace(b->second, "\"reportinf\"", "\"<u>\""));
}

// A DatabaseDirectory double: "appdb" and "reports"; "reporting" may use only "reports".
class TwoDatabases final : public DatabaseDirectory {
 public:
  Access Check(std::string_view user, std::string_view database) const override {
    if (database != "appdb" && database != "reports") return Access::kUnknown;
    if (user == "reporting" && database != "reports") return Access::kDenied;
    return Access::kAllowed;
  }
};

HandshakeConfig DirectoryConfig() {
  HandshakeConfig c = TwoUsersConfig();
  c.databases = std::make_shared<TwoDatabases>();
  return c;
}

TEST_CASE("with a database directory: allowed logs in, denied gets 42501 and unknown 3D000 after authentication") {
  auto [user, password, database, sqlstate] = GENERATE(table<std::string, std::string, std::string, std::string>({
      {"app", "s3cret", "reports", ""},
      {"reporting", "r3ports", "reports", ""},
      {"app", "s3cret", "appdb", ""},
      {"reporting", "r3ports", "appdb", "42501"},
      {"app", "s3cret", "nosuchdb", "3D000"},
      {"reporting", "nope", "appdb", "28P01"},
      {"reporting", "nope", "nosuchdb", "28P01"},
  }));
  CAPTURE(user, database);
  Driver d(DirectoryConfig());
  REQUIRE(d.Feed(Startup({{"user", user}, {"database", database}})) == Event::kNeedMore);
  const Event end = RunScram(d, password);
  if (sqlstate.empty()) {
    CHECK(end == Event::kAuthenticated);
    CHECK(d.hs.database() == database);
    return;
  }
  CHECK(end == Event::kClose);
  // After a correct password, AuthenticationOk comes first (as PostgreSQL).
  const bool authenticated = d.written.find(std::string("R\0\0\0\x08\0\0\0\0", 9)) != std::string::npos;
  CHECK(authenticated == (sqlstate != "28P01"));
  auto e = d.LastWritten();
  REQUIRE(e);
  CHECK(SqlStateOf(*e) == sqlstate);
  if (sqlstate == "42501") {
    CHECK(pr::DecodeErrorResponse(e->second)->message() == "permission denied for database \"appdb\"");
  }
}

TEST_CASE("with a database directory, a wrong password reads the same whether the database exists or not") {
  Driver known(DirectoryConfig());
  REQUIRE(known.Feed(Startup({{"user", "reporting"}, {"database", "appdb"}})) == Event::kNeedMore);
  RunScram(known, "nope");
  Driver unknown(DirectoryConfig());
  REQUIRE(unknown.Feed(Startup({{"user", "reporting"}, {"database", "nosuchdb"}})) == Event::kNeedMore);
  RunScram(unknown, "nope");
  CHECK(known.events == unknown.events);
  CHECK(known.written == unknown.written);
}

TEST_CASE("a CancelRequest reports its key") {
  pr::CancelRequest c;
  c.process_id = 4242;
  c.secret_key = "abcd";
  std::string bytes;
  pr::Encode(c, bytes);
  ServerHandshake hs(Config());
  ServerHandshake::Step s = hs.Advance(bytes);
  CHECK(s.event == Event::kCancelRequest);
  CHECK(s.output.empty());
  CHECK(hs.cancel_process_id() == 4242);
  CHECK(hs.cancel_secret() == "abcd");
}

TEST_CASE("startup checks before authentication keep their answers") {
  SECTION("no user: 28000") {
    Driver d;
    REQUIRE(d.Feed(Startup({{"database", "appdb"}})) == Event::kClose);
    CHECK(SqlStateOf(*d.NextWritten()) == "28000");
  }
  SECTION("protocol 3.2 with _pq_ options: NegotiateProtocolVersion, then AuthenticationSASL") {
    Driver d;
    REQUIRE(d.Feed(Startup({{"user", "app"}, {"_pq_.x", "1"}}, pr::kProtocolVersion32)) == Event::kNeedMore);
    CHECK(d.NextWritten()->first == 'v');
    CHECK(d.NextWritten()->first == 'R');
  }
}

TEST_CASE("a walsender login (replication) authenticates as any other") {
  SECTION("replication: authenticated as any login, the value reported, not a parameter") {
    // The session then tunnels to a walsender of its own (client_session.h, RunTunnel).
    Driver d;
    REQUIRE(d.Feed(Startup({{"user", "app"}, {"database", "appdb"}, {"replication", "database"}})) == Event::kNeedMore);
    REQUIRE(RunScram(d, "s3cret") == Event::kAuthenticated);
    CHECK(d.hs.replication() == "database");
    CHECK(d.hs.parameters().empty());
  }
  SECTION("a physical walsender: refused by default (28000 before authentication, as pg_hba.conf would)") {
    Driver d;
    REQUIRE(d.Feed(Startup({{"user", "app"}, {"database", "replication"}, {"replication", "true"}})) ==
            Event::kClose);
    auto e = d.NextWritten();
    REQUIRE(e);
    CHECK(SqlStateOf(*e) == "28000");
    CHECK(e->second.find("no pg_hba.conf entry for replication connection") != std::string::npos);
  }
  SECTION("with replication kAll: allowed, its database (\"replication\", as pg_receivewal sends it) ignored") {
    HandshakeConfig c = Config();
    c.replication = ClientOptions::Replication::kAll;
    Driver d(c);
    REQUIRE(d.Feed(Startup({{"user", "app"}, {"database", "replication"}, {"replication", "true"}})) ==
            Event::kNeedMore);
    REQUIRE(RunScram(d, "s3cret") == Event::kAuthenticated);
    CHECK(d.hs.replication() == "true");
    CHECK(d.hs.database() == "appdb");
  }
  SECTION("with replication kOff: a logical walsender refused too") {
    HandshakeConfig c = Config();
    c.replication = ClientOptions::Replication::kOff;
    Driver d(c);
    REQUIRE(d.Feed(Startup({{"user", "app"}, {"database", "appdb"}, {"replication", "database"}})) ==
            Event::kClose);
    CHECK(SqlStateOf(*d.NextWritten()) == "28000");
  }
  SECTION("replication=false (or off, no, 0) is an ordinary login") {
    for (const char* no : {"false", "off", "no", "0"}) {
      Driver d;
      REQUIRE(d.Feed(Startup({{"user", "app"}, {"database", "appdb"}, {"replication", no}})) == Event::kNeedMore);
      REQUIRE(RunScram(d, "s3cret") == Event::kAuthenticated);
      CHECK(d.hs.replication().empty());
    }
  }
}

TEST_CASE("after a final event the handshake only says close") {
  Driver d;
  REQUIRE(d.Feed(std::string("X\0\0\0\x04", 5)) == Event::kClose);
  ServerHandshake::Step s = d.hs.Advance(Startup({{"user", "app"}}));
  CHECK(s.event == Event::kClose);
  CHECK(s.consumed == 0);
  CHECK(s.output.empty());
}

}  // namespace
}  // namespace hyperpool::client
