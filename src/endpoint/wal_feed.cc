#include "endpoint/wal_feed.h"

#include <algorithm>
#include <random>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "cache/cacheability.h"
#include "cache/tier.h"
#include "protocol/backend_messages.h"
#include "protocol/codec.h"

namespace hyperpool::endpoint {
namespace {

constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);
// After a small burst the stream waits this long before reading again, so
// that under a steady write load one wake-up applies several commits (the
// feed's CPU is mostly wake-ups and reads); small against the bound.
constexpr std::chrono::milliseconds kBatchDelay{2};
constexpr std::size_t kSmallBurst = 64 * 1024;

// SQLSTATEs that say the origin does not allow the feed (as opposed to it
// being unreachable now): insufficient_privilege (no REPLICATION),
// object_not_in_prerequisite_state (wal_level < logical), undefined_file
// (no test_decoding), invalid_authorization_specification (pg_hba),
// configuration_limit_exceeded / too_many_connections (max_replication_slots,
// max_wal_senders), feature_not_supported.
bool Refused(std::string_view sqlstate) {
  return sqlstate == "42501" || sqlstate == "55000" || sqlstate == "58P01" || sqlstate == "28000" ||
         sqlstate == "53400" || sqlstate == "53300" || sqlstate == "0A000" || sqlstate == "42704";
}

int64_t Nanos(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

int64_t PostgresNowMicros() {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  return us - protocol::kPostgresEpochOffsetMicros;
}

OriginFailure FailureOf(std::string_view payload, std::string_view what) {
  OriginFailure f;
  absl::StatusOr<protocol::ErrorResponse> e = protocol::DecodeErrorResponse(payload);
  if (e.ok()) {
    f.sqlstate = std::string(e->sqlstate());
    f.message = fmt::format("{}: {}", what, std::string(e->message()));
  } else {
    f.sqlstate = "08P01";
    f.message = fmt::format("{}: malformed ErrorResponse", what);
  }
  return f;
}

}  // namespace

WalFeed::WalFeed(asio::any_io_executor executor, Options options, Connect connect,
                 std::shared_ptr<EndpointCache> cache, std::shared_ptr<const Logger> logger)
    : executor_(std::move(executor)),
      options_(options),
      connect_(std::move(connect)),
      cache_(std::move(cache)),
      logger_(logger ? std::move(logger) : Logger::Default()),
      core_(options.core),
      stream_timer_(executor_),
      probe_timer_(executor_) {
  if (options_.probe_interval <= std::chrono::milliseconds(0)) {
    options_.probe_interval = std::max<std::chrono::milliseconds>(options_.core.bound / 4, std::chrono::milliseconds(1));
  }
  state_.store(core_.state());
  // auto serves by max age from the first query, before the watchdog's
  // first tick; on waits for the feed.
  gate_open_ = core_.WillServe(std::chrono::steady_clock::now(), options_.probe_interval);
  serving_.store(gate_open_);
}

void WalFeed::Start() {
  if (core_.state() == WalFeedState::kOff) return;
  auto self = shared_from_this();
  loops_.fetch_add(3);
  asio::co_spawn(executor_, RunStream(self), asio::detached);
  asio::co_spawn(executor_, RunProbe(self), asio::detached);
  // The watchdog: closes the gate in time for the Client tiers, which serve
  // without asking, and enforces the hard limit. Never waits on the origin.
  asio::co_spawn(
      executor_,
      [](std::shared_ptr<WalFeed> self) -> asio::awaitable<void> {
        asio::steady_timer timer(self->executor_);
        while (!self->stopped_) {
          self->CheckGate();
          if (self->core_.OverHardLimit(std::chrono::steady_clock::now()) && self->stream_conn_) {
            self->Log(LogLevel::kWarn, "wal_feed_hard_lag",
                      fmt::format("lag {} ms past the hard limit: dropping the slot and starting a fresh one",
                                  self->core_.Lag(std::chrono::steady_clock::now()).count()));
            self->stream_conn_->CloseNow();  // the temporary slot goes with it
          }
          self->Publish();
          co_await Sleep(timer, self->options_.probe_interval);
        }
        self->loops_.fetch_sub(1);
      }(self),
      asio::detached);
}

void WalFeed::Stop() {
  asio::post(executor_, [self = shared_from_this()] {
    self->stopped_ = true;
    self->stream_timer_.cancel();
    self->probe_timer_.cancel();
    if (self->stream_conn_) self->stream_conn_->CloseNow();
    if (self->probe_conn_) self->probe_conn_->CloseNow();
  });
}

asio::awaitable<void> WalFeed::Sleep(asio::steady_timer& timer, std::chrono::milliseconds d) {
  timer.expires_after(d);
  (void)co_await timer.async_wait(kAsTuple);
}

bool WalFeed::ServeCached() const { return gate_open_ && core_.ServeCached(std::chrono::steady_clock::now()); }

std::chrono::milliseconds WalFeed::ServeBudget() const {
  if (!gate_open_) return std::chrono::milliseconds(0);
  return core_.Budget(std::chrono::steady_clock::now());
}

void WalFeed::Transition(WalFeedState next) {
  core_.Transition(next, std::chrono::steady_clock::now());
  state_.store(core_.state());
  CheckGate();
}

void WalFeed::CheckGate() {
  const auto now = std::chrono::steady_clock::now();
  // Closes one watchdog tick early: a Client tier hears of it one hop later.
  const bool will = core_.WillServe(now, options_.probe_interval);
  if (gate_open_ && !will) {
    gate_open_ = false;
    DropAll(/*clients_only=*/true);
  } else if (!gate_open_ && will) {
    gate_open_ = true;
  }
  serving_.store(gate_open_);
}

void WalFeed::DropAll(bool clients_only) {
  if (clients_only) {
    // The Endpoint tier is not served while the gate is closed, and every
    // commit reaches it before the gate opens again; the Client tiers serve
    // on their own, so they drop everything now.
    cache_->DropClientTiers();
    return;
  }
  cache::WriteEffect all;
  all.all = true;
  cache_->Broadcast(cache_->Invalidate(all), std::string(), /*remote=*/true);
}

void WalFeed::Apply(const FeedChanges& changes) {
  if (!changes.any()) return;
  cache::WriteEffect effect;
  const cache::VolatilityOracle* oracle = cache_->Oracle();
  effect.all = changes.all || oracle == nullptr;  // no catalog loaded: nothing precise (nothing much cached either)
  if (!effect.all) {
    // Names as the cache keys them: partitions to their root, through the
    // catalog the cache already reads. A table it does not know (created
    // since) drops everything.
    for (const protocol::RelationName& r : changes.relations) {
      std::optional<cache::RelationInfo> info = oracle->Relation(cache::QualifiedName{r.schema, r.name});
      if (!info) {
        effect.all = true;
        break;
      }
      for (std::string& t : info->base_tables) {
        if (std::find(effect.tables.begin(), effect.tables.end(), t) == effect.tables.end()) {
          effect.tables.push_back(std::move(t));
        }
      }
    }
  }
  if (effect.all) effect.tables.clear();
  if (changes.catalog) cache_->CatalogChanged(EndpointCache::CatalogChange::kFromFeed);
  // The same path as a write through hyperpool: the Endpoint tier, the
  // shared tier (INCR + PUBLISH), then every Client tier.
  cache_->Broadcast(cache_->Invalidate(effect), std::string(), /*remote=*/true);
  core_.NoteInvalidation();
}

void WalFeed::Write(std::string bytes) {
  if (!stream_conn_) return;
  pending_writes_ += bytes;
  if (writing_) return;
  writing_ = true;
  asio::co_spawn(executor_, WriteLoop(shared_from_this(), stream_conn_), asio::detached);
}

asio::awaitable<void> WalFeed::WriteLoop(std::shared_ptr<WalFeed> self, std::shared_ptr<OriginConnection> conn) {
  std::string batch;
  while (!pending_writes_.empty() && !conn->broken()) {
    batch.clear();
    batch.swap(pending_writes_);
    absl::Status s = co_await conn->Write(batch);
    if (!s.ok()) break;  // the reader sees the broken connection
  }
  if (conn != stream_conn_) pending_writes_.clear();
  writing_ = false;
  if (!pending_writes_.empty() && stream_conn_ && !stream_conn_->broken()) Write(std::string());
}

void WalFeed::SendAck(bool force, bool request_reply) {
  std::string out;
  if (core_.AppendAck(out, std::chrono::steady_clock::now(), PostgresNowMicros(), force, request_reply)) {
    Write(std::move(out));
  }
}

void WalFeed::Log(LogLevel level, std::string_view event, std::string_view detail) {
  logger_->Log(level, event, {{"database", cache_->database()}, {"detail", detail}});
}

asio::awaitable<void> WalFeed::Failed(const OriginFailure& failure) {
  const bool refused = Refused(failure.sqlstate);
  Transition(refused ? WalFeedState::kUnavailable : WalFeedState::kConnecting);
  if (failure.message != last_failure_) {
    last_failure_ = failure.message;
    std::string consequence;
    if (!refused) {
      consequence = "no cached rows are served until it is back; retrying";
    } else if (options_.core.mode == WalInvalidation::kAuto) {
      consequence = fmt::format(
          "wal_invalidation = auto: the cache works by max age ({} s) without it; it needs wal_level = logical and a "
          "role with REPLICATION; retrying every {} s",
          cache_->options().max_age.count() / 1000, options_.unavailable_retry.count() / 1000);
    } else {
      consequence = fmt::format(
          "wal_invalidation = on: no cached rows are served until it works; it needs wal_level = logical and a role "
          "with REPLICATION; retrying every {} s",
          options_.unavailable_retry.count() / 1000);
    }
    Log(LogLevel::kWarn, refused ? "wal_feed_unavailable" : "wal_feed_down",
        fmt::format("{}{}: {}", failure.message,
                    failure.message.find(failure.sqlstate) == std::string::npos || failure.sqlstate.empty()
                        ? fmt::format(" (SQLSTATE {})", failure.sqlstate.empty() ? "none" : failure.sqlstate)
                        : std::string(),
                    consequence));
  }
  co_await Sleep(stream_timer_, refused ? options_.unavailable_retry : options_.min_backoff);
}

asio::awaitable<void> WalFeed::RunStream(std::shared_ptr<WalFeed> self) {
  std::chrono::milliseconds backoff = options_.min_backoff;
  while (!stopped_) {
    ConnectResult r = co_await connect_(/*replication=*/true);
    if (stopped_) break;
    if (!r.ok()) {
      co_await Failed(r.failure);
      continue;
    }
    auto conn = std::shared_ptr<OriginConnection>(std::move(r.connection));
    stream_conn_ = conn;
    std::optional<OriginFailure> failure = co_await StartReplication(*conn);
    if (stopped_) break;
    if (failure) {
      conn->CloseNow();
      stream_conn_.reset();
      co_await Failed(*failure);
      continue;
    }
    // A new slot starts where the origin is now: commits made while no
    // stream ran are not in it, so nothing cached before counts.
    DropAll(/*clients_only=*/false);
    if (core_.EverStreamed()) reconnects_.fetch_add(1);
    last_failure_.clear();
    backoff = options_.min_backoff;
    Transition(WalFeedState::kStreaming);
    Log(LogLevel::kInfo, "wal_feed_streaming",
        fmt::format("invalidating the cache from the origin's WAL (temporary slot, test_decoding); serving cached rows "
                    "while the feed lags less than {} ms",
                    options_.core.bound.count()));
    co_await Stream(conn);
    conn->CloseNow();
    stream_conn_.reset();
    if (stopped_) break;
    Transition(WalFeedState::kConnecting);
    co_await Sleep(stream_timer_, backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
  loops_.fetch_sub(1);
}

asio::awaitable<std::optional<OriginFailure>> WalFeed::StartReplication(OriginConnection& conn) {
  std::random_device random;
  const std::string slot = fmt::format("hyperpool_{:08x}{:08x}", random(), random());
  // NOEXPORT_SNAPSHOT (PostgreSQL 10+ spelling): nothing to hold for us.
  const std::string create =
      fmt::format("CREATE_REPLICATION_SLOT {} TEMPORARY LOGICAL test_decoding NOEXPORT_SNAPSHOT", slot);
  // Empty transactions are kept: a COMMIT with no row shown is one that
  // changed only the catalog (DDL), which must reach the cache too.
  const std::string start = fmt::format(
      "START_REPLICATION SLOT {} LOGICAL 0/0 (\"skip-empty-xacts\" '0', \"include-xids\" '0')", slot);
  for (const std::string* sql : {&create, &start}) {
    std::string out;
    protocol::AppendFrame(out, 'Q', *sql + std::string(1, '\0'));
    if (absl::Status s = co_await conn.Write(out); !s.ok()) {
      co_return OriginFailure{ValidationFailure::kOther, "08006", std::string(s.message())};
    }
    std::optional<OriginFailure> error;
    while (true) {
      absl::StatusOr<protocol::Frame> f = co_await conn.ReadFrame();
      if (!f.ok()) co_return OriginFailure{ValidationFailure::kOther, "08006", std::string(f.status().message())};
      if (f->tag == 'E') error = FailureOf(f->payload, sql == &create ? "CREATE_REPLICATION_SLOT" : "START_REPLICATION");
      if (f->tag == 'W' && sql == &start) co_return std::nullopt;  // CopyBothResponse: streaming
      if (f->tag == 'Z') break;
    }
    if (error) co_return error;
    if (sql == &start) {
      co_return OriginFailure{ValidationFailure::kOther, "08P01", "START_REPLICATION: no CopyBothResponse"};
    }
  }
  co_return std::nullopt;
}

asio::awaitable<void> WalFeed::Stream(std::shared_ptr<OriginConnection> conn) {
  std::string why;
  auto handle = [&](const protocol::Frame& f) {
    const auto now = std::chrono::steady_clock::now();
    switch (f.tag) {
      case 'd':
        if (absl::Status s = core_.OnCopyData(f.payload, now); !s.ok()) {
          why = std::string(s.message());
          return false;
        }
        return true;
      case 'E':
        why = FailureOf(f.payload, "replication stream").message;
        return false;
      case 'c':
        why = "the origin ended the stream (CopyDone)";
        return false;
      default:
        return true;  // NoticeResponse, ParameterStatus
    }
  };
  asio::steady_timer batch(executor_);
  std::size_t burst = 0;
  while (!stopped_) {
    if (burst > 0 && burst < kSmallBurst) {
      batch.expires_after(kBatchDelay);
      (void)co_await batch.async_wait(kAsTuple);
    }
    const uint64_t bytes_before = core_.counters().bytes;
    absl::StatusOr<protocol::Frame> f = co_await conn->ReadFrame();
    if (!f.ok()) {
      why = std::string(f.status().message());
      break;
    }
    bool ok = handle(*f);
    while (ok) {
      absl::StatusOr<std::optional<protocol::Frame>> b = conn->TakeBufferedFrame();
      if (!b.ok()) {
        why = std::string(b.status().message());
        ok = false;
      } else if (!b->has_value()) {
        break;
      } else {
        ok = handle(**b);
      }
    }
    // The burst's commits are applied before anything counts as applied.
    Apply(core_.TakeCommitted());
    core_.MarkApplied(std::chrono::steady_clock::now());
    if (!ok) break;
    burst = core_.counters().bytes - bytes_before;
    SendAck(/*force=*/false, /*request_reply=*/false);
    CheckGate();
  }
  if (!stopped_) {
    Log(LogLevel::kWarn, "wal_feed_lost",
        fmt::format("{}: no cached rows are served until a new stream has caught up", why));
  }
}

asio::awaitable<absl::StatusOr<protocol::Lsn>> WalFeed::ReadInsertPosition(OriginConnection& conn) {
  std::string out;
  protocol::AppendFrame(out, 'Q', std::string_view("SELECT pg_current_wal_insert_lsn()\0", 35));
  if (absl::Status s = co_await conn.Write(out); !s.ok()) co_return s;
  std::optional<protocol::Lsn> lsn;
  std::string error;
  while (true) {
    absl::StatusOr<protocol::Frame> f = co_await conn.ReadFrame();
    if (!f.ok()) co_return f.status();
    if (f->tag == 'D') {
      absl::StatusOr<protocol::DataRow> row = protocol::DecodeDataRow(f->payload);
      if (row.ok()) {
        for (protocol::NullableValue v : *row) {
          if (v && !lsn) lsn = protocol::ParseLsn(*v);
        }
      }
    } else if (f->tag == 'E') {
      error = FailureOf(f->payload, "probe").message;
    } else if (f->tag == 'Z') {
      break;
    }
  }
  if (!lsn) co_return absl::UnavailableError(error.empty() ? "probe: no WAL position in the answer" : error);
  co_return *lsn;
}

asio::awaitable<void> WalFeed::RunProbe(std::shared_ptr<WalFeed> self) {
  std::chrono::milliseconds backoff = options_.min_backoff;
  while (!stopped_) {
    if (core_.state() != WalFeedState::kStreaming) {
      co_await Sleep(probe_timer_, options_.probe_interval);
      continue;
    }
    if (!probe_conn_) {
      ConnectResult r = co_await connect_(/*replication=*/false);
      if (stopped_) break;
      if (!r.ok()) {
        if (r.failure.message != last_probe_failure_) {
          last_probe_failure_ = r.failure.message;
          Log(LogLevel::kWarn, "wal_feed_probe_down",
              fmt::format("{}: the feed's lag cannot be measured; no cached rows are served", r.failure.message));
        }
        co_await Sleep(probe_timer_, backoff);
        backoff = std::min(backoff * 2, options_.max_backoff);
        continue;
      }
      probe_conn_ = std::shared_ptr<OriginConnection>(std::move(r.connection));
    }
    std::shared_ptr<OriginConnection> conn = probe_conn_;
    const auto started = std::chrono::steady_clock::now();
    absl::StatusOr<protocol::Lsn> position = co_await ReadInsertPosition(*conn);
    if (stopped_) break;
    if (!position.ok()) {
      conn->CloseNow();
      probe_conn_.reset();
      if (std::string(position.status().message()) != last_probe_failure_) {
        last_probe_failure_ = std::string(position.status().message());
        Log(LogLevel::kWarn, "wal_feed_probe_down",
            fmt::format("{}: the feed's lag cannot be measured; no cached rows are served", last_probe_failure_));
      }
      co_await Sleep(probe_timer_, backoff);
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    last_probe_failure_.clear();
    backoff = options_.min_backoff;
    // Resolved at once when the stream has already passed it; otherwise
    // the walsender is asked where it is (a keepalive answers even when
    // nothing is decoded).
    if (!core_.AddProbe(started, *position)) SendAck(/*force=*/true, /*request_reply=*/true);
    CheckGate();
    co_await Sleep(probe_timer_, options_.probe_interval);
  }
  if (probe_conn_) probe_conn_->CloseNow();
  probe_conn_.reset();
  loops_.fetch_sub(1);
}

void WalFeed::Publish() {
  const WalFeedCore::Counters& c = core_.counters();
  state_.store(core_.state());
  serving_.store(gate_open_);
  fresh_as_of_ns_.store(Nanos(core_.fresh_as_of()));
  last_message_ns_.store(c.last_message == std::chrono::steady_clock::time_point{} ? 0 : Nanos(c.last_message));
  transactions_.store(c.transactions);
  invalidations_.store(c.invalidations);
  bytes_.store(c.bytes);
}

void WalFeed::FillStats(EndpointStats& s) const {
  const WalFeedState state = state_.load();
  const int64_t now = Nanos(std::chrono::steady_clock::now());
  s.wal_state = std::string(WalFeedStateName(state));
  s.wal_serving = serving_.load();
  const int64_t fresh = fresh_as_of_ns_.load();
  if (state == WalFeedState::kStreaming && fresh > 0) s.wal_lag_ms = static_cast<std::size_t>((now - fresh) / 1000000);
  s.wal_transactions = transactions_.load();
  s.wal_invalidations = invalidations_.load();
  const int64_t last = last_message_ns_.load();
  s.wal_last_message_ms = last > 0 ? static_cast<std::size_t>((now - last) / 1000000) : 0;
  s.wal_reconnects = reconnects_.load();
  s.wal_bytes = bytes_.load();
}

}  // namespace hyperpool::endpoint
