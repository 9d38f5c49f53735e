// SessionCache (endpoint_cache.h), the Endpoint tier's decision for a unit
// of work: Intercept (a synchronous look-up: hit, stale, a leader's fetch,
// or a wait), Step (one round of the look-up), FinishIntercept (the waits
// for the shared tier and for another session leading the same fetch) and
// Serve (a stored result replayed as the unit's answers). The rest of the
// tier is endpoint_cache.cc.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>

#include "endpoint/endpoint_cache.h"
#include "endpoint/statement_registry.h"
#include "protocol/codec.h"
#include "protocol/link_protocol.h"

namespace hyperpool::endpoint {
namespace {

constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);
// A follower waits at most this long for its leader (Hyperdrive's max query
// duration), then goes to the origin itself.
constexpr std::chrono::seconds kFollowerWait{60};
// A unit that met a name the catalog lacks waits at most this long for the
// refresh it started.
constexpr std::chrono::seconds kCatalogWait{2};
constexpr std::string_view kReadyIdle("Z\0\0\0\5I", 6);

}  // namespace

SessionCache::InterceptResult SessionCache::Serve(const std::shared_ptr<const CacheEntry>& entry,
                                                 cache::ProtocolForm form, cache::ReplayRequest r, uint64_t digest,
                                                 uint64_t valid_at, std::string& local_out) {
  std::string out;
  cache::AppendControl(out, cache::BeginControl{digest});
  if (form == cache::ProtocolForm::kExtended) r.sync = false;
  if (!cache::AppendReplay(entry->messages, r, out).ok()) return InterceptResult::kNotServed;
  if (form == cache::ProtocolForm::kSimple) {
    if (out.size() < kReadyIdle.size() || std::string_view(out).substr(out.size() - kReadyIdle.size()) != kReadyIdle) {
      return InterceptResult::kNotServed;
    }
    out.resize(out.size() - kReadyIdle.size());
  }
  auto now = std::chrono::steady_clock::now();
  cache::StoreControl store;
  store.digest = digest;
  store.ttl = cache_->ClientTtl(entry->expires > now
                                    ? std::chrono::duration_cast<std::chrono::milliseconds>(entry->expires - now)
                                    : std::chrono::milliseconds(0));
  store.generation = valid_at;
  store.tables = entry->tables;
  store.source = cache_->source();
  cache::AppendControl(out, store);
  if (form == cache::ProtocolForm::kSimple) out.append(kReadyIdle);
  local_out += out;
  // Extended: the unit's remaining frames are discarded up to its Sync,
  // which the session answers with ReadyForQuery('I').
  return form == cache::ProtocolForm::kSimple ? InterceptResult::kServed : InterceptResult::kServedUntilSync;
}

void SessionCache::NoteNamedParse(const protocol::Frame& frame, const cache::SqlText* text) {
  // A unit of named Parses up to a Sync is answered without the origin
  // (statement_session.h) and never forwarded: its statements are known
  // from here, so that Binds of them are keyed and their writes tracked.
  auto p = protocol::DecodeParse(frame.payload);
  if (!p.ok() || p->statement.empty()) return;
  RecordParse(*p);
  auto [it, inserted] = S().effects.try_emplace(std::string(p->statement));
  if (inserted) {
    cache::SqlText own(text != nullptr ? std::string_view() : p->query);
    it->second = EffectOf(text != nullptr ? *text : own, /*apply_settings=*/false);
  }
}

void SessionCache::ResetAtIdle() {
  // Whatever was outstanding has been answered (possibly locally, when the
  // origin was lost or no connection could be had).
  if (leader_) EndLeader(/*abandon=*/true);
  SettleOpenCatalogChanges();
  U().pending.clear();
  U().row_limit = RowLimit{};  // a unit that ended without its ReadyForQuery (origin lost)
  U().building = Effect{};
  U().txn_written = cache::WriteEffect{};
}

