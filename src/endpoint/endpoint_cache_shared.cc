// The Endpoint tier's second level and its fallback (endpoint_cache.h;
// docs/architecture.md, "Shared cache tier"): making the shared tier on
// Redis, applying other Endpoints' invalidations, the leader's look-up in
// the shared tier, and stale-if-error.
#include <algorithm>
#include <random>

#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "cache/redis_store.h"
#include "endpoint/endpoint_cache.h"

namespace hyperpool::endpoint {
namespace {

constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

void Log(std::string_view line) {
  std::string text = fmt::format("hyperpool endpoint cache: {}\n", line);
  std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace

absl::StatusOr<std::shared_ptr<cache::SharedCache>> EndpointCache::MakeSharedTier(asio::any_io_executor executor,
                                                                                  const CacheOptions& options,
                                                                                  std::string origin_id) {
  if (options.redis_url.empty() || !options.enabled) return std::shared_ptr<cache::SharedCache>();
  absl::StatusOr<cache::RedisAddress> address = cache::ParseRedisUrl(options.redis_url);
  if (!address.ok()) return address.status();
  cache::RedisStoreOptions o;
  o.address = *address;
  o.timeout = options.redis_timeout;
  o.ns = std::move(origin_id);
    std::random_device random;
  o.instance = fmt::format("{:08x}{:08x}{:08x}", random(), random(), random());
  std::shared_ptr<cache::SharedCache> store = cache::RedisStore::Create(std::move(executor), std::move(o));
  return store;
}

void EndpointCache::Stop() {
  if (!shared_) return;
  shared_->SetInvalidationHandler(nullptr);
  shared_->Stop();
}

void EndpointCache::OnSharedInvalidation(const cache::SharedInvalidation& inv) {
  // Another Endpoint's write (or a gap in the subscription): the same as a
  // local write, minus publishing it again.
  cache::InvalidateControl c;
  if (inv.all || inv.database != database_) {
    // A database of our origin we do not serve cannot hold our entries;
    // all=true (or the gap marker, database "") drops everything.
    if (!inv.all) return;
    tier_->InvalidateAll(database_);
    c.all = true;
  } else {
    tier_->InvalidateTables(database_, inv.tables);
    c.tables = inv.tables;
  }
  c.generation = ++generation_;
  c.source = source_;
  ++counters_.invalidations;
  Publish();
  Broadcast(c, std::string(), /*remote=*/true);
}

void EndpointCache::DropClientTiers() {
  cache::InvalidateControl c;
  c.all = true;
  c.rows_only = true;  // statement metadata stays
  c.generation = ++generation_;
  c.source = source_;
  Publish();
  Broadcast(c, std::string(), /*remote=*/true);
}

asio::awaitable<std::shared_ptr<const CacheEntry>> SessionCache::LookupShared(
    const std::string& key, const std::vector<std::string>& tables) {
  auto wait = std::make_shared<SharedWait>();
  wait->timer = &WaitTimer();
  shared_wait_ = wait;
  cache_->shared()->Get(key, cache_->database(), tables,
                        [wait](std::shared_ptr<const CacheEntry> e, cache::SharedToken token) {
                          if (!wait->alive) return;
                          wait->done = true;
                          wait->entry = std::move(e);
                          wait->token = std::move(token);
                          wait->timer->cancel();
                        });
  if (!wait->done) {
    // The store answers (or fails) within its own timeout; this bound only
    // guards against a store that never calls back.
    wait->timer->expires_after(cache_->options().redis_timeout * 4 + std::chrono::milliseconds(10));
    (void)co_await wait->timer->async_wait(kAsTuple);
  }
  wait->alive = false;
  shared_wait_.reset();
  if (leader_) leader_->token = std::move(wait->token);
  co_return std::move(wait->entry);
}

SessionCache::InterceptResult SessionCache::ServeStaleOnError(const absl::Status& status, std::string& local_out) {
  const InterceptResult served = TryStaleOnError(status, local_out);
  // Either way the unit's fetch is over: followers waiting on it go to the
  // origin themselves now, not when this session next starts a unit.
  EndLeader(/*abandon=*/true);
  return served;
}

SessionCache::InterceptResult SessionCache::TryStaleOnError(const absl::Status& status, std::string& local_out) {
  constexpr InterceptResult kNo = InterceptResult::kNotServed;
  if (cache_->options().stale_if_error <= std::chrono::milliseconds(0)) return kNo;
  if (!leader_ || leader_->begun || !leader_->fallback || wrote_ || state_changed_) return kNo;
  // Only "the origin cannot be reached": not a full pool (53300), a
  // shutdown, a cancel or the origin's own error.
  if (status.code() != absl::StatusCode::kUnavailable && status.code() != absl::StatusCode::kDeadlineExceeded) {
    return kNo;
  }
  const auto now = std::chrono::steady_clock::now();
  std::shared_ptr<const CacheEntry> e = leader_->fallback;
  if (now >= std::max(e->keep_until, e->stale_until)) return kNo;
  const uint64_t digest = leader_->digest;
  const cache::ProtocolForm form = leader_->form;
  const cache::ReplayRequest replay = leader_->replay;
  const uint64_t looked_up_at = leader_->generation;
  EndLeader(/*abandon=*/true);  // followers try the origin themselves
  const InterceptResult served = Serve(e, form, replay, digest, looked_up_at, local_out);
  if (served == kNo) return kNo;
  cache_->NoteStaleIfError();
  cache_->Publish();
  Log(fmt::format("origin unreachable ({}): served a result {} ms past its max age (stale-if-error)",
                  std::string(status.message()),
                  std::chrono::duration_cast<std::chrono::milliseconds>(now - e->expires).count()));
  return served;
}

}  // namespace hyperpool::endpoint
