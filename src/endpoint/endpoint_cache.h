// The Endpoint's cache tier (docs/architecture.md, "Query cache"): the shield
// in front of the origin, and the authority on cacheability (it alone sees
// the origin's catalog).
//
// EndpointCache: one per Endpoint, confined to the Endpoint's executor
// (Report() is the only thread-safe call). Holds the MemoryCache, the catalog
// snapshot (refreshed every max_age and after DDL), the invalidation
// generation, the per-origin-connection state owners and the registry of
// sessions used to broadcast invalidations to every Client.
//
// SessionCache: one per Endpoint session, with three hooks the session calls:
//   Intercept()     before a unit of work acquires a connection: answers it
//                   from the tier (hit, stale, or a coalesced follower) or
//                   makes the session the leader that fetches it;
//   OnForward()     for every frontend frame sent to the origin: tracks
//                   writes, session-state changes, statements and portals;
//   OnOriginFrame() for every origin frame before it is forwarded: captures
//                   the leader's result, invalidates on a write's
//                   CommandComplete / the transaction's end, and inserts the
//                   link control messages for the Client tier.
#ifndef HYPERPOOL_ENDPOINT_ENDPOINT_CACHE_H_
#define HYPERPOOL_ENDPOINT_ENDPOINT_CACHE_H_

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "cache/cacheability.h"
#include "cache/catalog_overlay.h"
#include "cache/decision_memo.h"
#include "cache/memory_cache.h"
#include "cache/result_store.h"
#include "cache/shared_cache.h"
#include "cache/tier.h"
#include "common/intern_table.h"
#include "common/small_fifo.h"
#include "endpoint/session_settings.h"
#include "hyperpool/options.h"
#include "pool/pool.h"
#include "protocol/frame_reader.h"
#include "protocol/frontend_messages.h"

namespace hyperpool::endpoint {

class ClientStatements;
struct StatementInfo;

class OriginConnection;
class SessionCache;

// Why a unit of work was not considered (EndpointCacheReport::bypass).
enum class BypassCause : uint8_t {
  kOff,            // the tier is off, or the session turned it off (hyperpool.cache)
  kSessionState,   // the session changed state a key cannot describe (SET ROLE, DISCARD, ...)
  kStartup,        // startup parameters a key cannot describe
  kServeGate,      // the WAL feed says no
  kUnitChanges,    // the unit changes session state, or asks for no caching (hint)
  kZeroTtl,        // hyperpool.cache_ttl = 0
};
inline constexpr std::size_t kBypassCauses = 6;
inline constexpr std::size_t kReasons = static_cast<std::size_t>(cache::Reason::kOversizedResult) + 1;

// Counters of the Endpoint tier, and the top decisions per query fingerprint.
struct EndpointCacheReport {
  CacheStats tier;
  uint64_t served = 0;          // units answered from the tier (fresh, stale or coalesced)
  uint64_t coalesced_served = 0;  // ... of which waited for a leader
  uint64_t uncacheable = 0;     // candidate units decided uncacheable
  uint64_t bypassed = 0;        // units not considered (disabled, session state, hint)
  std::array<uint64_t, kBypassCauses> bypass{};  // ... by BypassCause
  std::array<uint64_t, kReasons> decided{};     // candidate units by cache::Reason
  uint64_t decided_without_catalog = 0;  // ... decided with no catalog loaded (or after unbounded DDL)
  uint64_t decided_with_changes = 0;     // ... decided while names changed by DDL were not re-read yet
  uint64_t decided_from_memo = 0;        // ... answered by the memo of decisions (cache/decision_memo.h)
  uint64_t invalidations = 0;   // write invalidations (each bumps the generation)
  uint64_t catalog_refreshes = 0;
  uint64_t catalog_reads = 0;  // reads of the origin's catalog started (each five queries)
  // The shared tier (shared_cache.h), when configured.
  bool shared_configured = false;
  cache::SharedCacheStats shared;
  uint64_t shared_served = 0;    // units answered from the shared tier
  uint64_t stale_if_error = 0;   // units answered stale because the origin was unreachable
  std::vector<cache::DecisionStats::Row> top;
};

// Human-readable lines (for `hyperpool serve`'s exit log).
std::string FormatCacheReport(const EndpointCacheReport& report);

// How soon the catalog may be read again after reads that ended with it
// still unknown (a change settled while each ran). The first such re-read
// goes at once; later ones wait 50 ms, doubling up to 1 s. So a change that
// is never settled (a bookkeeping leak in the overlay's counts, as the one
// `BEGIN; DO; DO; COMMIT` had) costs at most a read a second instead of a
// read loop on an origin connection. Decisions meanwhile go to the origin,
// as they do whenever the catalog is unknown.
class CatalogReadPacing {
 public:
  using Clock = std::chrono::steady_clock;
  void Loaded(bool still_unknown) { unknown_loads_ = still_unknown ? unknown_loads_ + 1 : 0; }
  // `loaded_at`: when the latest read ended (EndpointCache::loaded_at_).
  bool Allowed(Clock::time_point now, Clock::time_point loaded_at) const {
    return unknown_loads_ < 2 || now - loaded_at >= Gap();
  }
  std::chrono::milliseconds Gap() const {
    if (unknown_loads_ < 2) return std::chrono::milliseconds(0);
    const uint32_t doublings = std::min<uint32_t>(unknown_loads_ - 2, 5);
    return std::min(std::chrono::milliseconds(50 << doublings), std::chrono::milliseconds(1000));
  }
  uint32_t unknown_loads() const { return unknown_loads_; }

