#include "ops/metrics.h"

#include <utility>

#include "ops/exposition_writer.h"

namespace hyperpool::ops {

namespace {

// One Endpoint's samples: its stats and the labels that tell it apart.
struct EndpointSample {
  const EndpointStats* stats;
  Labels labels;  // {} for the one Endpoint of a one-database process
  std::size_t pool_max = 0;
};

Labels With(Labels labels, const Labels& more) {
  labels.insert(labels.end(), more.begin(), more.end());
  return labels;
}

// Each family is written over every Endpoint before the next one (the text
// format wants one family's samples together).
void WriteEndpoints(ExpositionWriter& w, const std::vector<EndpointSample>& es) {
  auto gauge = [&](const char* name, const char* help, auto value, const Labels& more = {}) {
    for (const EndpointSample& e : es) w.Gauge(name, help, static_cast<double>(value(*e.stats)), With(e.labels, more));
  };
  auto counter = [&](const char* name, const char* help, auto value, const Labels& more = {}) {
    for (const EndpointSample& e : es) w.Counter(name, help, value(*e.stats), With(e.labels, more));
  };
  auto histogram = [&](const char* name, const char* help, auto value) {
    for (const EndpointSample& e : es) w.LatencyHistogram(name, help, value(*e.stats), e.labels);
  };
  const char* const kPoolHelp = "Origin connections open, by state (active: lent or being opened).";
  for (const EndpointSample& e : es) {
    const EndpointStats& s = *e.stats;
    const std::size_t active = s.origin_open >= s.origin_idle ? s.origin_open - s.origin_idle : 0;
    w.Gauge("hyperpool_pool_connections", kPoolHelp, static_cast<double>(active), With(e.labels, {{"state", "active"}}));
    w.Gauge("hyperpool_pool_connections", kPoolHelp, static_cast<double>(s.origin_idle),
            With(e.labels, {{"state", "idle"}}));
  }
  for (const EndpointSample& e : es) {
    w.Gauge("hyperpool_pool_max_connections", "Most origin connections the pool opens at once.",
            static_cast<double>(e.pool_max), e.labels);
  }
  gauge("hyperpool_pool_waiting", "Transactions waiting for an origin connection.",
        [](const EndpointStats& s) { return s.waiting; });
  histogram("hyperpool_pool_acquire_wait_seconds",
            "Time units of work waited for an origin connection (including 53300 timeouts).",
            [](const EndpointStats& s) -> const LatencyHistogramSnapshot& { return s.acquire_wait; });
  counter("hyperpool_pool_acquire_timeouts_total", "Waits for an origin connection that ended in 53300.",
          [](const EndpointStats& s) { return s.acquire_timeouts; });
  counter("hyperpool_pool_discarded_total", "Origin connections closed instead of returned to the pool.",
          [](const EndpointStats& s) { return s.discarded; });
  gauge("hyperpool_endpoint_sessions",
        "Client links open to the Endpoint (one per application session that holds one: an idle one may let it go).",
        [](const EndpointStats& s) { return s.sessions; });
  counter("hyperpool_transactions_total", "Transactions completed on origin connections.",
          [](const EndpointStats& s) { return s.transactions; });
  counter("hyperpool_queries_total",
          "Units of work the origin answered (simple Query, extended-query Sync, FunctionCall).",
          [](const EndpointStats& s) { return s.queries; });
  histogram("hyperpool_transaction_duration_seconds",
            "Transaction time at the Endpoint: first message forwarded to ReadyForQuery 'I'.",
            [](const EndpointStats& s) -> const LatencyHistogramSnapshot& { return s.transaction_time; });
  gauge("hyperpool_pinned_sessions", "Sessions pinned to their origin connection now.",
        [](const EndpointStats& s) { return s.pinned_sessions; });
  gauge("hyperpool_sleeping_sessions", "Idle sessions whose core was given back until their next message.",
        [](const EndpointStats& s) { return s.sleeping_sessions; });
  const char* const kPinHelp = "Sessions pinned to their origin connection since start, by reason.";
  static constexpr std::pair<const char*, std::size_t EndpointStats::*> kPins[] = {
      {"prepared_sql", &EndpointStats::pins_prepared_sql}, {"temp_table", &EndpointStats::pins_temp_table},
      {"advisory_lock", &EndpointStats::pins_advisory_lock}, {"listen", &EndpointStats::pins_listen},
      {"with_hold_cursor", &EndpointStats::pins_with_hold_cursor}, {"set_role", &EndpointStats::pins_set_role},
  };
  for (const auto& [reason, field] : kPins) {
    counter("hyperpool_pins_total", kPinHelp, [field = field](const EndpointStats& s) { return s.*field; },
            {{"reason", reason}});
  }
  const char* const kCancelHelp = "Cancel requests: forwarded to the origin, or ignored (nothing running).";
  counter("hyperpool_cancels_total", kCancelHelp, [](const EndpointStats& s) { return s.cancels_forwarded; },
          {{"result", "forwarded"}});
  counter("hyperpool_cancels_total", kCancelHelp, [](const EndpointStats& s) { return s.cancels_ignored; },
          {{"result", "ignored"}});
  gauge("hyperpool_origin_rtt_seconds", "Smallest recent round trip to the origin (0 until measured).",
        [](const EndpointStats& s) { return s.origin_rtt_us / 1e6; });
  // Invalidation from the origin's WAL (--wal-invalidation): only where it runs.
  std::vector<EndpointSample> fed;
  for (const EndpointSample& e : es) {
    if (e.stats->wal_state != "off") fed.push_back(e);
  }
  if (fed.empty()) return;
  static constexpr const char* kStates[] = {"connecting", "streaming", "unavailable"};
  for (const char* state : kStates) {
    for (const EndpointSample& e : fed) {
      w.Gauge("hyperpool_wal_feed_state", "1 for the change feed's state (connecting, streaming, unavailable).",
              e.stats->wal_state == state ? 1.0 : 0.0, With(e.labels, {{"state", state}}));
    }
  }
  auto fed_gauge = [&](const char* name, const char* help, auto value) {
    for (const EndpointSample& e : fed) w.Gauge(name, help, static_cast<double>(value(*e.stats)), e.labels);
  };
  auto fed_counter = [&](const char* name, const char* help, auto value) {
    for (const EndpointSample& e : fed) w.Counter(name, help, value(*e.stats), e.labels);
  };
  fed_gauge("hyperpool_wal_feed_serving", "1 while cached rows may be served (the feed is within --wal-max-lag).",
            [](const EndpointStats& s) { return s.wal_serving ? 1 : 0; });
  fed_gauge("hyperpool_wal_feed_lag_seconds",
            "How far behind the origin the feed is: now minus the time every earlier commit was applied.",
            [](const EndpointStats& s) { return s.wal_lag_ms / 1e3; });
  fed_gauge("hyperpool_wal_feed_last_message_seconds", "Time since the last replication message (0: none yet).",
            [](const EndpointStats& s) { return s.wal_last_message_ms / 1e3; });
  fed_counter("hyperpool_wal_feed_transactions_total", "Committed transactions decoded by the change feed.",
              [](const EndpointStats& s) { return s.wal_transactions; });
  fed_counter("hyperpool_wal_feed_invalidations_total", "Invalidations the change feed applied (bursts of commits).",
              [](const EndpointStats& s) { return s.wal_invalidations; });
  fed_counter("hyperpool_wal_feed_reconnects_total", "Streams started again (a new temporary slot) after a loss.",
              [](const EndpointStats& s) { return s.wal_reconnects; });
  fed_counter("hyperpool_wal_feed_bytes_total", "Replication payload bytes read by the change feed.",
              [](const EndpointStats& s) { return s.wal_bytes; });
}

// Families that both cache tiers have are written together, one sample per tier.
void WriteCache(ExpositionWriter& w, const ProcessMetrics& m) {
  const EndpointStats* e = m.endpoint ? &*m.endpoint : nullptr;
  const ClientStats* c = m.client && m.client->cache_enabled ? &*m.client : nullptr;
  const Labels kEndpoint = {{"tier", "endpoint"}};
  const Labels kClient = {{"tier", "client"}};
  auto both = [&](const char* name, const char* help, std::size_t endpoint_value, std::size_t client_value) {
    if (e) w.Counter(name, help, endpoint_value, kEndpoint);
    if (c) w.Counter(name, help, client_value, kClient);
  };
  both("hyperpool_cache_hits_total", "Query-cache hits served fresh, by tier.", e ? e->cache_hits : 0,
       c ? c->cache_local_hits : 0);
  both("hyperpool_cache_stores_total", "Results stored in the query cache, by tier.", e ? e->cache_stores : 0,
       c ? c->cache_stores : 0);
  both("hyperpool_cache_evictions_total", "Query-cache entries evicted for space, by tier.",
       e ? e->cache_evictions : 0, c ? c->cache_evictions : 0);
  both("hyperpool_cache_invalidations_total", "Query-cache entries (endpoint) or messages (client) invalidated by writes.",
       e ? e->cache_invalidations : 0, c ? c->cache_invalidations : 0);
  auto gauge_both = [&](const char* name, const char* help, std::size_t endpoint_value, std::size_t client_value) {
    if (e) w.Gauge(name, help, static_cast<double>(endpoint_value), kEndpoint);
    if (c) w.Gauge(name, help, static_cast<double>(client_value), kClient);
  };
  gauge_both("hyperpool_cache_bytes", "Bytes held by the query cache, by tier.", e ? e->cache_bytes : 0,
             c ? c->cache_bytes : 0);
  gauge_both("hyperpool_cache_entries", "Entries in the query cache, by tier.", e ? e->cache_entries : 0,
             c ? c->cache_entries : 0);
  if (e) {
    w.Counter("hyperpool_cache_misses_total", "Cacheable units that found no entry, by tier.", e->cache_misses,
              kEndpoint);
    w.Counter("hyperpool_cache_stale_hits_total", "Stale entries served while one refresh ran, by tier.",
              e->cache_stale_hits, kEndpoint);
    w.Counter("hyperpool_cache_coalesced_total", "Misses that waited for an identical fetch in flight, by tier.",
              e->cache_coalesced, kEndpoint);
    w.Counter("hyperpool_cache_uncacheable_total", "Candidate units decided uncacheable, by tier.",
              e->cache_uncacheable, kEndpoint);
    w.Counter("hyperpool_cache_bypassed_total", "Units not considered for caching (off, session state, hint).",
              e->cache_bypassed, kEndpoint);
    w.Counter("hyperpool_cache_stale_if_error_total",
              "Units answered past max age because the origin could not be reached (--stale-if-error).",
              e->cache_stale_if_error, kEndpoint);
    w.Counter("hyperpool_cache_catalog_reads_total",
              "Reads of the origin's catalog the cache started (after DDL, an unknown name, max age).",
              e->cache_catalog_reads, kEndpoint);
  }
  if (e && e->redis_configured) {
    // The shared tier on Redis (--redis-url): docs/architecture.md, "Shared cache tier".
    w.Gauge("hyperpool_redis_up", "1 while the shared cache tier's Redis is connected and subscribed.",
            e->redis_up ? 1.0 : 0.0);
    w.Counter("hyperpool_redis_errors_total", "Failed or timed-out Redis commands and lost Redis connections.",
              e->redis_errors);
    w.Counter("hyperpool_cache_shared_hits_total", "Shared-tier look-ups answered with a current entry.",
              e->shared_hits);
    w.Counter("hyperpool_cache_shared_misses_total", "Shared-tier look-ups answered without one.", e->shared_misses);
    w.Counter("hyperpool_cache_shared_invalidations_received_total",
              "Invalidations from other Endpoints' writes applied here.", e->shared_invalidations_received);
  }
  if (c) {
    w.Counter("hyperpool_cache_refused_stale_total", "Results refused as older than an invalidation, by tier.",
              c->cache_refused_stale, kClient);
    w.Gauge("hyperpool_cache_watch_subscribed",
            "1 while the Client tier's invalidation watch is subscribed to an Endpoint (the tier serves only then).",
            c->cache_watch_subscribed ? 1 : 0, kClient);
    w.Counter("hyperpool_cache_watch_subscriptions_total",
              "Subscriptions of the invalidation watch (each after the first dropped the Client tier).",
              c->cache_watch_subscriptions, kClient);
  }
  if (e) {
    w.Gauge("hyperpool_cache_watches", "Clients' invalidation watch links open to this Endpoint.", e->cache_watches,
            kEndpoint);
  }
}

}  // namespace

std::string RenderMetrics(const ProcessMetrics& m) {
  ExpositionWriter w;
  w.Gauge("hyperpool_up", "1 while the process runs.", 1);
  w.Gauge("hyperpool_draining", "1 once the process stops accepting and drains.", m.draining ? 1 : 0);
  if (m.client) {
    w.Gauge("hyperpool_client_connections", "Application connections open to the Client.",
            static_cast<double>(m.client->sessions));
    w.Counter("hyperpool_client_connections_accepted_total", "Application connections accepted (TCP and Unix).",
              m.client->accepted);
    w.LatencyHistogram("hyperpool_client_login_duration_seconds",
                       "Login time of application connections: accept to the ReadyForQuery ending the handshake.",
                       m.client->login_time);
    w.Counter("hyperpool_client_links_released_total",
              "Links idle sessions let go at their Endpoint's offer (the next unit opens a new one).",
              m.client->links_released);
    w.Counter("hyperpool_client_quiet_parks_total",
              "Idle sessions that gave up their own readability wait for their worker's watch of quiet sockets.",
              m.client->quiet_parks);
    w.Counter("hyperpool_client_quiet_wakes_total", "Quiet sessions woken by their application's next bytes.",
              m.client->quiet_wakes);
    w.Gauge("hyperpool_client_quiet_sessions", "Idle sessions whose socket their worker's watch of quiet sockets holds now.",
            static_cast<double>(m.client->quiet_sessions));
  }
  std::vector<EndpointSample> endpoints;
  for (const auto& [name, stats] : m.databases) endpoints.push_back({&stats, {{"database", name}}, stats.pool_max_size});
  if (endpoints.empty() && m.endpoint) endpoints.push_back({&*m.endpoint, {}, m.pool_max});
  WriteEndpoints(w, endpoints);
  WriteCache(w, m);
  return w.text();
}

}  // namespace hyperpool::ops
