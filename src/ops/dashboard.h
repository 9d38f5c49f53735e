#pragma once
// The live dashboard of the metrics listener (docs/architecture.md,
// "Operations"): /dashboard serves a page (HTML, JS and CSS from
// src/ops/dashboard/, compiled into the binary: nothing is fetched from
// elsewhere) that polls /dashboard.json, which this file renders from the
// same snapshot as /metrics plus a few details /metrics has no family for.

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

#include "ops/metrics.h"

namespace hyperpool::ops {

// What the dashboard shows beyond ProcessMetrics; gathered only when the
// page asks (a /metrics scrape does not pay for it).
struct DashboardExtras {
  std::string role;  // "serve", "endpoint" or "client"
  // Where the Client's links go and how the Endpoint is placed, one line
  // per fact ("in-process Endpoint", "endpoint 10.0.0.5:6433 (TLS)").
  std::vector<std::string> link;
  // Application connections by state (Client::Sessions(): login, idle,
  // active, admin).
  std::map<std::string, std::size_t> client_states;
  // Per database ("" for a one-database process): Endpoint::CacheReport(),
  // whose fingerprint lines become the "top queries" table.
  std::map<std::string, std::string> cache_reports;
};

// The dashboard's JSON document: {"role", "draining", "link", "client":
// {"connections", "accepted", ..., "histograms": {"login"}, "cache"},
// "databases": [{"name", "pool", "sessions", "transactions", "queries",
// "pins", "cache", "histograms", "top_queries"}], "cache_tiers"}. Numbers
// are the ones /metrics shows for the same snapshot.
std::string RenderDashboardJson(const ProcessMetrics& metrics, const DashboardExtras& extras);

// The embedded files, by path ("/dashboard", "/dashboard.js",
// "/dashboard.css"); nullptr for any other path.
struct DashboardAsset {
  std::string_view content_type;
  std::string_view body;
};
const DashboardAsset* FindDashboardAsset(std::string_view path);

}  // namespace hyperpool::ops