 private:
  uint32_t unknown_loads_ = 0;  // reads in a row that ended unknown
};

class EndpointCache : public std::enable_shared_from_this<EndpointCache> {
 public:
  using Acquire = std::function<asio::awaitable<absl::StatusOr<Lease>>()>;

  // `origin_id` names the origin (host, port, database) in a shared tier
  // that several origins' Endpoints may use. `shared`: the shared tier
  // (null: none; see MakeSharedTier).
  EndpointCache(asio::any_io_executor executor, CacheOptions options, std::string database, std::string role,
                std::size_t pool_max_size, Acquire acquire, std::shared_ptr<cache::SharedCache> shared = nullptr);
  ~EndpointCache();

  // The shared tier for options.redis_url (null when empty), on `executor`.
  static absl::StatusOr<std::shared_ptr<cache::SharedCache>> MakeSharedTier(asio::any_io_executor executor,
                                                                            const CacheOptions& options,
                                                                            std::string origin_id);
  // Closes the shared tier's connections (Endpoint::Stop, on the executor).
  void Stop();

  bool enabled() const { return options_.enabled; }
  const CacheOptions& options() const { return options_; }
  const asio::any_io_executor& executor() const { return executor_; }
  const std::string& database() const { return database_; }
  const std::string& role() const { return role_; }
  Cache& tier() { return *tier_; }
  // The shared tier, or null.
  cache::SharedCache* shared() const { return shared_.get(); }

  // The catalog oracle for the origin's default search_path; nullptr until a
  // snapshot is loaded and after a change no name bounds (until a read that
  // began after it settled). A name DDL touched since the read answers
  // unknown (cache::CatalogOverlay) until a read clears it.
  const cache::VolatilityOracle* Oracle() const {
    if (!oracle_ || overlay_.all_unknown()) return nullptr;
    return overlay_.empty() ? oracle_.get() : &overlay_oracle_;
  }
  // DecideSql(text, context) for a context whose oracle is Oracle(), through
  // this Endpoint's memo of decisions (cache/decision_memo.h), kept per
  // state of the catalog: a snapshot loaded or an overlay change empties it.
  cache::MemoDecision Decide(const cache::SqlText& text, const cache::DecisionContext& context) {
    cache::MemoDecision d =
        decisions_memo_.Decide(text, context, cache::CatalogVersion{catalog_loads_, overlay_.version()});
    if (d.from_memo) ++counters_.decided_from_memo;
    return d;
  }
  // The write tracking's conclusion about `text` (SessionCache::EffectOf)
  // from this Endpoint's memo (cache::EffectMemo), kept per state of the
  // catalog as Decide's; nullptr on a miss, which KeepEffect then fills.
  const cache::MemoEffect* FindEffect(const cache::SqlText& text, bool standard_conforming_strings) {
    return effects_memo_.Find(text, standard_conforming_strings,
                              cache::CatalogVersion{catalog_loads_, overlay_.version()}, Oracle());
  }
  void KeepEffect(cache::MemoEffect effect) { effects_memo_.Keep(std::move(effect)); }
  // A statement that may change the catalog was sent through hyperpool
  // (OpenCatalogChange), and the transaction that ran it ended
  // (SettleCatalogChange): a catalog read clears the change only if it began
  // after the settle (before, it may not see it). Every open is settled once.
  void OpenCatalogChange(const cache::CatalogChange& change) { overlay_.Open(change); }
  void SettleCatalogChange(const cache::CatalogChange& change);
  // A decision needed the catalog: starts a refresh when none is loaded or
  // the loaded one is older than max_age (lazily, so that an origin that only
  // ever sees catalog-free statements is never asked).
  void WantCatalog();
  // DDL (or something that may have run DDL) committed, names unknown: the
  // catalog counts as unknown at once. kFromFeed: a commit the WAL feed saw
  // change no table (DDL, GRANT, ANALYZE, a temporary table, a row lock
  // elsewhere): re-read at most once per kFeedCatalogReadEvery, so an
  // application committing such transactions straight to the origin never
  // makes hyperpool scan the origin's catalog continuously.
  enum class CatalogChange : uint8_t { kThroughHyperpool, kFromFeed };
  void CatalogChanged(CatalogChange source = CatalogChange::kThroughHyperpool);
  // A decision met a relation or function the loaded catalog lacks (made
  // on the origin directly since): refreshes at once (single-flight), unless
  // a refresh it started less than a second ago has already ended (the
  // name is still unknown: a repeated miss). True while a refresh is in
  // flight afterwards: the unit may wait for it (OnRefreshEnd) so that the
  // next one is decided on the new catalog.
  bool NameUnknown();
  // Cancels `timer` when the refresh in flight ends (at once if none is).
  void OnRefreshEnd(std::weak_ptr<asio::steady_timer> timer);

