#include "endpoint/origin_password.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

namespace hyperpool::endpoint {
namespace {

// A file in a fresh temporary directory, removed with it.
class TempFile {
 public:
  TempFile(const std::string& contents, mode_t mode) {
    char dir[] = "/tmp/hp_password_XXXXXX";
    REQUIRE(::mkdtemp(dir) != nullptr);
    dir_ = dir;
    path_ = dir_ + "/secret";
    std::ofstream(path_) << contents;
    REQUIRE(::chmod(path_.c_str(), mode) == 0);
  }
  ~TempFile() {
    std::remove(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::string path_;
};

OriginConfig Config(const char* text) {
  auto config = ParseOriginConfig(text);
  REQUIRE(config.ok());
  return *config;
}

TEST_CASE("the origin string's own password wins over every other source") {
  OriginConfig config = Config("postgresql://app:inline@db/app");
  PasswordSources sources;
  sources.password = "explicit";
  sources.environment = true;
  sources.pgpassword = "env";
  REQUIRE(ResolveOriginPassword(config, sources).ok());
  CHECK(config.password == "inline");
}

TEST_CASE("precedence: explicit, then the password file, then PGPASSWORD, then pgpass") {
  TempFile file("from-file\nsecond line ignored\n", 0600);
  TempFile pgpass("db:5432:app:app:from-pgpass\n", 0600);
  PasswordSources sources;
  sources.environment = true;
  sources.pgpassword = "from-env";
  sources.pgpassfile = pgpass.path();
  sources.password_file = file.path();
  sources.password = "explicit";

  OriginConfig a = Config("postgresql://app@db/app");
  REQUIRE(ResolveOriginPassword(a, sources).ok());
  CHECK(a.password == "explicit");

  sources.password.clear();
  OriginConfig b = Config("postgresql://app@db/app");
  REQUIRE(ResolveOriginPassword(b, sources).ok());
  CHECK(b.password == "from-file");

  sources.password_file.clear();
  OriginConfig c = Config("postgresql://app@db/app");
  REQUIRE(ResolveOriginPassword(c, sources).ok());
  CHECK(c.password == "from-env");

  sources.pgpassword.reset();
  OriginConfig d = Config("postgresql://app@db/app");
  REQUIRE(ResolveOriginPassword(d, sources).ok());
  CHECK(d.password == "from-pgpass");

  sources.environment = false;  // an embedding host that keeps the environment out
  OriginConfig e = Config("postgresql://app@db/app");
  REQUIRE(ResolveOriginPassword(e, sources).ok());
  CHECK(e.password.empty());
}

TEST_CASE("a password file readable by others, empty or missing is refused without quoting it") {
  PasswordSources sources;
  SECTION("world-readable") {
    TempFile file("s3cret-value\n", 0644);
    sources.password_file = file.path();
    OriginConfig config = Config("postgresql://app@db/app");
    absl::Status s = ResolveOriginPassword(config, sources);
    REQUIRE(absl::IsPermissionDenied(s));
    CHECK_THAT(std::string(s.message()), !Catch::Matchers::ContainsSubstring("s3cret"));
    CHECK(config.password.empty());
  }
  SECTION("empty") {
    TempFile file("\n", 0600);
    sources.password_file = file.path();
    OriginConfig config = Config("postgresql://app@db/app");
    CHECK(absl::IsInvalidArgument(ResolveOriginPassword(config, sources)));
  }
  SECTION("missing") {
    sources.password_file = "/nonexistent/hyperpool/secret";
    OriginConfig config = Config("postgresql://app@db/app");
    CHECK(absl::IsNotFound(ResolveOriginPassword(config, sources)));
  }
}

TEST_CASE("an unsafe pgpass file is skipped, as libpq does") {
  TempFile pgpass("*:*:*:*:leaked\n", 0644);
  PasswordSources sources;
  sources.environment = true;
  sources.pgpassfile = pgpass.path();
  OriginConfig config = Config("postgresql://app@db/app");
  REQUIRE(ResolveOriginPassword(config, sources).ok());
  CHECK(config.password.empty());
}

TEST_CASE("pgpass lines match host, port, database and user with wildcards and escapes") {
  const std::string contents =
      "# comment line\n"
      "other:5432:app:app:wrong-host\n"
      "db:5433:app:app:wrong-port\n"
      "db:5432:*:reader:reader-pw\n"
      "db:*:app:app:pa\\:ss\\\\word\n"
      "*:*:*:*:fallback\n";
  CHECK(MatchPgpass(contents, Config("postgresql://app@db/app")) == "pa:ss\\word");
  CHECK(MatchPgpass(contents, Config("postgresql://reader@db/anything")) == "reader-pw");
  CHECK(MatchPgpass(contents, Config("postgresql://x@elsewhere/y")) == "fallback");
  CHECK(MatchPgpass("db:5432:app:app\n", Config("postgresql://app@db/app")) == std::nullopt);
  // A Unix socket directory matches "localhost", and the database defaults to the user.
  CHECK(MatchPgpass("localhost:5432:app:app:sock\n", Config("host=/run/postgresql user=app")) == "sock");
}

TEST_CASE("the origin string's passfile keyword names the pgpass file") {
  TempFile pgpass("db:5432:app:app:via-keyword\n", 0600);
  OriginConfig config = Config(("postgresql://app@db/app?passfile=" + pgpass.path()).c_str());
  CHECK(config.passfile == pgpass.path());
  PasswordSources sources;
  sources.environment = true;
  sources.pgpassfile = "/nonexistent";
  REQUIRE(ResolveOriginPassword(config, sources).ok());
  CHECK(config.password == "via-keyword");
  CHECK_THAT(RedactedOriginString(config), Catch::Matchers::ContainsSubstring("passfile="));
}

TEST_CASE("OriginStringHasPassword says whether a command line would expose one") {
  CHECK(OriginStringHasPassword("postgresql://app:pw@db/app"));
  CHECK(OriginStringHasPassword("host=db user=app password=pw"));
  CHECK_FALSE(OriginStringHasPassword("postgresql://app@db/app"));
  CHECK_FALSE(OriginStringHasPassword("not a url"));
}

}  // namespace
}  // namespace hyperpool::endpoint
