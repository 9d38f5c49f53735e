#include "endpoint/endpoint_cache.h"

#include <algorithm>
#include <cctype>
#include <random>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "absl/strings/match.h"
#include "endpoint/origin_connection.h"
#include "endpoint/statement_registry.h"
#include "protocol/codec.h"
#include "protocol/link_protocol.h"

namespace hyperpool::endpoint {
namespace {

constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);
// After a failed catalog refresh, wait this long before the next attempt
// (meanwhile decisions are made on the catalog read before, but for the
// names changed since).
constexpr std::chrono::seconds kRefreshRetry{1};
// A name the catalog lacks refreshes it at most this often (a query on a
// table that does not exist must not read the catalog on every call).
constexpr std::chrono::seconds kUnknownNameRefreshEvery{1};
// After the WAL feed reported a catalog change, the catalog is read again at
// most this often (CatalogChanged).
constexpr std::chrono::seconds kFeedCatalogReadEvery{1};
// A catalog read that met an error (a relation dropped while it ran: "could
// not open relation with OID") is tried again at once, this many times.
constexpr int kCatalogReadAttempts = 3;

void Log(std::string_view line) {
  std::string text = fmt::format("hyperpool endpoint cache: {}\n", line);
  std::fwrite(text.data(), 1, text.size(), stderr);
}

MemoryCacheLimits LimitsOf(const CacheOptions& o) {
  MemoryCacheLimits l;
  l.max_bytes = o.max_bytes;
  l.max_entry_bytes = o.max_entry_bytes;
  return l;
}

}  // namespace

// ---------------------------------------------------------------------------
// EndpointCache
// ---------------------------------------------------------------------------

EndpointCache::EndpointCache(asio::any_io_executor executor, CacheOptions options, std::string database,
                             std::string role, std::size_t pool_max_size, Acquire acquire,
                             std::shared_ptr<cache::SharedCache> shared)
    : executor_(std::move(executor)),
      options_(options),
      database_(std::move(database)),
      role_(std::move(role)),
      max_tracked_connections_(pool_max_size * 8 + 1024),
      acquire_(std::move(acquire)),
      tier_(options.factory ? options.factory(LimitsOf(options)) : MakeMemoryCache(LimitsOf(options))),
      shared_(std::move(shared)) {
  if (!tier_) tier_ = MakeMemoryCache(LimitsOf(options));  // a factory that made nothing
  std::random_device random;
  source_ = (static_cast<uint64_t>(random()) << 32) | random();
  if (source_ == 0) source_ = 1;  // 0 means "not said"
  counters_.shared_configured = shared_ != nullptr;
  if (shared_) {
    // Cleared by the destructor and Stop(); runs on executor_.
    shared_->SetInvalidationHandler([this](const cache::SharedInvalidation& inv) { OnSharedInvalidation(inv); });
  }
}

EndpointCache::~EndpointCache() {
  if (shared_) shared_->SetInvalidationHandler(nullptr);
}

void EndpointCache::WantCatalog() {
  auto now = std::chrono::steady_clock::now();
  auto every = std::max<std::chrono::milliseconds>(options_.max_age, std::chrono::seconds(1));
  const bool unknown = !oracle_ || overlay_.all_unknown();
  if (!refreshing_ && (unknown || now - loaded_at_ >= every) && RefreshAllowed(now)) {
    StartRefresh();
  }
}

bool EndpointCache::RefreshAllowed(std::chrono::steady_clock::time_point now) const {
  if (now - last_failure_ < kRefreshRetry || !pacing_.Allowed(now, loaded_at_)) return false;
  return !feed_changed_ || now - refresh_started_ >= kFeedCatalogReadEvery;
}

bool EndpointCache::NameUnknown() {
  const auto now = std::chrono::steady_clock::now();
  if (refreshing_) return true;
  const bool repeated = now - last_unknown_refresh_ < kUnknownNameRefreshEvery && loaded_at_ >= last_unknown_refresh_;
  if (repeated || !RefreshAllowed(now)) return false;
  last_unknown_refresh_ = now;
  StartRefresh();
  return refreshing_;
}

void EndpointCache::OnRefreshEnd(std::weak_ptr<asio::steady_timer> timer) {
  if (!refreshing_) {
    if (auto t = timer.lock()) t->cancel();
    return;
  }
  refresh_waiters_.push_back(std::move(timer));
}