  uint64_t generation() const { return generation_; }
  // This Endpoint instance in the control messages (random, never 0): a
  // Client compares generations only with those of the same source.
  uint64_t source() const { return source_; }
  // Invalidates the tier; returns the control message for the Client tiers
  // (`for_clients` false: a caller that sends none, its tables left out).
  cache::InvalidateControl Invalidate(const cache::WriteEffect& effect, bool for_clients = true);
  // Sends `control` to one live session of every Client other than
  // `except_client`.
  void Broadcast(const cache::InvalidateControl& control, const std::string& except_client, bool remote = false);
  // Whether `client_id`'s Client hears other Clients' writes only on its
  // live links (no watch, other Clients present) and `s` is the last of
  // them: letting it go would leave the Client's tier deaf.
  bool LastEarOf(const std::string& client_id, const SessionCache* s) const;
  // An invalidation another Endpoint published through the shared tier:
  // drops the local entries and tells every Client.
  void OnSharedInvalidation(const cache::SharedInvalidation& inv);
  // The change feed (wal_feed.h): whether cached rows may be served now
  // (null: always). Checked once per candidate unit; the session bypasses
  // the tier (no look-up, no store, nothing marked for the Client) while
  // it says no.
  // `budget`: how long the gate stays open if nothing more arrives; a
  // Client tier keeps what it is told to store no longer than that
  // (ClientTtl), so it never serves past the bound on its own.
  void SetServeGate(std::function<bool()> gate, std::function<std::chrono::milliseconds()> budget) {
    serve_gate_ = std::move(gate);
    serve_budget_ = std::move(budget);
  }
  bool ServeGateOpen() const { return !serve_gate_ || serve_gate_(); }
  std::chrono::milliseconds ClientTtl(std::chrono::milliseconds ttl) const {
    return serve_budget_ ? std::min(ttl, serve_budget_()) : ttl;
  }
  // Tells every Client tier to drop all its rows (the feed fell behind:
  // they serve without asking the Endpoint). The local tiers are kept.
  void DropClientTiers();

  // Whether a result computed on `conn` may be stored under a key built
  // for sessions with startup fingerprint `fingerprint` (the connection was
  // only ever used by sessions with that fingerprint and never had its
  // session state changed).
  bool ConnectionUsable(const OriginConnection& conn, const std::string& fingerprint);
  void MarkConnectionDirty(const OriginConnection& conn);

  // `text` kept once however many sessions hold it (their startup
  // fingerprints and Client ids: apps mostly open many sessions alike);
  // entries no session holds any more are pruned as the table grows.
  std::shared_ptr<const std::string> Intern(std::string text);