SessionCache::InterceptResult SessionCache::Intercept(const protocol::Frame& frame, const cache::SqlText* text,
                                                     std::string_view rest, bool idle, std::string& local_out) {
  UnitState& u = U();
  if (frame.tag == 'P') NoteNamedParse(frame, text);
  if (idle) ResetAtIdle();
  // After a Parse/Describe(statement) flight whose answers have all come
  // (postgres.js: Parse + Describe + Flush, then Bind + Execute + Sync), a
  // Bind starts the rest of that implicit transaction: its result may be
  // stored, but it is never answered from the tier (the origin must see the
  // Sync that ends the transaction the Parse began).
  // (OnForward opens and closes the window.)
  const bool after_describe = !idle && frame.tag == 'B' && DescribeWindowReady();
  if (!idle && !after_describe) return InterceptResult::kNotServed;
  if (frame.tag != 'Q' && frame.tag != 'P' && frame.tag != 'B') return InterceptResult::kNotServed;
  RefreshSettingsKey();
  if (!cache_->enabled() || !settings_.enabled || state_changed_ || hello_unsupported_ || !cache_->ServeGateOpen()) {
    cache_->NoteBypassed(!cache_->enabled() || !settings_.enabled ? BypassCause::kOff
                         : state_changed_                         ? BypassCause::kSessionState
                         : hello_unsupported_                     ? BypassCause::kStartup
                                                                  : BypassCause::kServeGate);
    return InterceptResult::kNotServed;
  }
  cache::CandidateUnit unit;
  std::string_view bytes(frame.raw.data(), frame.raw.size() + rest.size());
  // A unit without a Parse runs one of the session's named statements: keyed
  // by its text (the unnamed statement is not resolved: a unit answered here
  // skips its Parse, so what the session's unnamed statement is may differ).
  StatementText* named = nullptr;  // the named statement the unit Binds, if any
  // One pointer captured: the std::function holds it without allocating.
  struct LookupState {
    SessionCache* self;
    bool after_describe;
    StatementText** named;
    std::shared_ptr<const StatementInfo>* shape_pending;
  };
  std::shared_ptr<const StatementInfo> shape_pending;
  LookupState state{this, after_describe, &named, &shape_pending};
  const cache::StatementLookup lookup = [s = &state](std::string_view name, std::string_view* sql,
                                                     std::vector<uint32_t>* types, uint64_t* result_type) {
    SessionCache* const self = s->self;
    Statements* st = self->stmts_.get();
    if (st == nullptr) return false;  // no Parse seen: no statement to key
    if (name.empty() && s->after_describe && st->unnamed_known) {
      // Parsed in this very transaction: that Parse reached the origin,
      // and the driver holds what the window's Describe answered.
      *sql = st->unnamed_text.sql;
      *types = st->unnamed_text.types;
      *result_type = self->U().window_result_type;
      return true;
    }
    if (name.empty() || self->client_statements_ == nullptr) return false;
    auto it = st->texts.find(std::string(name));
    if (it == st->texts.end() || it->second.poisoned) return false;
    // The result type the driver was told for this name: a retired
    // statement (its result type changed) must reach the origin, which
    // fails it with 0A000 as PostgreSQL does, whatever is cached.
    const StatementRef* ref = self->client_statements_->Find(name);
    if (ref == nullptr || (*ref)->retired || (*ref)->query() != it->second.sql) return false;
    *result_type = (*ref)->shape_digest;
    if (!(*ref)->shape_known) *s->shape_pending = *ref;  // learnt on this run: stored, never served
    *s->named = &it->second;
    *sql = it->second.sql;
    *types = it->second.types;
    return true;
  };
  if (cache::ParseCandidateUnit(bytes, unit, &lookup) != cache::UnitShape::kCandidate) return InterceptResult::kNotServed;
  // The unit's text is usually this frame's (a Query, or the Parse that
  // starts it): its analysis is shared. A Bind of a named statement has the
  // statement's stored text, analysed once for every Bind of it.
  std::optional<cache::SqlText> stored;
  const cache::SqlText* unit_text_ptr = text;
  if (text == nullptr || text->sql().data() != unit.sql.data() || text->sql().size() != unit.sql.size()) {
    if (named != nullptr && unit.sql.data() == named->sql.data() && unit.sql.size() == named->sql.size() &&
        named->sql.size() <= kMaxAnalysedStatementBytes) {
      if (named->analysed == nullptr) named->analysed = std::make_unique<cache::SqlText>(named->sql);
      unit_text_ptr = named->analysed.get();
    } else {
      unit_text_ptr = &stored.emplace(unit.sql);
    }
  }
  const cache::SqlText& unit_text = *unit_text_ptr;
  cache::StatementEffects fx = cache::ClassifyStatements(unit_text, nullptr);
  if (fx.nocache_hint || fx.changes_session_state || fx.only_cache_settings) {
    cache_->NoteBypassed(BypassCause::kUnitChanges);
    return InterceptResult::kNotServed;
  }
  if (Ttl() <= std::chrono::milliseconds(0)) {
    cache_->NoteBypassed(BypassCause::kZeroTtl);
    return InterceptResult::kNotServed;
  }
  cache::DecisionContext ctx;
  ctx.enabled = true;
  ctx.in_transaction = false;
  ctx.max_query_bytes = cache_->options().max_query_bytes;
  ctx.params = unit.params;
  ctx.oracle = cache_->Oracle();
  ctx.standard_conforming_strings = StandardConformingStrings();
  // DecideSql, from the Endpoint's memo when the text (or one differing
  // only in its integer literals) was decided on the same catalog.
  cache::MemoDecision md = cache_->Decide(unit_text, ctx);
  cache::Decision& d = md.decision;
  if (d.reason != cache::Reason::kNotAQuery) cache_->NoteDecidedWith(ctx.oracle);
  if (md.wants_catalog) cache_->WantCatalog();
  const uint64_t fingerprint = md.analysed ? md.fingerprint : 0;
  auto normalized = [&] { return md.analysed ? unit_text.normalized_text() : std::string(); };
  if (d.unknown_name && cache_->NameUnknown()) {
    // e.g. a table created on the origin directly: this unit waits for the
    // catalog refresh (bounded), then goes to the origin; the next one is
    // decided on the new catalog.
    cache_->RecordDecision(fingerprint, d.reason, normalized);
    u.lookup = Lookup{};
    u.lookup->wait = Lookup::Wait::kCatalog;
    return InterceptResult::kWait;
  }
  cache_->RecordDecision(fingerprint, d.reason, normalized);
  if (!d.cacheable()) return InterceptResult::kNotServed;

  cache::CacheKeyInput in;
  in.database = cache_->database();
  in.role = cache_->role();
  in.settings = nullptr;
  in.sql = unit.sql;
  in.param_types = unit.param_types;
  in.params = unit.params;
  in.result_formats = unit.result_formats;
  in.form = unit.form;
  std::string key;
  key.reserve(cache::CacheKeyReserve(in) + cache::KeySuffixSize(hello_fp()));  // one allocation for both parts
  cache::AppendCacheKey(in, key);
  cache::AppendKeySuffix(key, hello_fp(), unit.describe, settings_, unit.result_type);
  const uint64_t digest = cache::UnitDigest(unit.frames);

  u.lookup = Lookup{};
  u.lookup->key = std::move(key);
  u.lookup->digest = digest;
  u.lookup->tables = std::move(d.tables);
  u.lookup->form = unit.form;
  u.lookup->replay = unit.replay;
  u.lookup->refresh_only = unit.named_parse || after_describe;
  if (shape_pending) {
    // Neither served nor a flight others may wait on: the key's result
    // type is a placeholder until the origin has described the statement.
    u.lookup->shape_pending = std::move(shape_pending);
    return RefreshOnly();
  }
  return Step(local_out);
}