void EndpointCache::EndRefresh() {
  refreshing_ = false;
  std::vector<std::weak_ptr<asio::steady_timer>> waiters = std::move(refresh_waiters_);
  refresh_waiters_.clear();
  for (auto& w : waiters) {
    if (auto t = w.lock()) t->cancel();
  }
}

void EndpointCache::CatalogChanged(CatalogChange source) {
  overlay_.Committed(cache::CatalogChange::All());  // reloaded when a decision next needs it
  if (source == CatalogChange::kFromFeed) {
    feed_changed_ = true;
    return;
  }
  feed_changed_ = false;
  last_failure_ = {};
}

void EndpointCache::SettleCatalogChange(const cache::CatalogChange& change) {
  overlay_.Settle(change);
  // Nothing (or no shadowed name) is decided until a read: start it now
  // rather than at the next decision.
  if (change.all > 0 || change.cascade > 0) WantCatalog();
}

void EndpointCache::StartRefresh() {
  if (refreshing_ || !acquire_) return;
  refreshing_ = true;
  refresh_started_ = std::chrono::steady_clock::now();
  asio::co_spawn(executor_, Refresh(shared_from_this()), asio::detached);
}

asio::awaitable<void> EndpointCache::Refresh(std::shared_ptr<EndpointCache> self) {
  for (int attempt = 0; attempt < kCatalogReadAttempts; ++attempt) {
    // What was settled before the read is sent is in it.
    const uint64_t token = overlay_.ReadStarting();
    ++counters_.catalog_reads;
    absl::StatusOr<Lease> lease = co_await acquire_();
    if (!lease.ok()) break;
    OriginConnection& conn = lease->As<OriginConnection>();
    // No parallel workers: the read must not take worker slots the
    // application's own queries would launch (nor depend on settings a
    // session left on the connection).
    std::string sql =
        fmt::format("{}; BEGIN READ ONLY; SET LOCAL search_path = pg_catalog; "
                    "SET LOCAL max_parallel_workers_per_gather = 0; {}; {}; {}; {}; {}; COMMIT",
                    cache::kSearchPathQuery, cache::kFunctionVolatilityQuery, cache::kRelationsQuery,
                    cache::kViewDependenciesQuery, cache::kSideCatalogQuery, cache::kWriteEffectsQuery);
    std::string out;
    protocol::AppendFrame(out, 'Q', sql + std::string(1, '\0'));
    absl::Status written = co_await conn.Write(out);
    auto snapshot = std::make_unique<cache::CatalogSnapshot>();
    std::vector<std::string> path;
    std::string why;  // the origin's error or the row that did not fit, for the log
    int result = -1;  // index of the current row set: 0 path, 1 functions, 2 relations, 3 view deps, 4 side,
                      // 5 write effects
    bool failed = !written.ok();
    bool done = false;
    while (!failed && !done) {
      absl::StatusOr<protocol::Frame> f = co_await conn.ReadFrame();
      if (!f.ok()) {
        failed = true;
        break;
      }
      switch (f->tag) {
        case 'T':
          ++result;
          break;
        case 'D': {
          absl::StatusOr<protocol::DataRow> row = protocol::DecodeDataRow(f->payload);
          if (!row.ok()) {
            failed = true;
            break;
          }
          std::vector<std::optional<std::string_view>> cols;
          for (protocol::NullableValue v : *row) cols.emplace_back(v);
          absl::Status st;
          if (result == 0) {
            if (!cols.empty() && cols[0] && !cols[0]->starts_with("pg_temp")) path.emplace_back(*cols[0]);
          } else if (result == 1) {
            st = snapshot->AddFunctionRow(cols);
          } else if (result == 2) {
            st = snapshot->AddRelationRow(cols);
          } else if (result == 3) {
            st = snapshot->AddViewDependencyRow(cols);
          } else if (result == 4) {
            st = snapshot->AddSideRow(cols);
          } else if (result == 5) {
            st = snapshot->AddWriteEffectRow(cols);
          }
          if (!st.ok()) {
            failed = true;
            why = std::string(st.message());
          }
          break;
        }
        case 'E':
          failed = true;  // keep reading to ReadyForQuery below
          if (absl::StatusOr<protocol::ErrorResponse> e = protocol::DecodeErrorResponse(f->payload); e.ok()) {
            why = fmt::format("{} ({})", e->message(), e->sqlstate());
          }
          while (true) {
            absl::StatusOr<protocol::Frame> g = co_await conn.ReadFrame();
            if (!g.ok() || g->tag == 'Z') break;
          }
          break;
        case 'Z':
          done = true;
          break;
        default:
          break;
      }
    }
    const bool healthy = !conn.broken() && conn.transaction_status() == 'I' && done;
    lease->Release(healthy ? ReleaseDecision::kReturn : ReleaseDecision::kClose);
    if (failed || result < 5) {
      // An error on a healthy connection is most often a relation dropped
      // while the read ran (pg_get_viewdef opens each view): read again.
      if (healthy && attempt + 1 < kCatalogReadAttempts) continue;
      Log(fmt::format("could not read the origin's catalog ({}); {}", why.empty() ? "connection lost" : why,
                      oracle_ ? "decisions keep the catalog read before, but for what changed since"
                              : "caching stays off until it can"));
      break;
    }
    // DDL settled meanwhile stays in the overlay: no need to read again.
    snapshot_ = std::move(snapshot);
    oracle_ = snapshot_->Oracle(std::move(path));
    ++catalog_loads_;
    overlay_oracle_.set_base(oracle_.get());
    overlay_.ReadLoaded(token);
    // A feed change that came during the read keeps the read-again limit.
    if (!overlay_.all_unknown()) feed_changed_ = false;
    loaded_at_ = std::chrono::steady_clock::now();
    ++counters_.catalog_refreshes;
    EndRefresh();
    // A change settled while it ran: read again (at once the first time:
    // pacing_).
    const bool still_unknown = overlay_.all_unknown() || overlay_.cascade_pending();
    pacing_.Loaded(still_unknown);
    if (still_unknown) WantCatalog();
    Publish();
    co_return;
  }
  last_failure_ = std::chrono::steady_clock::now();
  EndRefresh();
}