  // Sessions by the Client they came from (SessionCache::client_id):
  // Register at construction (no Client named yet), Rekey when Start names
  // it, Unregister at destruction.
  void Register(SessionCache* s);
  void Rekey(SessionCache* s, const std::string& old_client_id);
  void Unregister(SessionCache* s);
  // Invalidation watches (cache/tier.h, kWatchParam): Broadcast prefers them
  // over a Client's sessions.
  void AddWatch(SessionCache* s);
  void RemoveWatch(SessionCache* s);
  std::size_t watches() const { return watches_.size(); }

  // `normalized` is called only for a fingerprint the table has not seen.
  void RecordDecision(uint64_t fingerprint, cache::Reason reason,
                      absl::FunctionRef<std::string()> normalized);
  void NoteServed(bool coalesced);
  void NoteBypassed(BypassCause cause);
  // A candidate was decided with `oracle` (Oracle() at the time).
  void NoteDecidedWith(const cache::VolatilityOracle* oracle);
  void NoteSharedServed() { ++counters_.shared_served; }
  void NoteStaleIfError() { ++counters_.stale_if_error; }
  // Copies the counters for Report() (call after each tier operation).
  void Publish();
  // A counter changed with no Publish() after it (a decision, a bypass):
  // published within kLatePublish. Without it, a session whose units only
  // bypass the tiers (the WAL gate closed, session state) or are decided
  // uncacheable showed none of them until some tier operation or its end.
  // One timer per burst, none while nothing changed.
  void PublishSoon();
  static constexpr std::chrono::milliseconds kLatePublish{50};
  // Thread-safe.
  EndpointCacheReport Report(std::size_t top) const;

 private:
  asio::awaitable<void> Refresh(std::shared_ptr<EndpointCache> self);
  void StartRefresh();
  static std::string ConnKey(const OriginConnection& conn);

  asio::any_io_executor executor_;
  CacheOptions options_;
  std::string database_;
  std::string role_;
  std::size_t max_tracked_connections_;
  Acquire acquire_;
  std::unique_ptr<Cache> tier_;  // options.factory's, else a MemoryCache
  std::shared_ptr<cache::SharedCache> shared_;

  std::unique_ptr<cache::CatalogSnapshot> snapshot_;
  std::unique_ptr<cache::VolatilityOracle> oracle_;
  cache::CatalogOverlay overlay_;  // what changed since oracle_ was read
  cache::OverlayOracle overlay_oracle_{nullptr, &overlay_};  // oracle_ seen through overlay_
  uint64_t catalog_loads_ = 0;  // snapshots loaded (oracle_ replaced)
  cache::DecisionMemo decisions_memo_;
  cache::EffectMemo effects_memo_;
  bool refreshing_ = false;
  std::chrono::steady_clock::time_point loaded_at_{};
  std::vector<std::weak_ptr<asio::steady_timer>> refresh_waiters_;  // OnRefreshEnd
  void EndRefresh();  // refreshing_ = false, wakes refresh_waiters_
  std::chrono::steady_clock::time_point last_failure_{};
  std::chrono::steady_clock::time_point last_unknown_refresh_{};  // NameUnknown's rate limit
  std::chrono::steady_clock::time_point refresh_started_{};
  bool feed_changed_ = false;  // invalidated by the feed since the last read (CatalogChanged)
  bool RefreshAllowed(std::chrono::steady_clock::time_point now) const;
  CatalogReadPacing pacing_;  // reads that end unknown, one after another (RefreshAllowed)

  std::unique_ptr<asio::steady_timer> publish_timer_;  // PublishSoon (made at its first use)
  bool publish_armed_ = false;

  InternTable<std::string> interned_;  // Intern

  std::function<bool()> serve_gate_;
  std::function<std::chrono::milliseconds()> serve_budget_;
  uint64_t generation_ = 1;
  uint64_t source_ = 0;
  std::unordered_map<std::string, std::string> conn_owner_;
  std::deque<std::string> conn_order_;
  std::unordered_set<SessionCache*> sessions_;
  std::unordered_set<SessionCache*> watches_;  // a subset of sessions_
  // sessions_ by Client: Broadcast reaches each Client once in O(Clients),
  // where walking every session made each write cost O(sessions) (10,000
  // idle clients of one serve are 10,000 sessions of one Client).
  struct ClientSessions {
    std::unordered_set<SessionCache*> sessions;  // not watches
    std::unordered_set<SessionCache*> watches;
  };
  std::unordered_map<std::string, ClientSessions> clients_;
  // Files a registered session under its Client (a watch or not), and takes
  // it out from under `client_id`.
  void Index(SessionCache* s);
  void Unindex(SessionCache* s, const std::string& client_id);

