// The metrics listener's request-head parser and its responses: need-more,
// bad input and the size bound, routing of /metrics and /healthz.

#include "ops/http_request.h"

#include <string>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "ops/metrics_server.h"

namespace hyperpool::ops {
namespace {

using Result = HttpRequestHead::Result;

TEST_CASE("a complete GET is parsed; its query string is dropped") {
  auto head = ParseRequestHead("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n");
  REQUIRE(head.result == Result::kComplete);
  CHECK(head.method == "GET");
  CHECK(head.path == "/metrics");
}

TEST_CASE("bare LF line ends are accepted") {
  auto head = ParseRequestHead("GET /healthz HTTP/1.0\n\n");
  REQUIRE(head.result == Result::kComplete);
  CHECK(head.path == "/healthz");
}

TEST_CASE("a head cut anywhere needs more") {
  const std::string full = "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n";
  for (std::size_t n = 0; n < full.size() - 1; ++n) {
    INFO(n);
    CHECK(ParseRequestHead(full.substr(0, n)).result == Result::kNeedMore);
  }
}

TEST_CASE("malformed request lines are bad") {
  auto text = GENERATE(as<std::string>{}, "GET\r\n\r\n", "GET /metrics\r\n\r\n", "GET  HTTP/1.1\r\n\r\n",
                       "GET metrics HTTP/1.1\r\n\r\n", "GET /metrics HTTP/2.0\r\n\r\n", "G{T / HTTP/1.1\r\n\r\n",
                       "\x16\x03\x01\x02", " / HTTP/1.1\r\n\r\n");
  INFO(text);
  CHECK(ParseRequestHead(text).result == Result::kBad);
}

TEST_CASE("a head without end is bad once it reaches the bound") {
  std::string text = "GET /metrics HTTP/1.1\r\n";
  while (text.size() < kMaxRequestHeadBytes) text += "X-Pad: aaaaaaaaaaaaaaaa\r\n";
  auto head = ParseRequestHead(text);
  CHECK(head.result == Result::kBad);
  CHECK(head.error == "request head too large");
}

std::string Respond(const std::string& request, bool draining = false) {
  return BuildResponse(ParseRequestHead(request), draining, [] { return std::string("hp_up 1\n"); });
}

TEST_CASE("/healthz answers 200 ok while running and 503 while draining") {
  CHECK(Respond("GET /healthz HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(Respond("GET /healthz HTTP/1.1\r\n\r\n").find("\r\n\r\nok\n") != std::string::npos);
  const std::string draining = Respond("GET /healthz HTTP/1.1\r\n\r\n", true);
  CHECK(draining.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0) == 0);
  CHECK(draining.find("\r\n\r\ndraining\n") != std::string::npos);
}

TEST_CASE("/metrics carries the exposition content type and body; HEAD has no body") {
  const std::string get = Respond("GET /metrics HTTP/1.1\r\n\r\n");
  CHECK(get.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != std::string::npos);
  CHECK(get.find("Content-Length: 8\r\n") != std::string::npos);
  CHECK(get.find("Connection: close\r\n") != std::string::npos);
  CHECK(get.substr(get.size() - 8) == "hp_up 1\n");
  const std::string head = Respond("HEAD /metrics HTTP/1.1\r\n\r\n");
  CHECK(head.find("Content-Length: 8\r\n") != std::string::npos);
  CHECK(head.substr(head.size() - 4) == "\r\n\r\n");
}

TEST_CASE("other paths 404, other methods 405, bad requests 400, huge heads 431") {
  CHECK(Respond("GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0) == 0);
  const std::string post = Respond("POST /metrics HTTP/1.1\r\n\r\n");
  CHECK(post.rfind("HTTP/1.1 405", 0) == 0);
  CHECK(post.find("Allow: GET, HEAD\r\n") != std::string::npos);
  CHECK(Respond("GET metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 400", 0) == 0);
  CHECK(Respond(std::string(kMaxRequestHeadBytes, 'A')).rfind("HTTP/1.1 431", 0) == 0);
}

}  // namespace
}  // namespace hyperpool::ops
