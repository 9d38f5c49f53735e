// DatabaseRouter (src/client/database_router.h): links go to the transport
// of the database their hello names; the probe hello (none) to the default;
// a removed database gets NotFound; cancel hellos route like session hellos.

#include "client/database_router.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <catch2/catch_test_macros.hpp>

#include "client/client_util.h"

namespace hyperpool::client {
namespace {

// Records the hellos it is asked to open and answers with a link pair end.
class RecordingTransport final : public Transport {
 public:
  explicit RecordingTransport(asio::io_context& io) : io_(io) {}
  asio::awaitable<absl::StatusOr<std::unique_ptr<Link>>> Open(asio::any_io_executor executor,
                                                               std::string initial_bytes) override {
    opened.push_back(std::move(initial_bytes));
    LinkPair pair = MakeInProcessLinkPair(executor, io_.get_executor());
    peers.push_back(std::move(pair.second));
    co_return std::move(pair.first);
  }
  std::vector<std::string> opened;
  std::vector<std::unique_ptr<Link>> peers;

 private:
  asio::io_context& io_;
};

absl::StatusOr<std::unique_ptr<Link>> OpenOn(asio::io_context& io, Transport& t, std::string hello) {
  auto future = asio::co_spawn(io, t.Open(io.get_executor(), std::move(hello)), asio::use_future);
  io.restart();
  io.run();
  return future.get();
}

TEST_CASE("HelloDatabase reads hyperpool.database from a link hello, and nothing from other bytes") {
  CHECK(HelloDatabase(BuildLinkHello({{"application_name", "x"}, {std::string(kDatabaseParam), "reports"}}, "1")) ==
        "reports");
  CHECK(HelloDatabase(BuildCancelHello("abc", "app")) == "app");
  CHECK(HelloDatabase(BuildLinkHello({{"application_name", "x"}}, "1")) == std::nullopt);
  CHECK(HelloDatabase("") == std::nullopt);
  CHECK(HelloDatabase(std::string("\0\0\0\x10" "garbagegarbage", 18)) == std::nullopt);
  std::string hello = BuildLinkHello({{std::string(kDatabaseParam), "app"}}, "1");
  CHECK(HelloDatabase(hello.substr(0, hello.size() - 3)) == std::nullopt);  // truncated
  CHECK(HelloDatabase(hello + "Q...") == "app");                            // frames after it
}

TEST_CASE("the router sends each link to its database's transport and refuses removed ones") {
  asio::io_context io;
  auto app = std::make_shared<RecordingTransport>(io);
  auto reports = std::make_shared<RecordingTransport>(io);
  DatabaseRouter router;
  router.Set("app", app);
  router.Set("reports", reports);
  router.SetDefault("app");
  CHECK(router.Names() == std::vector<std::string>{"app", "reports"});

  REQUIRE(OpenOn(io, router, BuildLinkHello({{std::string(kDatabaseParam), "reports"}}, "1")).ok());
  REQUIRE(OpenOn(io, router, BuildCancelHello("1", "reports")).ok());
  REQUIRE(OpenOn(io, router, BuildLinkHello({}, "probe")).ok());  // no database: the default
  CHECK(reports->opened.size() == 2);
  CHECK(app->opened.size() == 1);

  router.Remove("reports");
  auto gone = OpenOn(io, router, BuildLinkHello({{std::string(kDatabaseParam), "reports"}}, "2"));
  CHECK(absl::IsNotFound(gone.status()));
  auto unknown = OpenOn(io, router, BuildLinkHello({{std::string(kDatabaseParam), "other"}}, "3"));
  CHECK(absl::IsNotFound(unknown.status()));
  CHECK(reports->opened.size() == 2);
  CHECK(app->opened.size() == 1);
}

TEST_CASE("a fallback (the \"*\" entry) serves names not routed, or says why not") {
  asio::io_context io;
  auto app = std::make_shared<RecordingTransport>(io);
  auto any = std::make_shared<RecordingTransport>(io);
  DatabaseRouter router;
  router.Set("app", app);
  router.SetDefault("app");
  std::vector<std::string> asked;
  router.SetFallback([&](const std::string& name) -> absl::StatusOr<std::shared_ptr<Transport>> {
    asked.push_back(name);
    if (name == "full") return absl::ResourceExhaustedError("too many");
    return any;
  });
  REQUIRE(OpenOn(io, router, BuildLinkHello({{std::string(kDatabaseParam), "new_db"}}, "1")).ok());
  REQUIRE(OpenOn(io, router, BuildLinkHello({{std::string(kDatabaseParam), "app"}}, "2")).ok());
  REQUIRE(OpenOn(io, router, BuildLinkHello({}, "probe")).ok());  // no database: the default, never the fallback
  auto full = OpenOn(io, router, BuildLinkHello({{std::string(kDatabaseParam), "full"}}, "3"));
  CHECK(absl::IsResourceExhausted(full.status()));
  CHECK(asked == std::vector<std::string>{"new_db", "full"});
  CHECK(any->opened.size() == 1);
  CHECK(app->opened.size() == 2);
}

TEST_CASE("OriginForDatabase replaces the origin's database") {
  CHECK(OriginForDatabase("postgresql://u@h:5432/postgres?sslmode=disable", "my db") ==
        "postgresql://u@h:5432/postgres?sslmode=disable&dbname=my%20db");
  CHECK(OriginForDatabase("postgres://u@h/postgres", "x") == "postgres://u@h/postgres?dbname=x");
  CHECK(OriginForDatabase("host=h dbname=postgres", "it's") == "host=h dbname=postgres dbname='it\\'s'");
}

}  // namespace
}  // namespace hyperpool::client