  mutable std::mutex report_mu_;
  EndpointCacheReport counters_;  // executor-side counters (tier copied in Publish)
  EndpointCacheReport published_;  // guarded by report_mu_
  cache::DecisionStats decisions_;  // guarded by report_mu_
};

class SessionCache {
 public:
  // `deliver` appends control bytes to the session's local answers (for
  // broadcast invalidations from other sessions).
  // It runs on the tier's executor (`cache->executor()`, the Endpoint's).
  SessionCache(std::shared_ptr<EndpointCache> cache, std::function<void(std::string)> deliver);
  ~SessionCache();
  SessionCache(const SessionCache&) = delete;
  SessionCache& operator=(const SessionCache&) = delete;

  // Call once the hello is known (before the first frame).
  void Start(const std::vector<std::pair<std::string, std::string>>& hello);
  // Instead of Start, for an invalidation watch link (cache/tier.h): from
  // now on every invalidation broadcast to this session's Client is
  // delivered here. Returns the answer's ParameterStatus frames (source,
  // generation now), to be sent before ReadyForQuery.
  std::string StartWatch(const std::vector<std::pair<std::string, std::string>>& hello);
  bool watch() const { return watch_; }

  // The session's settings as the Endpoint captures them (transaction mode,
  // session_settings.h). With a source, a session whose own SET / RESET
  // changes only ordinary settings keeps using the tier, keyed by its
  // captured settings, instead of bypassing it for the rest of its life.
  // `tracked()` says whether a change made now will be captured (false
  // while the session is pinned). Both must outlive this object.
  // `keep_key`: the same settings object again (a core that slept and woke:
  // SessionCore::Dormant), or none for a while: the key stays as it was
  // built, and a capture made since it was built still re-keys the next
  // unit (RefreshSettingsKey).
  void TrackSettings(const SessionSettings* settings, std::function<bool()> tracked, bool keep_key = false);
  // The session's statements (statement_registry.h; must outlive this
  // object). A unit that Binds a statement prepared earlier is a candidate
  // only when its name maps there to a statement that is not retired and
  // whose result type is known: that result type is part of the key
  // (cache::CandidateUnit::result_type). Without it no such unit is.
  void set_client_statements(const ClientStatements* statements) { client_statements_ = statements; }

  // `frame` starts a unit of work; `rest` are the input bytes after it.
  // `idle`: nothing outstanding, transaction status 'I', nothing buffered
  // for the origin. kServed: the unit was answered into `local_out`;
  // kServedUntilSync: an extended unit was, and the caller discards its
  // messages up to the Sync, which it answers with ReadyForQuery('I').
  // `text`: the frame's Query / Parse text as the session decoded it (its
  // analysis shared with the other passes), or null. Decides at once in
  // all but two cases: the shared tier must be asked, or another session
  // leads the fetch of the same key; then kWait, and the session calls
  // FinishIntercept (which may suspend) for the answer. The unit's frames
  // must stay as they are until then.
  enum class InterceptResult { kNotServed, kServed, kServedUntilSync, kWait };
  InterceptResult Intercept(const protocol::Frame& frame, const cache::SqlText* text, std::string_view rest, bool idle,
                            std::string& local_out);
  // The session is idle (the Endpoint's sweep): the per-unit state
  // (UnitState) is given back when it holds nothing a later read would see,
  // else its request queue gives back its storage (both are kept between
  // units otherwise).
  void ReleaseIdleBuffers();
  // After ReleaseIdleBuffers: nothing here that the same hello's new
  // session would not have (no statement, unit, look-up or wait, no state
  // or setting change seen): SessionCore::Releasable's part. Whether it
  // wrote goes with the offer (protocol::ReleaseControl::wrote).
  bool Releasable() const;
  bool wrote() const { return wrote_; }
  // After kWait: the decision (never kWait), as Intercept's.
  asio::awaitable<InterceptResult> FinishIntercept(std::string& local_out);
  void OnForward(const protocol::Frame& frame, const cache::SqlText* text = nullptr);
  // The origin skipped the `units` oldest Queries / FunctionCalls forwarded
  // (an extended message before them failed): they end with no
  // ReadyForQuery of their own.
  void OnSkipped(std::size_t units);
  // The session appended an Execute to `to_origin` at `from`. When it is the
  // row-limited Execute of a unit this session fetches for the tier
  // (asyncpg's fetchrow: limit 1), its limit is raised by one: a result that
  // then completes is the whole result and is stored, while OnOriginFrame
  // gives the client exactly what its own limit gives (the extra row
  // dropped, CommandComplete turned into PortalSuspended when the limit was
  // reached). The unit ends with a Sync outside a transaction, which closes
  // the portal: nothing else could fetch the row read ahead, and a
  // cacheable statement has no side effects to run once more.
  void AdjustExecute(std::string& to_origin, std::size_t from);
  // What the session does with an origin frame it would forward.
  enum class OriginVerdict { kForward, kDrop, kSuspend };
  OriginVerdict OnOriginFrame(char tag, std::string_view raw, std::string& batch, const OriginConnection& conn);
  // The unit this session leads could not get an origin connection
  // (`status`, from the pool): with stale-if-error on, a kept entry past its
  // max age answers it into `local_out` (as Intercept would); kNotServed
  // when the error should be reported. Never inside a transaction (a leader
  // exists only for units that start idle) or after the session's own write.
  // Ends the unit's fetch either way (its followers go to the origin).
  InterceptResult ServeStaleOnError(const absl::Status& status, std::string& local_out);
  // The unit failed before reaching the origin: ends its fetch.
  void AbandonUnit() { EndLeader(/*abandon=*/true); }

