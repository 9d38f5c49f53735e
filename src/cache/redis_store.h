// The shared cache tier on Redis (shared_cache.h), through hiredis' async
// API driven by Asio: hiredis does the RESP encoding and parsing and calls
// back into our adapter (addRead/addWrite/...), which waits on the socket
// with asio::posix::stream_descriptor::async_wait on the owner's executor
// and calls redisAsyncHandleRead/Write when it is ready. No thread of our
// own and no blocking call on a session thread: a command costs a
// non-blocking write and one wake-up for its reply.
//
// Two connections: one for commands (MGET, SET PX, INCR, PUBLISH, in order,
// pipelined) and one SUBSCRIBEd to the invalidation channel. A command not
// answered within `timeout` fails, and so do all after it on that
// connection: it is dropped and made again after `reconnect_every`. While
// either connection is down the store is "down": Gets are skipped (local
// tier and origin only), which is logged once per change of state.
//
// Layout in Redis (prefix "hp1:" + the namespace, which names the origin):
//   e:<key>             entry value (EncodeSharedEntry), PX = until keep_until
//   g:<db>              generation of a database (INCR on InvalidateAll)
//   g:<db>:<table>      generation of a table (INCR on a write)
//   channel hp1:inv     published invalidations: instance, namespace, db, all, tables
#ifndef HYPERPOOL_CACHE_REDIS_STORE_H_
#define HYPERPOOL_CACHE_REDIS_STORE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

#include "absl/status/statusor.h"
#include "cache/shared_cache.h"

struct redisAsyncContext;
struct redisReply;

namespace hyperpool::cache {

struct RedisAddress {
  std::string host = "127.0.0.1";
  uint16_t port = 6379;
  int db = 0;
};
// Parses "redis://host[:port][/db]" (host may be [v6]).
absl::StatusOr<RedisAddress> ParseRedisUrl(std::string_view url);

struct RedisStoreOptions {
  RedisAddress address;
  std::chrono::milliseconds timeout{50};
  std::chrono::milliseconds reconnect_every{250};
  // Separates origins sharing one Redis (keys and invalidations).
  std::string ns;
  // Tells this store's own invalidations from others' (the channel echoes
  // them back).
  std::string instance;
};

// The stored form of an entry: its generations (database, then tables),
// its database and tables, wall-clock expiry times and messages.
std::string EncodeSharedEntry(const CacheEntry& entry, const std::vector<uint64_t>& generations);
struct DecodedSharedEntry {
  CacheEntry entry;
  std::vector<uint64_t> generations;
};
std::optional<DecodedSharedEntry> DecodeSharedEntry(std::string_view value);

class RedisStore final : public SharedCache, public std::enable_shared_from_this<RedisStore> {
 public:
  static std::shared_ptr<RedisStore> Create(asio::any_io_executor executor, RedisStoreOptions options);
  ~RedisStore() override;

  bool up() const override { return cmd_up_ && sub_up_; }
  void Get(const std::string& key, std::string_view database, const std::vector<std::string>& tables,
           GetDone done) override;
  void Put(const std::string& key, const CacheEntry& entry, const SharedToken& token) override;
  void Invalidate(const SharedInvalidation& inv) override;
  void SetInvalidationHandler(std::function<void(const SharedInvalidation&)> handler) override {
    on_invalidation_ = std::move(handler);
  }
  // Thread-safe.
  SharedCacheStats Stats() const override;
  void Stop() override;

  struct Conn;  // one hiredis context and its socket (redis_store.cc)

 private:
  struct Pending;
  using ReplyFn = std::function<void(redisReply*)>;

  RedisStore(asio::any_io_executor executor, RedisStoreOptions options);
  void Connect(bool subscriber);
  void ScheduleReconnect(bool subscriber);
  // `done(nullptr)` on error, timeout or when the command connection is down.
  void Command(std::vector<std::string> args, ReplyFn done);
  void ArmWatchdog();
  void OnWatchdog();
  void OnConnLost(bool subscriber);
  void OnMessage(redisReply* reply);
  void NoteState();
  std::string EntryKey(const std::string& key) const;
  std::string GenKey(std::string_view database, const std::string* table) const;

  asio::any_io_executor executor_;
  RedisStoreOptions options_;
  std::shared_ptr<Conn> cmd_;
  std::shared_ptr<Conn> sub_;
  bool cmd_up_ = false;
  bool sub_up_ = false;
  bool sub_was_up_ = false;  // a reconnected subscription may have missed messages
  bool logged_up_ = false;
  bool logged_once_ = false;
  bool stopped_ = false;
  std::deque<std::shared_ptr<Pending>> pending_;  // command connection, in send order
  asio::steady_timer watchdog_;
  bool watchdog_armed_ = false;
  asio::steady_timer cmd_retry_;
  asio::steady_timer sub_retry_;
  asio::steady_timer sub_connect_timer_;  // the subscription's confirmation is due (options_.timeout)
  std::function<void(const SharedInvalidation&)> on_invalidation_;
  // Counters: written on the executor, read by Stats() from any thread.
  struct Counters {
    std::atomic<bool> up{false};
    std::atomic<uint64_t> errors{0}, hits{0}, misses{0}, stores{0}, published{0}, received{0}, reconnects{0};
  };
  Counters stats_;
};

}  // namespace hyperpool::cache

#endif  // HYPERPOOL_CACHE_REDIS_STORE_H_