cache::InvalidateControl EndpointCache::Invalidate(const cache::WriteEffect& effect, bool for_clients) {
  cache::InvalidateControl c;
  if (effect.all || effect.schema) {
    tier_->InvalidateAll(database_);
    c.all = true;
    // Statement metadata survives what is not DDL (tier.h, WriteEffect).
    c.rows_only = !effect.schema;
  } else {
    tier_->InvalidateTables(database_, effect.tables);
    if (for_clients) c.tables = effect.tables;
  }
  if (shared_) {
    shared_->Invalidate(cache::SharedInvalidation{database_, c.all, c.all ? std::vector<std::string>{} : effect.tables});
  }
  c.generation = ++generation_;
  c.source = source_;
  ++counters_.invalidations;
  Publish();
  return c;
}

std::string SessionCache::StartWatch(const std::vector<std::pair<std::string, std::string>>& hello) {
  Start(hello);
  watch_ = true;
  cache_->AddWatch(this);
  std::string out;
  protocol::Encode(protocol::ParameterStatus{cache::kWatchSourceParam, std::to_string(cache_->source())}, out);
  protocol::Encode(protocol::ParameterStatus{cache::kWatchGenerationParam, std::to_string(cache_->generation())},
                   out);
  return out;
}

std::string EndpointCache::ConnKey(const OriginConnection& conn) {
  std::string key = std::to_string(conn.backend_key().process_id);
  key += ':';
  key += conn.backend_key().secret_key;
  return key;
}

bool EndpointCache::ConnectionUsable(const OriginConnection& conn, const std::string& fingerprint) {
  // Sessions with different (keyed) startup settings may share a connection:
  // settings replay (settings_replay.h) gives each unit exactly its
  // session's settings, and without replay none are applied for anyone. A
  // connection on which session state was changed is another matter.
  (void)fingerprint;
  return conn_owner_.find(ConnKey(conn)) == conn_owner_.end();
}

void EndpointCache::MarkConnectionDirty(const OriginConnection& conn) {
  std::string key = ConnKey(conn);
  if (conn_owner_.insert_or_assign(key, "dirty").second) conn_order_.push_back(key);
  while (conn_order_.size() > max_tracked_connections_) {
    conn_owner_.erase(conn_order_.front());
    conn_order_.pop_front();
  }
}