  const std::string& client_id() const { return client_id_ ? *client_id_ : Empty(); }
  void Deliver(std::string bytes) {
    if (deliver_) deliver_(std::move(bytes));
  }

 private:
  struct Effect {
    cache::WriteEffect write;
    bool changes_state = false;
    bool settings_only = false;  // every state change is an ordinary SET/RESET
    cache::CatalogChange catalog;  // what it may change in the catalog (opened when sent)
    bool own_write = false;  // may write (not just a read judged conservatively)
    void Merge(const Effect& o) {
      write.Merge(o.write);
      own_write = own_write || o.own_write;
      settings_only = (!changes_state || settings_only) && (!o.changes_state || o.settings_only);
      changes_state = changes_state || o.changes_state;
      settings_only = settings_only && changes_state;
      catalog.Merge(o.catalog);
    }
  };
  struct Leader {
    std::string key;
    uint64_t digest = 0;
    uint64_t generation = 0;
    std::vector<std::string> tables;
    std::chrono::milliseconds ttl{0};
    cache::ResultCapture capture;
    bool begun = false;
    bool usable = true;
    bool done = false;  // Complete()/Abandon() called; skip to the unit's end
    // False for a unit that must reach the origin although its key is
    // cached (it creates a named statement): its result is Put, not
    // Complete()d, and nothing is abandoned.
    bool owns_key = true;
    // The shared tier's generations read before the fetch (Put with them).
    cache::SharedToken token;
    // stale-if-error: an entry past its max age kept within the bound, and
    // how to replay it.
    std::shared_ptr<const CacheEntry> fallback;
    cache::ReplayRequest replay;
    cache::ProtocolForm form = cache::ProtocolForm::kSimple;
    int32_t max_rows = 0;  // the unit's Execute row limit (0: none): AdjustExecute
    // Lookup::shape_pending: `key` ends with a placeholder result type,
    // set from the statement's shape when the result is stored (nothing is
    // stored if it is still unknown or the statement was retired).
    std::shared_ptr<const StatementInfo> shape_pending;
    explicit Leader(std::size_t max) : capture(max) {}
  };
  // The client's own row limit on a limited Execute raised by AdjustExecute,
  // until the unit's ReadyForQuery.
  struct RowLimit {
    int32_t limit = 0;  // 0: none active
    int64_t rows = 0;   // DataRows the origin sent so far
  };

