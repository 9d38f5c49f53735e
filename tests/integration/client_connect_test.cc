// hyperpool::connect() against the real PostgreSQL 15 fixture; queries run in
// psql child processes through the returned connection string.

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>

#include <catch2/catch_test_macros.hpp>

#include "client/client_util.h"
#include "hyperpool/hyperpool.h"
#include "support/pg_fixture.h"

namespace hyperpool {
namespace {

std::string Origin(const testing::PgCluster& c) {
  return "postgresql://" + client::PercentEncode(c.admin.user) + ":" + client::PercentEncode(c.admin.password) +
         "@" + c.host + ":" + std::to_string(c.port) + "/" + c.database + "?sslmode=disable";
}

// Runs one statement with psql through `url`; returns stdout or the error.
absl::StatusOr<std::string> Psql(const testing::PgCluster& c, const std::string& url, const std::string& sql) {
  auto r = testing::RunCommand({c.pgbin + "/psql", "-XAtq", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql});
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) return absl::InternalError(r->err);
  std::string out = r->out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

TEST_CASE("psql runs queries through connect()") {
  const auto& cluster = testing::SharedPgCluster();
  ConnectOptions options;
  options.endpoint.origin = Origin(cluster);
  options.endpoint.pool.max_size = 2;
  options.threads = 2;
  auto connection = connect(options);
  REQUIRE(connection.ok());
  const std::string url = (*connection)->connection_string();
  auto two = Psql(cluster, url, "SELECT 1 + 1");
  INFO(two.status().ToString());
  REQUIRE(two.ok());
  CHECK(*two == "2");
  // A transaction, then a second connection that gets the cached parameters.
  auto txn = Psql(cluster, url, "BEGIN; CREATE TEMP TABLE t(x int); INSERT INTO t VALUES (1),(2); SELECT sum(x) FROM t; COMMIT");
  INFO(txn.status().ToString());
  REQUIRE(txn.ok());
  CHECK(txn->find("3") != std::string::npos);
  auto version = Psql(cluster, url, "SHOW server_version");
  REQUIRE(version.ok());
  CHECK(version->rfind("15", 0) == 0);
  (*connection)->Close();
  (*connection)->Close();  // idempotent
}

TEST_CASE("connect() on a host io_context that four threads run: 8 concurrent psql sessions over a pool of 2") {
  const auto& cluster = testing::SharedPgCluster();
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  std::vector<std::thread> runners;
  for (int i = 0; i < 4; ++i) runners.emplace_back([&io] { io.run(); });
  ConnectOptions options;
  options.endpoint.origin = Origin(cluster);
  options.endpoint.pool.max_size = 2;
  options.io_context = &io;
  auto connection = connect(options);
  REQUIRE(connection.ok());
  const std::string url = (*connection)->connection_string();
  std::vector<absl::StatusOr<std::string>> results(8, absl::UnknownError("not run"));
  std::vector<std::thread> apps;
  for (int i = 0; i < 8; ++i) {
    apps.emplace_back([&, i] {
      results[i] = Psql(cluster, url,
                        "BEGIN; SELECT " + std::to_string(i) + " * 1000 + count(*) FROM generate_series(1, 10); "
                        "SET LOCAL work_mem = '1MB'; SELECT 'done'; COMMIT");
    });
  }
  for (auto& t : apps) t.join();
  for (int i = 0; i < 8; ++i) {
    INFO(i << ": " << results[i].status().ToString());
    REQUIRE(results[i].ok());
    CHECK(*results[i] == std::to_string(i * 1000 + 10) + "\ndone");
  }
  CHECK((*connection)->endpoint_stats().origin_open <= 2);
  (*connection)->Close();
  guard.reset();
  for (auto& t : runners) t.join();
}

TEST_CASE("a wrong local password is refused with 28P01") {
  const auto& cluster = testing::SharedPgCluster();
  ConnectOptions options;
  options.endpoint.origin = Origin(cluster);
  options.client.password = "right";
  options.threads = 1;
  auto connection = connect(options);
  REQUIRE(connection.ok());
  std::string url = (*connection)->connection_string();
  size_t pos = url.find(":right@");
  REQUIRE(pos != std::string::npos);
  url.replace(pos, 7, ":wrong@");
  auto r = Psql(cluster, url, "SELECT 1");
  REQUIRE(!r.ok());
  CHECK(std::string(r.status().message()).find("password authentication failed") != std::string::npos);
}

TEST_CASE("two connect() handles in one process are independent") {
  const auto& cluster = testing::SharedPgCluster();
  ConnectOptions options;
  options.endpoint.origin = Origin(cluster);
  options.threads = 1;
  auto a = connect(options);
  auto b = connect(options);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK((*a)->connection_string() != (*b)->connection_string());
  (*a)->Close();
  auto r = Psql(cluster, (*b)->connection_string(), "SELECT 'still here'");
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(*r == "still here");
}

TEST_CASE("Close does not hang with sessions still open") {
  const auto& cluster = testing::SharedPgCluster();
  ConnectOptions options;
  options.endpoint.origin = Origin(cluster);
  options.threads = 2;
  auto connection = connect(options);
  REQUIRE(connection.ok());
  // psql sleeping in a transaction while we close underneath it.
  std::string url = (*connection)->connection_string();
  std::thread sleeper([&] { (void)Psql(cluster, url, "BEGIN; SELECT pg_sleep(3); COMMIT"); });
  // Wait (bounded) until the origin runs its pg_sleep.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    auto n = testing::RunPsql(cluster,
                              "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(3)%' "
                              "AND pid <> pg_backend_pid()");
    if ((n.ok() && *n == "1") || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto start = std::chrono::steady_clock::now();
  (*connection)->Close();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(8));
  sleeper.join();
}

TEST_CASE("connect() reports a bad origin string and a bind failure") {
  ConnectOptions bad;
  bad.endpoint.origin = "this is not an origin";
  bad.threads = 1;
  CHECK(!connect(bad).ok());

  const auto& cluster = testing::SharedPgCluster();
  ConnectOptions taken;
  taken.endpoint.origin = Origin(cluster);
  taken.client.listen_port = cluster.port;  // PostgreSQL holds it
  taken.threads = 1;
  auto r = connect(taken);
  CHECK(!r.ok());
}

// An event loop Asio cannot set up (io_uring_queue_init refused by a seccomp
// profile in an io_uring build; here, epoll_create1 without a free
// descriptor) is a status from connect(), not an exception that escapes it
// with worker threads running.
TEST_CASE("connect() reports an event loop that cannot start as a status") {
  const auto& cluster = testing::SharedPgCluster();
  ConnectOptions options;
  options.endpoint.origin = Origin(cluster);
  options.threads = 1;
  struct rlimit saved {};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  const int lowest_free = ::dup(0);  // the next descriptor any call would get
  REQUIRE(lowest_free >= 0);
  ::close(lowest_free);
  struct rlimit none = saved;
  none.rlim_cur = static_cast<rlim_t>(lowest_free);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &none) == 0);
  bool threw = false;
  absl::Status status;
  try {
    auto r = connect(options);
    status = r.status();
  } catch (const std::exception&) {
    threw = true;
  }
  ::setrlimit(RLIMIT_NOFILE, &saved);
  CHECK_FALSE(threw);
  CHECK(status.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(status.message()).find("cannot start the event loop") != std::string::npos);
}

}  // namespace
}  // namespace hyperpool