void EndpointCache::RecordDecision(uint64_t fingerprint, cache::Reason reason,
                                   absl::FunctionRef<std::string()> normalized) {
  if (reason != cache::Reason::kCacheable) ++counters_.uncacheable;
  ++counters_.decided[static_cast<std::size_t>(reason)];
  {
    std::lock_guard lock(report_mu_);
    decisions_.Record(fingerprint, reason, normalized);
  }
  PublishSoon();
}

void EndpointCache::NoteServed(bool coalesced) {
  ++counters_.served;
  if (coalesced) ++counters_.coalesced_served;
}

void EndpointCache::NoteBypassed(BypassCause cause) {
  ++counters_.bypassed;
  ++counters_.bypass[static_cast<std::size_t>(cause)];
  PublishSoon();
}

void EndpointCache::NoteDecidedWith(const cache::VolatilityOracle* oracle) {
  if (oracle == nullptr) {
    ++counters_.decided_without_catalog;
  } else if (oracle != oracle_.get()) {
    ++counters_.decided_with_changes;
  }
}

void EndpointCache::Publish() {
  std::lock_guard lock(report_mu_);
  published_ = counters_;
  published_.tier = tier_->Stats();
}

void EndpointCache::PublishSoon() {
  if (publish_armed_) return;
  std::weak_ptr<EndpointCache> weak = weak_from_this();
  if (weak.expired()) {  // not owned by a shared_ptr (a test's): at once
    Publish();
    return;
  }
  if (!publish_timer_) publish_timer_ = std::make_unique<asio::steady_timer>(executor_);
  publish_armed_ = true;
  publish_timer_->expires_after(kLatePublish);
  publish_timer_->async_wait([weak = std::move(weak)](std::error_code ec) {
    if (ec) return;
    if (auto self = weak.lock()) {
      self->publish_armed_ = false;
      self->Publish();
    }
  });
}

EndpointCacheReport EndpointCache::Report(std::size_t top) const {
  std::lock_guard lock(report_mu_);
  EndpointCacheReport r = published_;
  if (shared_) r.shared = shared_->Stats();  // thread-safe, and live (no Publish() needed)
  r.top = decisions_.Top(top);
  return r;
}

// ---------------------------------------------------------------------------
// SessionCache
// ---------------------------------------------------------------------------

SessionCache::SessionCache(std::shared_ptr<EndpointCache> cache, std::function<void(std::string)> deliver)
    : cache_(std::move(cache)), deliver_(std::move(deliver)) {
  cache_->Register(this);
}

asio::steady_timer& SessionCache::WaitTimer() {
  if (!wait_timer_) wait_timer_ = std::make_unique<asio::steady_timer>(cache_->executor());
  return *wait_timer_;
}

SessionCache::~SessionCache() {
  if (shared_wait_) shared_wait_->alive = false;
  if (leader_ && !leader_->done && leader_->owns_key) cache_->tier().Abandon(leader_->key);
  if (unit_ && !unit_->wait_key.empty()) cache_->tier().CancelWait(unit_->wait_key, unit_->wait_id);
  if (watch_) cache_->RemoveWatch(this);
  SettleOpenCatalogChanges();
  cache_->Unregister(this);
  cache_->Publish();
}

void SessionCache::Start(const std::vector<std::pair<std::string, std::string>>& hello) {
  if (started_) return;
  started_ = true;
  hello_fp_ = cache_->Intern(cache::HelloFingerprint(hello, &hello_unsupported_));
  cache::ApplyStartupParameters(hello, settings_);
  const std::string unnamed = client_id();
  std::string id;
  for (const auto& [name, value] : hello) {
    if (name == link::kClientIdParam) id = value;
    if (name == link::kWroteParam && value == "1") wrote_ = true;  // (an earlier link of the session's)
  }
  if (id.empty()) id = fmt::format("session:{}", static_cast<const void*>(this));
  client_id_ = cache_->Intern(std::move(id));
  cache_->Rekey(this, unnamed);
}

void SessionCache::TrackSettings(const SessionSettings* settings, std::function<bool()> tracked, bool keep_key) {
  tracked_settings_ = settings;
  settings_tracked_ = std::move(tracked);
  if (!keep_key) fp_captures_ = settings != nullptr ? settings->captures() : 0;
}

