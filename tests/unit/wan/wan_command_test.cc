// `hyperpool wan` argument parsing (the signal loop is exercised by hand and by
// the demo scripts: a test process cannot easily own SIGINT/SIGTERM).
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "wan/wan_command.h"

namespace hyperpool::wan {
namespace {

absl::StatusOr<WanOptions> Parse(const std::vector<const char*>& args) {
  return ParseWanArgs(static_cast<int>(args.size()), args.data());
}

TEST_CASE("ParseHostPort splits host and port") {
  struct Row {
    const char* text;
    const char* host;
    uint16_t port;
  };
  auto row = GENERATE(Row{"127.0.0.1:5432", "127.0.0.1", 5432}, Row{"localhost:0", "localhost", 0},
                      Row{"[::1]:6432", "::1", 6432}, Row{"db.example:65535", "db.example", 65535});
  CAPTURE(row.text);
  auto parsed = ParseHostPort(row.text);
  REQUIRE(parsed.ok());
  CHECK(parsed->first == row.host);
  CHECK(parsed->second == row.port);
}

TEST_CASE("ParseHostPort rejects malformed addresses") {
  auto text = GENERATE("", "5432", ":5432", "host:", "host:65536", "host:12x", "[::1]5432", "[::1");
  CAPTURE(text);
  CHECK_FALSE(ParseHostPort(text).ok());
}

TEST_CASE("ParseWanArgs reads every option in both spellings") {
  auto options = Parse({"--listen", "127.0.0.1:7000", "--target=10.0.0.2:5432", "--rtt", "12.5",
                        "--max-queued=1024"});
  REQUIRE(options.ok());
  CHECK(options->listen_host == "127.0.0.1");
  CHECK(options->listen_port == 7000);
  CHECK(options->target_host == "10.0.0.2");
  CHECK(options->target_port == 5432);
  CHECK(options->rtt == std::chrono::microseconds(12500));
  CHECK(options->max_queued_bytes == 1024);
}

TEST_CASE("ParseWanArgs defaults the listen address to a free loopback port") {
  auto options = Parse({"--target", "127.0.0.1:5432", "--rtt", "0"});
  REQUIRE(options.ok());
  CHECK(options->listen_host == "127.0.0.1");
  CHECK(options->listen_port == 0);
  CHECK(options->rtt == std::chrono::microseconds(0));
}

TEST_CASE("ParseWanArgs rejects bad command lines") {
  auto args = GENERATE(std::vector<const char*>{"--rtt", "10"},                                // No target.
                       std::vector<const char*>{"--target", "h:1"},                            // No rtt.
                       std::vector<const char*>{"--target", "h:1", "--rtt", "-1"},
                       std::vector<const char*>{"--target", "h:1", "--rtt", "ten"},
                       std::vector<const char*>{"--target", "h:1", "--rtt"},
                       std::vector<const char*>{"--target", "h:1", "--rtt", "1", "--bogus"},
                       std::vector<const char*>{"--target", "h:1", "--rtt", "1", "--max-queued", "0"});
  CHECK_FALSE(Parse(args).ok());
}

TEST_CASE("RunWanCommand returns 2 on a usage error and 0 for --help") {
  std::vector<std::string> bad = {"wan", "--rtt", "5"};
  std::vector<char*> bad_argv;
  for (auto& s : bad) bad_argv.push_back(s.data());
  CHECK(RunWanCommand(static_cast<int>(bad_argv.size()), bad_argv.data()) == 2);

  std::vector<std::string> help = {"wan", "--help"};
  std::vector<char*> help_argv;
  for (auto& s : help) help_argv.push_back(s.data());
  CHECK(RunWanCommand(static_cast<int>(help_argv.size()), help_argv.data()) == 0);
}

}  // namespace
}  // namespace hyperpool::wan
