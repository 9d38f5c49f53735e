// Proves the real-PostgreSQL fixture works: the cluster is up, psql runs
// queries as the admin, and each role exists with the password storage its
// authentication method needs (md5 auth needs an md5 hash; the others SCRAM).
#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "support/pg_fixture.h"

namespace hyperpool::testing {
namespace {

TEST_CASE("the fixture cluster answers a query as the admin over TCP") {
  const PgCluster& pg = SharedPgCluster();
  CHECK(pg.port != 0);
  CHECK(pg.database == "hp_test");
  auto out = RunPsql(pg, "SELECT current_user, current_database(), current_setting('server_version_num')::int / 10000");
  REQUIRE(out.ok());
  CHECK(*out == pg.admin.user + "|hp_test|15");
}

TEST_CASE("the fixture cluster answers over its Unix socket") {
  const PgCluster& pg = SharedPgCluster();
  PsqlOptions options;
  options.unix_socket = true;
  auto out = RunPsql(pg, "SELECT 1 + 1", options);
  REQUIRE(out.ok());
  CHECK(*out == "2");
}

TEST_CASE("the fixture cluster has TLS on") {
  const PgCluster& pg = SharedPgCluster();
  auto out = RunPsql(pg, "SHOW ssl");
  REQUIRE(out.ok());
  CHECK(*out == "on");
}

TEST_CASE("RunPsql reports SQL errors with psql's message") {
  const PgCluster& pg = SharedPgCluster();
  auto out = RunPsql(pg, "SELECT * FROM no_such_table");
  REQUIRE_FALSE(out.ok());
  CHECK(std::string(out.status().message()).find("no_such_table") != std::string::npos);
}

TEST_CASE("each fixture role is stored as its authentication method needs") {
  const PgCluster& pg = SharedPgCluster();
  struct Row {
    std::string user;
    std::string prefix;  // Start of pg_authid.rolpassword; "" for no password.
    bool superuser;
  };
  auto row = GENERATE_COPY(Row{pg.admin.user, "SCRAM-SHA-256$", true},
                           Row{pg.scram.user, "SCRAM-SHA-256$", false},
                           Row{pg.md5.user, "md5", false},
                           Row{pg.password.user, "SCRAM-SHA-256$", false},
                           Row{pg.trust.user, "", false},
                           Row{pg.sslonly.user, "SCRAM-SHA-256$", false});
  CAPTURE(row.user);
  auto out = RunPsql(pg, "SELECT rolsuper, rolcanlogin, coalesce(rolpassword, '') FROM pg_authid "
                         "WHERE rolname = '" + row.user + "'");
  REQUIRE(out.ok());
  REQUIRE(out->size() >= 4);
  CHECK(out->substr(0, 4) == (row.superuser ? "t|t|" : "f|t|"));
  std::string stored = out->substr(4);
  if (row.prefix.empty()) {
    CHECK(stored.empty());
  } else {
    CHECK(stored.rfind(row.prefix, 0) == 0);
  }
}

TEST_CASE("the fixture's env names readable certificate files") {
  const PgCluster& pg = SharedPgCluster();
  for (const auto& path : {pg.ca_cert, pg.server_cert, pg.client_cert, pg.client_key}) {
    CAPTURE(path);
    auto contents = ReadFile(path);
    REQUIRE(contents.ok());
    CHECK(contents->find("-----BEGIN") != std::string::npos);
  }
}

}  // namespace
}  // namespace hyperpool::testing