void SessionCache::NoteStateChange(const Effect& e) {
  if (!e.changes_state) return;
  if (e.settings_only && tracked_settings_ != nullptr && settings_tracked_ && settings_tracked_()) {
    if (!pending_setting_change_) {
      pending_setting_change_ = true;
      pending_captures_ = tracked_settings_->captures();
    }
    return;
  }
  state_changed_ = true;
}

void SessionCache::RefreshSettingsKey() {
  if (tracked_settings_ == nullptr) return;
  const std::uint64_t captures = tracked_settings_->captures();
  if (pending_setting_change_) {
    // No capture since the change: what the session carries is unknown.
    if (captures == pending_captures_) state_changed_ = true;
    pending_setting_change_ = false;
  }
  if (captures == fp_captures_) return;
  fp_captures_ = captures;
  // What every connection this session borrows carries (settings replay):
  // keyed like a hello, so sessions that ended up with the same settings
  // share entries, and a setting a key cannot describe (search_path, ...)
  // makes the session bypass the tier while it is set.
  std::vector<std::pair<std::string, std::string>> params(tracked_settings_->desired().begin(),
                                                          tracked_settings_->desired().end());
  hello_fp_ = cache_->Intern(cache::HelloFingerprint(params, &hello_unsupported_));
}

const std::string& SessionCache::Empty() {
  static const std::string kEmpty;
  return kEmpty;
}

std::shared_ptr<const std::string> EndpointCache::Intern(std::string text) {
  return interned_.Intern(text, [&text] { return std::move(text); });
}

bool SessionCache::StandardConformingStrings() const {
  if (tracked_settings_ == nullptr) return true;
  static const std::string kName = "standard_conforming_strings";  // (a literal would make a string per call)
  auto it = tracked_settings_->desired().find(kName);
  if (it == tracked_settings_->desired().end()) return true;
  const absl::string_view v = it->second;
  return absl::EqualsIgnoreCase(v, "on") || absl::EqualsIgnoreCase(v, "true") || absl::EqualsIgnoreCase(v, "yes") ||
         v == "1";  // anything else: judged as off
}

std::chrono::milliseconds SessionCache::Ttl() const {
  // hyperpool.cache_ttl may shorten or lengthen the tier's max_age, up to an hour.
  if (settings_.ttl) return std::min<std::chrono::milliseconds>(*settings_.ttl, std::chrono::hours(1));
  return cache_->options().max_age;
}

void SessionCache::EndLeader(bool abandon) {
  if (!leader_) return;
  if (!leader_->done && abandon && leader_->owns_key) cache_->tier().Abandon(leader_->key);
  leader_.reset();
  cache_->Publish();
}

void SessionCache::SettleOpenCatalogChanges() {
  if (!unit_) return;  // (none made since the last sweep: nothing opened)
  UnitState& u = *unit_;
  cache::CatalogChange open = std::move(u.txn_catalog);
  u.txn_catalog = cache::CatalogChange{};
  for (const Effect& e : u.pending) open.Merge(e.catalog);
  open.Merge(u.building.catalog);
  u.building.catalog = cache::CatalogChange{};
  if (open.any()) cache_->SettleCatalogChange(open);
}

void SessionCache::Emit(const cache::InvalidateControl& control, std::string& batch) {
  cache::AppendControl(batch, control);
  cache_->Broadcast(control, client_id());
}

void SessionCache::NoteDescribeWindow(char what) {
  UnitState& u = U();
  if (what != 'P' && what != 'D') {
    u.describe_window = DescribeWindow::kNone;
    return;
  }
  if (u.describe_window == DescribeWindow::kNone) {
    // Opens only between units: nothing outstanding, outside a transaction.
    if (!u.pending.empty() || last_status_ != 'I' || leader_) return;
    u.describe_window = DescribeWindow::kOpen;
    u.describe_answers = 0;
    u.window_describes = 0;
    u.window_describes_unnamed = false;
    u.window_result_type = 0;
  }
  if (u.describe_window != DescribeWindow::kOpen) return;
  u.describe_answers += what == 'P' ? 1 : 2;  // ParseComplete; ParameterDescription + RowDescription|NoData
}

bool SessionCache::DescribeWindowReady() const {
  return unit_ && unit_->describe_window == DescribeWindow::kOpen && unit_->describe_answers == 0 &&
         unit_->pending.empty() && last_status_ == 'I';
}