  Effect EffectOf(const cache::SqlText& text, bool apply_settings);
  // A unit that changes session state was forwarded.
  void NoteStateChange(const Effect& e);
  // Before a unit starts idle: re-keys by the captured settings.
  void RefreshSettingsKey();
  InterceptResult TryStaleOnError(const absl::Status& status, std::string& local_out);
  // Answers the unit from `entry` into `local_out` (kServed or
  // kServedUntilSync), or kNotServed. `valid_at`: a generation at which
  // the entry was known current (now, for a hit; when a follower was woken
  // with it; when a look-up began), sent with its store control so that a
  // Client tier which has seen a later invalidation of its tables refuses
  // it (the current generation for an entry handed over earlier made a
  // Client keep rows from before an acknowledged write).
  InterceptResult Serve(const std::shared_ptr<const CacheEntry>& entry, cache::ProtocolForm form,
                        cache::ReplayRequest replay, uint64_t digest, uint64_t valid_at, std::string& local_out);
  // A look-up in progress (Intercept -> FinishIntercept).
  struct Lookup {
    enum class Wait : std::uint8_t { kNone, kShared, kFollower, kCatalog };
    std::string key;
    uint64_t digest = 0;
    std::vector<std::string> tables;
    cache::ProtocolForm form = cache::ProtocolForm::kSimple;
    cache::ReplayRequest replay;
    bool refresh_only = false;  // a hit still goes to the origin (a named Parse, or after a Describe flight)
    // A Bind of a statement whose result type is not known yet (its shape
    // is learnt on its first run): the unit goes to the origin, and its
    // result is stored under the key of the shape it turned out to have.
    std::shared_ptr<const StatementInfo> shape_pending;
    bool waited = false;
    int round = 0;
    Wait wait = Wait::kNone;
  };
  InterceptResult Step(std::string& local_out);
  // A refresh_only look-up that found an entry or a fetch in flight: the
  // unit goes to the origin as a mark-only leader (never served, never waits).
  InterceptResult RefreshOnly();
  // Intercept's two preliminaries: a named Parse's statement noted; the
  // per-unit state dropped when the session is idle.
  void NoteNamedParse(const protocol::Frame& frame, const cache::SqlText* text);
  void ResetAtIdle();
  // The shared tier's answer for `key` (the leader's look-up, bounded by
  // its timeout): a current entry, or null with leader_->token set.
  asio::awaitable<std::shared_ptr<const CacheEntry>> LookupShared(const std::string& key,
                                                                  const std::vector<std::string>& tables);
  void EndLeader(bool abandon);
  // A frontend frame of a Parse/Describe flight ('P', 'D' statement; 'x'
  // anything else closes the window).
  void NoteDescribeWindow(char what);
  // Remembers a named Parse's text (Statements::texts).
  void RecordParse(const protocol::Parse& p);
  bool DescribeWindowReady() const;
  void Emit(const cache::InvalidateControl& control, std::string& batch);
  std::chrono::milliseconds Ttl() const;
  // The session's standard_conforming_strings (on unless it set it off).
  bool StandardConformingStrings() const;

  // The timer a follower or a shared-tier look-up waits on, made on first
  // use (most sessions never wait: an idle one keeps none).
  asio::steady_timer& WaitTimer();

  std::shared_ptr<EndpointCache> cache_;
  std::unique_ptr<asio::steady_timer> wait_timer_;
  uint64_t last_wait_ = 0;  // the latest follower wait registered (Step): only its waiter wakes the unit
  // A unit waiting for the catalog refresh an unknown name started.
  std::shared_ptr<asio::steady_timer> catalog_timer_;
  std::function<void(std::string)> deliver_;

  bool started_ = false;
  bool watch_ = false;  // an invalidation watch (StartWatch)
  // The startup fingerprint and the Client's id, shared with the Endpoint's
  // other sessions that have the same (EndpointCache::Intern); null before Start.
  std::shared_ptr<const std::string> hello_fp_;
  const std::string& hello_fp() const { return hello_fp_ ? *hello_fp_ : Empty(); }
  static const std::string& Empty();
  bool hello_unsupported_ = false;
  std::shared_ptr<const std::string> client_id_;
  cache::SessionCacheSettings settings_;
  bool state_changed_ = false;
  bool wrote_ = false;  // the session sent a write (no stale-if-error for it)
  bool settings_set_ = false;  // a SET / RESET of hyperpool.* changed settings_ (Releasable)
  // A shared-tier look-up in flight (alive=false once this object is gone).
  struct SharedWait {
    bool alive = true;
    bool done = false;
    std::shared_ptr<const CacheEntry> entry;
    cache::SharedToken token;
    asio::steady_timer* timer = nullptr;
  };
  std::shared_ptr<SharedWait> shared_wait_;
  // TrackSettings: the source, and the capture count hello_fp_ was built at.
  const SessionSettings* tracked_settings_ = nullptr;
  std::function<bool()> settings_tracked_;
  std::uint64_t fp_captures_ = 0;
  // A settings change was forwarded at capture count `pending_captures_`;
  // until a capture follows, the key is not known (and writes are imprecise).
  bool pending_setting_change_ = false;
  std::uint64_t pending_captures_ = 0;

