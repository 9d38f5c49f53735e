#include "endpoint/origin_config.h"

#include <string>
#include <utility>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

namespace hyperpool {
namespace {

using Settings = std::vector<std::pair<std::string, std::string>>;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// Builds the expected configuration from the defaults.
OriginConfig Expect(std::string user, void (*tweak)(OriginConfig&) = nullptr) {
  OriginConfig c;
  c.user = user;
  c.dbname = user;
  if (tweak) tweak(c);
  return c;
}

struct GoodCase {
  const char* text;
  OriginConfig want;
};

TEST_CASE("valid origin strings parse to the expected configuration") {
  auto [text, want] = GENERATE(values<GoodCase>({
      {"postgresql://alice:secret@db.example.com:6543/app?sslmode=require",
       Expect("alice", [](OriginConfig& c) {
         c.password = "secret";
         c.host = "db.example.com";
         c.port = 6543;
         c.dbname = "app";
         c.sslmode = SslMode::kRequire;
       })},
      {"postgres://alice@localhost", Expect("alice")},
      {"postgresql://al%40ice:p%40ss%2Fw%3Ard@[::1]:5433/my%20db",
       Expect("al@ice", [](OriginConfig& c) {
         c.password = "p@ss/w:rd";
         c.host = "::1";
         c.port = 5433;
         c.dbname = "my db";
       })},
      {"postgresql://u@[fe80::1]/d", Expect("u", [](OriginConfig& c) {
         c.host = "fe80::1";
         c.dbname = "d";
       })},
      {"postgresql://u@%2Fvar%2Frun%2Fpostgresql/db", Expect("u", [](OriginConfig& c) {
         c.host = "/var/run/postgresql";
         c.dbname = "db";
       })},
      {"postgresql:///db?host=/tmp&user=bob&port=5000", Expect("bob", [](OriginConfig& c) {
         c.host = "/tmp";
         c.port = 5000;
         c.dbname = "db";
       })},
      // A raw '@' in the password: the last '@' ends the user info.
      {"postgresql://u:p@ss@host/db", Expect("u", [](OriginConfig& c) {
         c.password = "p@ss";
         c.host = "host";
         c.dbname = "db";
       })},
      {"postgresql://u@h/d?ssl=true", Expect("u", [](OriginConfig& c) {
         c.host = "h";
         c.dbname = "d";
         c.sslmode = SslMode::kRequire;
       })},
      {"postgresql://u@h:/?application_name=a%26b&&sslsni=0", Expect("u", [](OriginConfig& c) {
         c.host = "h";
         c.application_name = "a&b";
         c.sslsni = false;
       })},
      {"host=h port=1 user=u password='it\\'s a secret' dbname=d", Expect("u", [](OriginConfig& c) {
         c.host = "h";
         c.port = 1;
         c.password = "it's a secret";
         c.dbname = "d";
       })},
      {"  user = u   host = h  ", Expect("u", [](OriginConfig& c) { c.host = "h"; })},
      {"user=u password=back\\ slash", Expect("u", [](OriginConfig& c) { c.password = "back slash"; })},
      {"user=u password=''", Expect("u")},
      {"user=u keepalives=1 keepalives_idle=30 tcp_user_timeout=0 target_session_attrs=any "
       "gssencmode=disable channel_binding=prefer",
       Expect("u")},
      {"user=u connect_timeout=10 application_name=x sslrootcert=/ca.pem sslcert=/c.pem "
       "sslkey=/k.pem sslmode=verify-full",
       Expect("u", [](OriginConfig& c) {
         c.connect_timeout = std::chrono::seconds(10);
         c.application_name = "x";
         c.sslrootcert = "/ca.pem";
         c.sslcert = "/c.pem";
         c.sslkey = "/k.pem";
         c.sslmode = SslMode::kVerifyFull;
       })},
      {"user=u fallback_application_name=fb", Expect("u", [](OriginConfig& c) { c.application_name = "fb"; })},
      {"user=u fallback_application_name=fb application_name=app",
       Expect("u", [](OriginConfig& c) { c.application_name = "app"; })},
      // Later values override earlier ones, as in libpq.
      {"user=a user=b port=1 port=2", Expect("b", [](OriginConfig& c) { c.port = 2; })},
      {"user=u options='-c search_path=a\\\\ b -cstatement_timeout=5s --work-mem=64MB'",
       Expect("u", [](OriginConfig& c) {
         c.options = "-c search_path=a\\ b -cstatement_timeout=5s --work-mem=64MB";
         c.settings = {{"search_path", "a b"}, {"statement_timeout", "5s"}, {"work_mem", "64MB"}};
       })},
      {"postgresql://u@h/d?options=-c%20geqo%3Doff", Expect("u", [](OriginConfig& c) {
         c.host = "h";
         c.dbname = "d";
         c.options = "-c geqo=off";
         c.settings = {{"geqo", "off"}};
       })},
      {"postgresql://u@h:65535", Expect("u", [](OriginConfig& c) {
         c.host = "h";
         c.port = 65535;
       })},
  }));
  CAPTURE(text);
  auto got = ParseOriginConfig(text);
  REQUIRE(got.ok());
  CHECK(got->host == want.host);
  CHECK(got->port == want.port);
  CHECK(got->user == want.user);
  CHECK(got->password == want.password);
  CHECK(got->dbname == want.dbname);
  CHECK(got->sslmode == want.sslmode);
  CHECK(got->settings == want.settings);
  CHECK(*got == want);
}

TEST_CASE("names of 63 bytes are accepted, 64 are not") {
  std::string name63(63, 'n');
  std::string name64(64, 'n');
  CHECK(ParseOriginConfig("user=" + name63 + " dbname=" + name63).ok());
  auto user = ParseOriginConfig("user=" + name64);
  REQUIRE_FALSE(user.ok());
  CHECK(Message(user.status()).find("user name is longer than 63 bytes") != std::string::npos);
  auto db = ParseOriginConfig("postgresql://u@h/" + name64);
  REQUIRE_FALSE(db.ok());
  CHECK(Message(db.status()).find("database name is longer than 63 bytes") != std::string::npos);
}

struct BadCase {
  const char* text;
  const char* error;  // a substring of the message
};

TEST_CASE("invalid origin strings are rejected with a message naming the problem") {
  auto [text, error] = GENERATE(values<BadCase>({
      {"", "user is required"},
      {"host=h", "user is required"},
      {"postgresql://h/db", "user is required"},
      {"user=u port=0", "invalid port '0'"},
      {"user=u port=65536", "invalid port '65536'"},
      {"user=u port=abc", "invalid port 'abc'"},
      {"postgresql://u@h:99999/d", "invalid port '99999'"},
      {"postgresql://u@h1,h2/db", "several hosts are not supported"},
      {"postgresql://u@h1:1,h2:2/db", "several hosts are not supported"},
      {"host=a,b user=u", "several hosts are not supported"},
      {"user=u port=1,2", "several ports are not supported"},
      {"user=u sslmode=bogus", "invalid sslmode 'bogus'"},
      {"user=u sslmode=REQUIRE", "invalid sslmode 'REQUIRE'"},
      {"user=u foo=bar", "unknown parameter 'foo'"},
      {"postgresql://u@h/d?foo=bar", "unknown parameter 'foo'"},
      {"user=u ssl=true", "unknown parameter 'ssl'"},
      {"user=u hostaddr=1.2.3.4", "unsupported parameter 'hostaddr'"},
      {"user=u client_encoding=UTF8", "unsupported parameter 'client_encoding'"},
      {"user=u target_session_attrs=read-write", "unsupported target_session_attrs 'read-write'"},
      {"user=u gssencmode=require", "unsupported gssencmode 'require'"},
      {"user=u channel_binding=require", "unsupported channel_binding 'require'"},
      {"user=u sslsni=yes", "invalid sslsni 'yes'"},
      {"user=u keepalives=on", "invalid keepalives 'on'"},
      {"user=u connect_timeout=-1", "invalid connect_timeout '-1'"},
      {"user=u connect_timeout=1.5", "invalid connect_timeout '1.5'"},
      {"user=u application_name='unterminated", "unterminated quoted value for 'application_name'"},
      {"user=u justaword", "missing '=' after 'justaword'"},
      {"user=u =x", "missing parameter name before '='"},
      {"postgresql://u@[::1/db", "missing ']'"},
      {"postgresql://u@[::1]x/db", "unexpected text after the IPv6 address"},
      {"postgresql://u@[]/db", "empty IPv6 address"},
      {"postgresql://u%zz@h/db", "invalid percent-encoding in the user name"},
      {"postgresql://u@h%2/db", "invalid percent-encoding in the host"},
      {"postgresql://u@h/d%00b", "forbidden %00 in the database name"},
      {"postgresql://u@h/d?sslmode", "missing '=' in URI query parameter 'sslmode'"},
      {"user=u options='-B 100'", "unsupported switch '-B'"},
      {"user=u options='-c foo'", "setting 'foo' has no value"},
      {"user=u options='-c'", "'-c' without name=value"},
      {"user=u options='--=x'", "empty name"},
  }));
  CAPTURE(text);
  auto got = ParseOriginConfig(text);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(Message(got.status()), Catch::Matchers::ContainsSubstring(error));
}

struct SecretCase {
  const char* text;
  std::vector<const char*> secrets;  // nothing of these may appear in the error
};

TEST_CASE("errors never contain the password, even of a malformed string") {
  auto [text, secrets] = GENERATE(values<SecretCase>({
      // An unquoted password with a space: the rest reads as a keyword.
      {"user=u password=hunter2 swordfish port=1", {"hunter2", "swordfish"}},
      {"user=u password=hunter2 swordfish=1", {"hunter2", "swordfish"}},
      // A valid password but another error later.
      {"user=u password=swordfish port=nope", {"swordfish"}},
      {"password=swordfish", {"swordfish"}},
      {"user=u password='swordfish", {"swordfish"}},
      // A raw '/' in a URI password moves the split: "Xq7" would read as a port.
      {"postgresql://u:Xq7/Zr9k@h/db", {"Xq7", "Zr9k"}},
      // A raw '?' in a URI password: "Zr9k@h/db" would read as a query.
      {"postgresql://u:Xq7?Zr9k@h/db", {"Xq7", "Zr9k"}},
      {"postgresql://u:sw%zzordfish@h/db", {"sw%zzordfish", "ordfish"}},
      {"postgresql://u:swordfish@h/db?sslmode=swordfish", {"swordfish"}},
      {"postgresql://u:swordfish@h1,h2/db", {"swordfish"}},
  }));
  CAPTURE(text);
  auto got = ParseOriginConfig(text);
  REQUIRE_FALSE(got.ok());
  std::string message = Message(got.status());
  CAPTURE(message);
  for (const char* secret : secrets) CHECK(message.find(secret) == std::string::npos);
}

TEST_CASE("startup options honour backslash escapes and long-option dashes") {
  auto got = ParseStartupOptions("  -c a=1\\ 2 -cb=x\\\\y --c-d=\\-e   -c e=");
  REQUIRE(got.ok());
  CHECK(*got == Settings{{"a", "1 2"}, {"b", "x\\y"}, {"c_d", "-e"}, {"e", ""}});
  CHECK(ParseStartupOptions("")->empty());
}

TEST_CASE("the redacted string hides the password and parses back to the same configuration") {
  const char* text = GENERATE(
      "postgresql://alice:secret@db.example.com:6543/app?sslmode=verify-full&sslrootcert=/ca%20file.pem",
      "host=/var/run/postgresql user='we ird' password=pw dbname=d&b sslsni=0 connect_timeout=7",
      "postgresql://u@[::1]:5433/d?application_name=my%20app&options=-c%20search_path%3Da\\%20b",
      "user=u sslcert=/c sslkey=/k sslmode=disable");
  CAPTURE(text);
  auto config = ParseOriginConfig(text);
  REQUIRE(config.ok());
  std::string redacted = RedactedOriginString(*config);
  CAPTURE(redacted);
  if (!config->password.empty()) {
    CHECK(redacted.find(config->password) == std::string::npos);
    CHECK(redacted.find(":***@") != std::string::npos);
  }
  auto back = ParseOriginConfig(redacted);
  REQUIRE(back.ok());
  OriginConfig want = *config;
  if (!want.password.empty()) want.password = "***";
  CHECK(*back == want);
}

TEST_CASE("a Unix-socket host is recognised") {
  auto config = ParseOriginConfig("host=/tmp user=u");
  REQUIRE(config.ok());
  CHECK(config->is_unix_socket());
  CHECK_FALSE(ParseOriginConfig("host=localhost user=u")->is_unix_socket());
}

}  // namespace
}  // namespace hyperpool
