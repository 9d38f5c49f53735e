// The dashboard's JSON (ops/dashboard.h) and its paths on the metrics
// listener (BuildResponse): the numbers /metrics shows, escaped text, the
// cache report's fingerprint lines as rows, and embedded files that load
// nothing from elsewhere.
#include "ops/dashboard.h"

#include <string>

#include <catch2/catch_test_macros.hpp>

#include "ops/http_request.h"
#include "ops/metrics_server.h"

namespace hyperpool::ops {
namespace {

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

ProcessMetrics OneEndpoint() {
  ProcessMetrics m;
  EndpointStats s;
  s.origin_open = 5;
  s.origin_idle = 2;
  s.waiting = 4;
  s.transactions = 1234;
  s.cache_hits = 77;
  s.cache_misses = 11;
  s.pins_advisory_lock = 3;
  s.transaction_time.counts[0] = 6;
  s.transaction_time.counts.back() = 1;
  s.transaction_time.count = 7;
  m.endpoint = s;
  m.pool_max = 8;
  return m;
}

TEST_CASE("the JSON carries the pool, cache, pins and histograms as /metrics counts them") {
  const std::string json = RenderDashboardJson(OneEndpoint(), {});
  CHECK(Has(json, R"("databases":[{"name":"","pool":{"active":3,"idle":2,"open":5,"lent":0,"max":8,"waiting":4,)"));
  CHECK(Has(json, R"("transactions":1234,)"));
  CHECK(Has(json, R"("cache":{"hits":77,"stale_hits":0,"misses":11,)"));
  CHECK(Has(json, R"("advisory_lock":3,)"));
  CHECK(Has(json, R"("counts":[6,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1],"count":7,)"));
  CHECK(Has(json, R"("client":null)"));
  CHECK(Has(json, R"("top_queries":[])"));
}

TEST_CASE("the Client's login histogram is in the JSON as /metrics counts it") {
  ProcessMetrics m = OneEndpoint();
  ClientStats c;
  c.sessions = 2;
  c.login_time.counts[4] = 3;
  c.login_time.count = 3;
  c.login_time.sum_us = 6000;
  m.client = c;
  const std::string json = RenderDashboardJson(m, {});
  CHECK(Has(json, R"("histograms":{"login":{"le_seconds":[0.0001,0.00025,)"));
  CHECK(Has(json, R"("counts":[0,0,0,0,3,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"count":3,"sum_seconds":0.006})"));
  const std::string metrics = RenderMetrics(m);
  CHECK(Has(metrics, "hyperpool_client_login_duration_seconds_count 3\n"));
}

TEST_CASE("several databases: one entry each, by name") {
  ProcessMetrics m = OneEndpoint();
  m.databases.emplace_back("app", *m.endpoint);
  m.databases.emplace_back("reports", EndpointStats{});
  const std::string json = RenderDashboardJson(m, {});
  CHECK(Has(json, R"({"name":"app","pool":{"active":3,)"));
  CHECK(Has(json, R"({"name":"reports","pool":{"active":0,)"));
  CHECK(!Has(json, R"({"name":"","pool")"));
}

TEST_CASE("fingerprint lines of the cache report become rows; text is escaped") {
  DashboardExtras x;
  x.role = "serve";
  x.link = {"quote \" backslash \\ tab \t"};
  x.client_states = {{"active", 2}, {"idle", 5}};
  x.cache_reports[""] =
      "endpoint tier: hits 1 stale 0 misses 2\n"
      "  00000000deadbeef        cacheable       42  select v from t where id = ?\n"
      "  0123456789abcdef         volatile        7  select now()\n"
      "  not a fingerprint line at all\n";
  ProcessMetrics m = OneEndpoint();
  m.client = ClientStats{};
  const std::string json = RenderDashboardJson(m, x);
  CHECK(Has(json, R"("link":["quote \" backslash \\ tab \u0009"])"));
  CHECK(Has(json, R"("states":{"active":2,"idle":5})"));
  CHECK(Has(json, R"("top_queries":[{"fingerprint":"00000000deadbeef","decision":"cacheable","count":42,)"
                  R"("sample":"select v from t where id = ?"},{"fingerprint":"0123456789abcdef","decision":"volatile",)"
                  R"j("count":7,"sample":"select now()"}])j"));
}

std::string Respond(const std::string& path, bool dashboard = true, const std::string& method = "GET") {
  return BuildResponse(ParseRequestHead(method + " " + path + " HTTP/1.1\r\n\r\n"), false,
                       [] { return std::string("hp_up 1\n"); },
                       dashboard ? [] { return std::string(R"({"role":"serve"})"); } : std::function<std::string()>());
}

TEST_CASE("the dashboard's paths: page, script, style sheet and JSON, read-only, with a strict policy") {
  const std::string page = Respond("/dashboard");
  CHECK(page.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(Has(page, "Content-Type: text/html; charset=utf-8\r\n"));
  CHECK(Has(page, "Content-Security-Policy: default-src 'none'; script-src 'self';"));
  CHECK(Has(page, "X-Frame-Options: DENY\r\n"));
  CHECK(Has(page, R"(<script src="/dashboard.js")"));
  CHECK(Has(Respond("/dashboard.js"), "Content-Type: text/javascript; charset=utf-8\r\n"));
  CHECK(Has(Respond("/dashboard.css"), "Content-Type: text/css; charset=utf-8\r\n"));
  const std::string json = Respond("/dashboard.json?t=1");
  CHECK(Has(json, "Content-Type: application/json\r\n"));
  CHECK(json.substr(json.size() - 16) == R"({"role":"serve"})");
  CHECK(Respond("/dashboard", true, "POST").rfind("HTTP/1.1 405", 0) == 0);
  CHECK(Respond("/dashboard.txt").rfind("HTTP/1.1 404", 0) == 0);
  // /metrics has no dashboard headers.
  CHECK(!Has(Respond("/metrics"), "Content-Security-Policy"));
}

TEST_CASE("without a dashboard renderer its paths are 404") {
  for (const char* path : {"/dashboard", "/dashboard.js", "/dashboard.json"}) {
    INFO(path);
    CHECK(Respond(path, false).rfind("HTTP/1.1 404", 0) == 0);
  }
}

TEST_CASE("the embedded files name no other site (no CDN)") {
  for (const char* path : {"/dashboard", "/dashboard.js", "/dashboard.css"}) {
    INFO(path);
    const DashboardAsset* asset = FindDashboardAsset(path);
    REQUIRE(asset != nullptr);
    std::string body(asset->body);
    // The SVG namespace is a name, not a fetch.
    for (size_t at = body.find("http://www.w3.org/2000/svg"); at != std::string::npos;
         at = body.find("http://www.w3.org/2000/svg")) {
      body.erase(at, 26);
    }
    CHECK(!Has(body, "://"));
    CHECK(!Has(body, "//cdn"));
  }
  CHECK(FindDashboardAsset("/metrics") == nullptr);
}

}  // namespace
}  // namespace hyperpool::ops