bool SessionCache::UnitState::Empty() const {
  // What is read only while something else is set is left out: the
  // window's counts (only while it is open), a follower's wait id and wake
  // (only while wait_key is set: Step sets them again), the row count (only
  // under a limit).
  const bool building_empty = !building.write.any() && !building.write.schema && !building.changes_state &&
                              !building.settings_only && !building.catalog.any() && !building.own_write;
  return !lookup && wait_key.empty() && row_limit.limit == 0 && pending.empty() && building_empty &&
         !txn_written.any() && !txn_written.schema && !txn_catalog.any() && describe_window == DescribeWindow::kNone;
}

void SessionCache::ReleaseIdleBuffers() {
  if (stmts_ && stmts_->Empty()) stmts_.reset();
  if (!unit_) return;
  if (unit_->Empty()) {
    unit_.reset();
  } else {
    unit_->pending.release();
  }
}

bool SessionCache::Releasable() const {
  // (The wait timers, once made, are kept; they hold nothing of the session.)
  return started_ && !watch_ && !cache_->LastEarOf(client_id(), this) && !stmts_ && !unit_ && !leader_ && !(shared_wait_ && !shared_wait_->done) &&
         !state_changed_ && !settings_set_ && !pending_setting_change_;
}

void SessionCache::AdjustExecute(std::string& to_origin, std::size_t from) {
  if (!leader_ || leader_->max_rows <= 0 || leader_->max_rows == INT32_MAX || U().row_limit.limit != 0) return;
  // Exactly one Execute frame was appended: its limit is raised by one.
  if (!protocol::PatchExecuteMaxRows(to_origin, from, leader_->max_rows + 1)) return;
  U().row_limit = RowLimit{leader_->max_rows, 0};
  leader_->max_rows = 0;  // once: the unit has one Execute
}