// A unit that must reach the origin although its key is cached or being
// fetched (it holds a named Parse: the statement outlives the unit, and the
// session's statement map learns it only from the forwarded Parse; or it
// follows a Describe flight): it goes there as a "mark-only" leader whose
// result refreshes the entry (Put, not Complete: another session may own
// the key's flight) and is marked for the Client tier as a leader's would be.
SessionCache::InterceptResult SessionCache::RefreshOnly() {
  Lookup& l = *U().lookup;
  leader_ = std::make_unique<Leader>(cache_->options().max_entry_bytes);
  leader_->key = std::move(l.key);
  leader_->digest = l.digest;
  leader_->generation = cache_->generation();
  leader_->tables = std::move(l.tables);
  leader_->ttl = Ttl();
  leader_->owns_key = false;
  leader_->max_rows = l.replay.max_rows;
  leader_->shape_pending = std::move(l.shape_pending);
  cache_->Publish();
  U().lookup.reset();
  return InterceptResult::kNotServed;
}

// One round of the look-up (at most four: a leader that abandoned makes its
// followers look again). kWait leaves U().lookup->wait set for FinishIntercept.
SessionCache::InterceptResult SessionCache::Step(std::string& local_out) {
  Lookup& l = *U().lookup;
  for (; l.round < 4; ++l.round) {
    U().woken = false;
    U().woken_entry.reset();
    // A waiter answers only the wait it was registered for: one left
    // behind (a refresh that went to the origin instead of waiting) once
    // handed another key's rows to this session's next wait.
    const uint64_t wait = ++last_wait_;
    CacheLookup lk = cache_->tier().Lookup(l.key, [this, wait](std::shared_ptr<const CacheEntry> e) {
      if (wait != last_wait_ || !unit_) return;
      U().woken = true;
      U().woken_entry = std::move(e);
      U().woken_generation = cache_->generation();
      if (wait_timer_) wait_timer_->cancel();
    });
    switch (lk.status) {
      case CacheLookupStatus::kHit:
      case CacheLookupStatus::kStale: {
        if (l.refresh_only) return RefreshOnly();
        const InterceptResult served = Serve(lk.entry, l.form, l.replay, l.digest, cache_->generation(), local_out);
        if (served != InterceptResult::kNotServed) cache_->NoteServed(l.waited);
        cache_->Publish();
        U().lookup.reset();
        return served;
      }
      case CacheLookupStatus::kStaleRefresh:
      case CacheLookupStatus::kMissLeader: {
        // The stale entry's refresh runs as this unit's own origin query
        // (while others are served the stale entry).
        // Without a shared tier to ask, the look-up ends here: its key and
        // tables move to the leader instead of being copied.
        // (Not for a unit that must reach the origin anyway: the shared
        // tier's answer would be served in place of its named Parse.)
        const bool ask_shared = cache_->shared() != nullptr && cache_->shared()->up() && !l.refresh_only;
        leader_ = std::make_unique<Leader>(cache_->options().max_entry_bytes);
        // stale-if-error's fallback: an entry past its max age kept within
        // the bound (only that option keeps one: a second look-up of the key
        // otherwise finds nothing).
        if (lk.status == CacheLookupStatus::kMissLeader &&
            cache_->options().stale_if_error > std::chrono::milliseconds(0)) {
          leader_->fallback = cache_->tier().Get(l.key);
        }
        leader_->key = ask_shared ? l.key : std::move(l.key);
        leader_->digest = l.digest;
        leader_->generation = cache_->generation();
        leader_->tables = ask_shared ? l.tables : std::move(l.tables);
        leader_->ttl = Ttl();
        leader_->replay = l.replay;
        leader_->form = l.form;
        leader_->max_rows = l.replay.max_rows;
        if (ask_shared) {
          // Second level: another Endpoint may have fetched it. The local
          // flight stays led by this session meanwhile (followers wait).
          l.wait = Lookup::Wait::kShared;
          return InterceptResult::kWait;
        }
        cache_->Publish();
        U().lookup.reset();
        return InterceptResult::kNotServed;
      }
      case CacheLookupStatus::kMissFollower: {
        // A unit that must reach the origin anyway does not wait for
        // another session's fetch: served from it, its named Parse would
        // never reach the origin (nor the session's statement map), and the
        // driver's next Bind of that name would find no statement (26000).
        if (l.refresh_only) {
          cache_->tier().CancelWait(l.key, lk.wait_id);
          return RefreshOnly();
        }
        U().wait_key = l.key;
        U().wait_id = lk.wait_id;
        l.wait = Lookup::Wait::kFollower;
        return InterceptResult::kWait;
      }
    }
  }
  U().lookup.reset();
  return InterceptResult::kNotServed;
}