  std::unique_ptr<Leader> leader_;
  // Settles every catalog change opened and not settled yet (the session
  // ends, or its outstanding requests were answered without the origin).
  void SettleOpenCatalogChanges();
  // The text and declared types of each named statement the session parsed
  // (to key units that Bind it without a Parse).
  struct StatementText {
    std::string sql;
    std::vector<uint32_t> types;
    bool poisoned = false;  // parsed twice before a Close: not resolved
    // A named statement's text, analysed once for all the units that Bind
    // it (views `sql`: the map's nodes do not move, `sql` is never
    // reassigned); made by the first such unit, for texts up to
    // kMaxAnalysedStatementBytes.
    std::unique_ptr<cache::SqlText> analysed;
  };
  static constexpr size_t kMaxAnalysedStatementBytes = 4096;
  // What the extended protocol told of the session's statements and
  // portals: made at the first Parse or Bind (a session that only sends
  // simple Queries keeps none: about 240 bytes), given back at the idle
  // sweep once it holds nothing (Empty).
  struct Statements {
    std::unordered_map<std::string, Effect> effects;       // by statement name
    std::unordered_map<std::string, std::string> portals;  // portal -> statement name
    std::unordered_map<std::string, StatementText> texts;  // named statements
    // The unnamed statement's text, while the last Parse('') is known to
    // have been forwarded (a simple Query replaces it).
    StatementText unnamed_text;
    bool unnamed_known = false;
    bool Empty() const { return effects.empty() && portals.empty() && texts.empty() && !unnamed_known; }
  };
  std::unique_ptr<Statements> stmts_;
  Statements& S() {
    if (!stmts_) stmts_ = std::make_unique<Statements>();
    return *stmts_;
  }
  // A flight of only Parse / Describe(statement) / Flush, sent between units
  // (see Intercept): open while it lasts, `describe_answers` still due.
  enum class DescribeWindow : uint8_t { kNone, kOpen };

  // What a session holds only while it works: made at its first use, and
  // given back at the idle sweep when it holds nothing (ReleaseIdleBuffers),
  // so that an idle session keeps none of it (about 430 bytes).
  struct UnitState {
    std::optional<Lookup> lookup;  // a look-up in progress
    RowLimit row_limit;
    // A follower's wait.
    std::string wait_key;
    uint64_t wait_id = 0;
    bool woken = false;
    std::shared_ptr<const CacheEntry> woken_entry;
    uint64_t woken_generation = 0;  // the Endpoint's generation when woken with it
    // Writes and state changes per request sent (Query, Sync, FunctionCall),
    // answered in order by the origin's ReadyForQuery.
    SmallFifo<Effect> pending;
    Effect building;  // extended-query messages since the last Sync
    cache::WriteEffect txn_written;
    // Catalog changes whose statements completed in the transaction still
    // open: settled at its end (OnOriginFrame).
    cache::CatalogChange txn_catalog;
    DescribeWindow describe_window = DescribeWindow::kNone;
    int describe_answers = 0;
    // The window's Describes, and the result type the origin described when
    // it held exactly one, of the unnamed statement (0 otherwise): what the
    // driver holds for the Bind that follows (CandidateUnit::result_type).
    int window_describes = 0;
    bool window_describes_unnamed = false;
    uint64_t window_result_type = 0;
    // Nothing in it that a later read would see: dropping it and making it
    // again later changes nothing.
    bool Empty() const;
  };
  // A forwarded Query's or Execute's effect: the catalog change it opens,
  // the session state it changes, the writes it invalidates at once and
  // holds for the transaction's end.
  void NoteRun(const Effect& e, UnitState& u);
  std::unique_ptr<UnitState> unit_;

 public:
  // For tests: the per-unit state is held (made, and not given back yet).
  bool holds_unit_state() const { return unit_ != nullptr; }
  bool holds_statements() const { return stmts_ != nullptr; }

 private:
  UnitState& U() {
    if (!unit_) unit_ = std::make_unique<UnitState>();
    return *unit_;
  }
  // The session's statement names as the statement registry maps them
  // (StatementSession): which result type each one's driver holds.
  const ClientStatements* client_statements_ = nullptr;
  char last_status_ = 'I';  // the origin's latest ReadyForQuery status
};

}  // namespace hyperpool::endpoint

#endif  // HYPERPOOL_ENDPOINT_ENDPOINT_CACHE_H_