SessionCache::OriginVerdict SessionCache::OnOriginFrame(char tag, std::string_view raw, std::string& batch,
                                                        const OriginConnection& conn) {
  UnitState& u = U();
  OriginVerdict verdict = OriginVerdict::kForward;
  if (u.row_limit.limit != 0) {
    if (tag == 'D' && ++u.row_limit.rows > u.row_limit.limit) verdict = OriginVerdict::kDrop;
    if (tag == 'C' && u.row_limit.rows >= u.row_limit.limit) verdict = OriginVerdict::kSuspend;
    if (tag == 'Z') u.row_limit = RowLimit{};
  }
  if (u.describe_window == DescribeWindow::kOpen) {
    if ((tag == '1' || tag == 't' || tag == 'T' || tag == 'n') && u.describe_answers > 0) {
      --u.describe_answers;
      if ((tag == 'T' || tag == 'n') && u.window_describes == 1 && u.window_describes_unnamed) {
        u.window_result_type = protocol::ResultTypeDigest(tag == 'T' ? raw.substr(5) : std::string_view());
      }
    } else if (tag != 'N' && tag != 'S' && tag != 'A' && tag != link::kControlTag) {
      u.describe_window = DescribeWindow::kNone;  // an error, or anything unexpected
    }
  }
  // The leader's result: capture it for both tiers.
  if (leader_ && !u.pending.empty()) {
    Leader& l = *leader_;
    if (!l.begun) {
      l.begun = true;
      l.usable = cache_->ConnectionUsable(conn, hello_fp());
      if (l.usable) cache::AppendControl(batch, cache::BeginControl{l.digest});
    }
    if (!l.done) {
      cache::ResultCapture::State s = l.capture.Feed(tag, raw);
      if (s == cache::ResultCapture::State::kRejected || !l.usable) {
        if (l.owns_key) cache_->tier().Abandon(l.key);
        l.done = true;
      } else if (s == cache::ResultCapture::State::kComplete && l.shape_pending &&
                 (!l.shape_pending->shape_known || l.shape_pending->retired)) {
        l.done = true;  // its result type is still unknown (or changed): not stored
      } else if (s == cache::ResultCapture::State::kComplete && !l.owns_key && cache_->generation() != l.generation) {
        // A refresh (Put: no flight of its own for the tier to check) that
        // some invalidation overtook: its rows may be from before a write
        // committed since, whose invalidation dropped the entry it would
        // now put back (tests/integration/refresh_race_test.py). Not
        // stored; a later miss fetches again.
        l.done = true;
      } else if (s == cache::ResultCapture::State::kComplete) {
        if (l.shape_pending) cache::SetKeyResultType(l.key, l.shape_pending->shape_digest);
        auto now = std::chrono::steady_clock::now();
        CacheEntry entry;
        entry.messages = l.capture.TakeMessages();
        entry.expires = now + l.ttl;
        entry.stale_until = entry.expires + cache_->options().stale_while_revalidate;
        if (cache_->options().stale_if_error > std::chrono::milliseconds(0)) {
          entry.keep_until = entry.expires + cache_->options().stale_if_error;  // stale-if-error's bound
        }
        entry.database = cache_->database();
        entry.tables = std::move(l.tables);  // the store control names the stored entry's
        const auto expires = entry.expires;
        if (cache_->shared() != nullptr && l.token.valid) cache_->shared()->Put(l.key, entry, l.token);
        if (l.owns_key) {
          cache_->tier().Complete(l.key, std::move(entry));
        } else {
          cache_->tier().Put(l.key, std::move(entry));
        }
        l.done = true;
        std::shared_ptr<const CacheEntry> stored = cache_->tier().Get(l.key);
        if (stored && stored->expires == expires) {
          cache::StoreControl store;
          store.digest = l.digest;
          store.ttl = cache_->ClientTtl(l.ttl);
          store.generation = l.generation;
          store.source = cache_->source();
          cache::AppendStoreControl(batch, store, stored->tables);
        }
      }
    }
  }
  // Writes: invalidate before the write's CommandComplete, and again when its
  // transaction ends (the commit point), telling the Client tiers each time.
  // A write of rows inside a transaction block (the connection's latest
  // ReadyForQuery was 'T' or 'E') is not committed by its CommandComplete:
  // the commit point's invalidation (`txn_written`) is its only one, once
  // for all the block's tables (TPC-B: one instead of nine, issue 26).
  if (tag == 'C' && !u.pending.empty() && u.pending.front().write.any()) {
    const cache::WriteEffect& w = u.pending.front().write;
    const char status = conn.transaction_status();
    if (w.all || w.schema || (status != 'T' && status != 'E')) Emit(cache_->Invalidate(w), batch);
  }
  // A COMMIT's CommandComplete is a commit point even when no ReadyForQuery
  // 'I' follows: COMMIT AND CHAIN (or a COMMIT in a Query that goes on
  // to BEGIN again) leaves the session in a new block. A unit that writes
  // itself keeps `txn_written` for its ReadyForQuery: what it writes after
  // the COMMIT ("COMMIT; UPDATE t ...", merged when it was sent) commits
  // later, so its ReadyForQuery 'I' invalidates again.
  if (tag == 'C' && u.txn_written.any() && raw.size() >= 12 && raw.substr(5, 7) == std::string_view("COMMIT\0", 7)) {
    Emit(cache_->Invalidate(u.txn_written), batch);
    if (u.pending.empty() || !u.pending.front().write.any()) u.txn_written = cache::WriteEffect{};
  }
  if (tag == 'Z' && raw.size() >= 6) {
    const char status = raw[5];
    last_status_ = status;
    if (!u.pending.empty()) {
      const Effect& e = u.pending.front();
      // Connections carry what their sessions did to them: a connection used
      // by a session whose state a key cannot describe, or whose state
      // changed, never stores again; nor does one shared by sessions with
      // different startup fingerprints.
      // A change of ordinary settings is not carried to the next borrower:
      // settings replay gives each unit exactly its own session's settings.
      if ((e.changes_state && !e.settings_only) || state_changed_ || hello_unsupported_) {
        cache_->MarkConnectionDirty(conn);
      }
      u.txn_catalog.Merge(e.catalog);  // completed; settled when its transaction ends
      u.pending.pop_front();
    }
    if (status == 'I' && u.txn_catalog.any()) {
      cache_->SettleCatalogChange(u.txn_catalog);
      u.txn_catalog = cache::CatalogChange{};
    }
    if (status == 'I' && u.txn_written.any()) {
      Emit(cache_->Invalidate(u.txn_written), batch);
      u.txn_written = cache::WriteEffect{};
    }
    if (leader_ && u.pending.empty()) EndLeader(/*abandon=*/true);
  }
  return verdict;
}

}  // namespace hyperpool::endpoint