asio::awaitable<SessionCache::InterceptResult> SessionCache::FinishIntercept(std::string& local_out) {
  while (U().lookup && U().lookup->wait != Lookup::Wait::kNone) {
    Lookup& l = *U().lookup;
    if (l.wait == Lookup::Wait::kCatalog) {
      if (!catalog_timer_) catalog_timer_ = std::make_shared<asio::steady_timer>(cache_->executor());
      catalog_timer_->expires_after(kCatalogWait);
      cache_->OnRefreshEnd(catalog_timer_);
      (void)co_await catalog_timer_->async_wait(kAsTuple);
      U().lookup.reset();
      co_return InterceptResult::kNotServed;
    }
    if (l.wait == Lookup::Wait::kShared) {
      l.wait = Lookup::Wait::kNone;
      const std::string key = l.key;
      std::shared_ptr<const CacheEntry> e = co_await LookupShared(key, leader_->tables);
      if (!U().lookup || !leader_ || leader_->key != key) co_return InterceptResult::kNotServed;  // the session moved on (cannot happen idle)
      if (e && std::chrono::steady_clock::now() < e->expires) {
        cache_->tier().Complete(key, *e);  // fills the local tier, wakes the followers
        leader_->done = true;
        const uint64_t looked_up_at = leader_->generation;  // (the shared tier's entry may be older than now)
        EndLeader(/*abandon=*/false);
        const InterceptResult served =
            Serve(e, U().lookup->form, U().lookup->replay, U().lookup->digest, looked_up_at, local_out);
        if (served != InterceptResult::kNotServed) {
          cache_->NoteServed(U().lookup->waited);
          cache_->NoteSharedServed();
        }
        cache_->Publish();
        U().lookup.reset();
        co_return served;
      }
      if (e && !leader_->fallback) leader_->fallback = e;  // past max age: for stale-if-error only
      cache_->Publish();
      U().lookup.reset();
      co_return InterceptResult::kNotServed;
    }
    // A follower: the leader's result (or its abandoning) wakes us.
    l.wait = Lookup::Wait::kNone;
    if (!U().woken) {
      asio::steady_timer& timer = WaitTimer();
      timer.expires_after(kFollowerWait);
      (void)co_await timer.async_wait(kAsTuple);
    }
    if (!U().lookup) co_return InterceptResult::kNotServed;
    if (!U().woken) cache_->tier().CancelWait(U().wait_key, U().wait_id);
    U().wait_key.clear();
    U().lookup->waited = true;
    if (U().woken && U().woken_entry) {
      std::shared_ptr<const CacheEntry> e = std::move(U().woken_entry);
      // Served to this unit, which was sent before any write invalidated
      // since; the Client tier gets it as of the wake-up (the leader's
      // result is handed only to the followers of an uninvalidated fetch).
      const InterceptResult served =
          Serve(e, U().lookup->form, U().lookup->replay, U().lookup->digest, U().woken_generation, local_out);
      if (served != InterceptResult::kNotServed) cache_->NoteServed(true);
      cache_->Publish();
      U().lookup.reset();
      co_return served;
    }
    if (!U().woken) {  // timed out: go to the origin, uncoordinated
      U().lookup.reset();
      co_return InterceptResult::kNotServed;
    }
    ++U().lookup->round;  // the leader abandoned: look again (may lead now)
    if (const InterceptResult r = Step(local_out); r != InterceptResult::kWait) co_return r;
  }
  co_return InterceptResult::kNotServed;
}

}  // namespace hyperpool::endpoint
