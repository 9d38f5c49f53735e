#include "cache/redis_store.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <cstdio>

#include <asio/post.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <fmt/format.h>

namespace hyperpool::cache {
namespace {

constexpr uint8_t kEntryVersion = 1;
constexpr std::string_view kChannel = "hp1:inv";

void Log(std::string_view line) {
  std::string text = fmt::format("hyperpool shared cache: {}\n", line);
  std::fwrite(text.data(), 1, text.size(), stderr);
}

void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutStr(std::string& out, std::string_view s) {
  PutU64(out, s.size());
  out.append(s);
}
bool GetU64(std::string_view& in, uint64_t& v) {
  if (in.size() < 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  in.remove_prefix(8);
  return true;
}
bool GetStr(std::string_view& in, std::string& s) {
  uint64_t n = 0;
  if (!GetU64(in, n) || n > in.size()) return false;
  s.assign(in.substr(0, n));
  in.remove_prefix(n);
  return true;
}

// Steady-clock times travel as wall-clock milliseconds (another process,
// or another machine, reads them).
int64_t ToWallMs(std::chrono::steady_clock::time_point t) {
  if (t == std::chrono::steady_clock::time_point{}) return 0;
  auto wall = std::chrono::system_clock::now() + (t - std::chrono::steady_clock::now());
  return std::chrono::duration_cast<std::chrono::milliseconds>(wall.time_since_epoch()).count();
}
std::chrono::steady_clock::time_point FromWallMs(int64_t ms) {
  if (ms == 0) return {};
  auto wall = std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(wall - std::chrono::system_clock::now());
}

std::string_view ReplyString(const redisReply* r) {
  if (r == nullptr || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)) return {};
  return std::string_view(r->str, r->len);
}

}  // namespace

absl::StatusOr<RedisAddress> ParseRedisUrl(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  if (!url.starts_with(kScheme)) return absl::InvalidArgumentError("a Redis URL starts with redis://");
  url.remove_prefix(kScheme.size());
  RedisAddress a;
  std::string_view hostport = url.substr(0, url.find('/'));
  std::string_view path = hostport.size() < url.size() ? url.substr(hostport.size() + 1) : std::string_view();
  if (hostport.find('@') != std::string_view::npos) {
    return absl::InvalidArgumentError("Redis URLs with credentials are not supported");
  }
  std::string_view port;
  if (hostport.starts_with('[')) {
    auto close = hostport.find(']');
    if (close == std::string_view::npos) return absl::InvalidArgumentError("unterminated [ in the Redis URL");
    a.host = std::string(hostport.substr(1, close - 1));
    if (close + 1 < hostport.size()) {
      if (hostport[close + 1] != ':') return absl::InvalidArgumentError("bad Redis URL after ]");
      port = hostport.substr(close + 2);
    }
  } else {
    auto colon = hostport.rfind(':');
    a.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) port = hostport.substr(colon + 1);
  }
  if (a.host.empty()) return absl::InvalidArgumentError("the Redis URL has no host");
  if (!port.empty()) {
    unsigned p = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc() || ptr != port.data() + port.size() || p == 0 || p > 65535) {
      return absl::InvalidArgumentError("bad port in the Redis URL");
    }
    a.port = static_cast<uint16_t>(p);
  }
  if (!path.empty()) {
    auto [ptr, ec] = std::from_chars(path.data(), path.data() + path.size(), a.db);
    if (ec != std::errc() || ptr != path.data() + path.size() || a.db < 0) {
      return absl::InvalidArgumentError("bad database number in the Redis URL");
    }
  }
  return a;
}

std::string EncodeSharedEntry(const CacheEntry& e, const std::vector<uint64_t>& generations) {
  std::string out;
  out.reserve(64 + e.messages.size());
  out.push_back(static_cast<char>(kEntryVersion));
  PutU64(out, static_cast<uint64_t>(ToWallMs(e.expires)));
  PutU64(out, static_cast<uint64_t>(ToWallMs(e.stale_until)));
  PutU64(out, static_cast<uint64_t>(ToWallMs(e.keep_until)));
  PutU64(out, generations.size());
  for (uint64_t g : generations) PutU64(out, g);
  PutStr(out, e.database);
  PutU64(out, e.tables.size());
  for (const std::string& t : e.tables) PutStr(out, t);
  PutStr(out, e.messages);
  return out;
}

std::optional<DecodedSharedEntry> DecodeSharedEntry(std::string_view in) {
  if (in.empty() || static_cast<uint8_t>(in[0]) != kEntryVersion) return std::nullopt;
  in.remove_prefix(1);
  DecodedSharedEntry d;
  uint64_t expires = 0, stale = 0, keep = 0, n = 0;
  if (!GetU64(in, expires) || !GetU64(in, stale) || !GetU64(in, keep) || !GetU64(in, n)) return std::nullopt;
  if (n > in.size() / 8) return std::nullopt;  // bounded by what is there, not by what it claims
  d.generations.resize(n);
  for (uint64_t& g : d.generations) {
    if (!GetU64(in, g)) return std::nullopt;
  }
  if (!GetStr(in, d.entry.database) || !GetU64(in, n) || n > in.size() / 8) return std::nullopt;
  d.entry.tables.resize(n);
  for (std::string& t : d.entry.tables) {
    if (!GetStr(in, t)) return std::nullopt;
  }
  if (!GetStr(in, d.entry.messages) || !in.empty()) return std::nullopt;
  d.entry.expires = FromWallMs(static_cast<int64_t>(expires));
  d.entry.stale_until = FromWallMs(static_cast<int64_t>(stale));
  d.entry.keep_until = FromWallMs(static_cast<int64_t>(keep));
  return d;
}

// ---------------------------------------------------------------------------
// The Asio adapter: hiredis asks for read/write interest through ev hooks;
// each interest is one async_wait on the socket, renewed while wanted.
// ---------------------------------------------------------------------------

struct RedisStore::Conn : std::enable_shared_from_this<RedisStore::Conn> {
  explicit Conn(asio::any_io_executor ex) : socket(std::move(ex)) {}
  redisAsyncContext* ctx = nullptr;  // null once hiredis freed it
  asio::posix::stream_descriptor socket;  // the fd is hiredis': released, never closed, by us
  bool subscriber = false;
  bool want_read = false;
  bool want_write = false;
  bool read_waiting = false;
  bool write_waiting = false;
  std::weak_ptr<RedisStore> owner;

  void WaitRead() {
    if (read_waiting || ctx == nullptr || !want_read) return;
    read_waiting = true;
    socket.async_wait(asio::posix::stream_descriptor::wait_read, [self = shared_from_this()](std::error_code ec) {
      self->read_waiting = false;
      if (ec || self->ctx == nullptr || !self->want_read) return;
      redisAsyncHandleRead(self->ctx);
      self->WaitRead();
    });
  }
  void WaitWrite() {
    if (write_waiting || ctx == nullptr || !want_write) return;
    write_waiting = true;
    socket.async_wait(asio::posix::stream_descriptor::wait_write, [self = shared_from_this()](std::error_code ec) {
      self->write_waiting = false;
      if (ec || self->ctx == nullptr || !self->want_write) return;
      redisAsyncHandleWrite(self->ctx);
      self->WaitWrite();
    });
  }

  static Conn* Of(void* p) { return static_cast<Conn*>(p); }
  static void AddRead(void* p) {
    Of(p)->want_read = true;
    Of(p)->WaitRead();
  }
  static void DelRead(void* p) { Of(p)->want_read = false; }
  static void AddWrite(void* p) {
    Of(p)->want_write = true;
    Of(p)->WaitWrite();
  }
  static void DelWrite(void* p) { Of(p)->want_write = false; }
  static void Cleanup(void* p) {
    // hiredis frees the context (and closes the fd) right after this.
    Conn* c = Of(p);
    c->ctx = nullptr;
    c->want_read = c->want_write = false;
    std::error_code ignored;
    if (c->socket.is_open()) (void)c->socket.release();
    if (auto owner = c->owner.lock()) {
      asio::post(owner->executor_, [owner, conn = c->shared_from_this()] {
        if (owner->cmd_ == conn || owner->sub_ == conn) owner->OnConnLost(conn->subscriber);
      });
    }
  }
};

struct RedisStore::Pending {
  std::chrono::steady_clock::time_point deadline;
  ReplyFn done;
  bool finished = false;
  void Finish(redisReply* r) {
    if (finished) return;
    finished = true;
    ReplyFn fn = std::move(done);
    if (fn) fn(r);
  }
};

namespace {

struct ReplyThunkData {
  std::shared_ptr<void> pending;  // RedisStore::Pending, type-erased (private type)
};

}  // namespace

std::shared_ptr<RedisStore> RedisStore::Create(asio::any_io_executor executor, RedisStoreOptions options) {
  std::shared_ptr<RedisStore> s(new RedisStore(std::move(executor), std::move(options)));
  asio::post(s->executor_, [weak = std::weak_ptr<RedisStore>(s)] {
    if (auto self = weak.lock(); self && !self->stopped_) {
      self->Connect(false);
      self->Connect(true);
    }
  });
  return s;
}

RedisStore::RedisStore(asio::any_io_executor executor, RedisStoreOptions options)
    : executor_(std::move(executor)),
      options_(std::move(options)),
      watchdog_(executor_),
      cmd_retry_(executor_),
      sub_retry_(executor_),
      sub_connect_timer_(executor_) {}

RedisStore::~RedisStore() { Stop(); }

void RedisStore::Stop() {
  if (stopped_) return;
  stopped_ = true;
  watchdog_.cancel();
  cmd_retry_.cancel();
  sub_retry_.cancel();
  sub_connect_timer_.cancel();
  for (std::shared_ptr<Conn>* c : {&cmd_, &sub_}) {
    std::shared_ptr<Conn> conn = std::move(*c);
    if (conn && conn->ctx != nullptr) {
      conn->owner.reset();
      redisAsyncFree(conn->ctx);  // runs pending callbacks with NULL, then Cleanup
    }
  }
  auto pending = std::move(pending_);
  for (auto& p : pending) p->Finish(nullptr);
  cmd_up_ = sub_up_ = false;
  stats_.up.store(false, std::memory_order_relaxed);
}

SharedCacheStats RedisStore::Stats() const {
  SharedCacheStats s;
  s.up = stats_.up.load(std::memory_order_relaxed);
  s.errors = stats_.errors.load(std::memory_order_relaxed);
  s.hits = stats_.hits.load(std::memory_order_relaxed);
  s.misses = stats_.misses.load(std::memory_order_relaxed);
  s.stores = stats_.stores.load(std::memory_order_relaxed);
  s.published = stats_.published.load(std::memory_order_relaxed);
  s.received = stats_.received.load(std::memory_order_relaxed);
  s.reconnects = stats_.reconnects.load(std::memory_order_relaxed);
  return s;
}

void RedisStore::Connect(bool subscriber) {
  if (stopped_) return;
  redisAsyncContext* ctx = redisAsyncConnect(options_.address.host.c_str(), options_.address.port);
  if (ctx == nullptr || ctx->err) {
    ++stats_.errors;
    if (!logged_once_) {
      logged_once_ = true;
      Log(fmt::format("redis://{}:{} unreachable ({}); working from the local tier and the origin",
                      options_.address.host, options_.address.port, ctx != nullptr ? ctx->errstr : "no memory"));
    }
    if (ctx != nullptr) redisAsyncFree(ctx);
    ScheduleReconnect(subscriber);
    return;
  }
  auto conn = std::make_shared<Conn>(executor_);
  conn->ctx = ctx;
  conn->subscriber = subscriber;
  conn->owner = weak_from_this();
  std::error_code ec;
  conn->socket.assign(ctx->c.fd, ec);
  ctx->data = conn.get();
  ctx->ev.data = conn.get();
  ctx->ev.addRead = &Conn::AddRead;
  ctx->ev.delRead = &Conn::DelRead;
  ctx->ev.addWrite = &Conn::AddWrite;
  ctx->ev.delWrite = &Conn::DelWrite;
  ctx->ev.cleanup = &Conn::Cleanup;
  redisAsyncSetConnectCallback(ctx, [](const redisAsyncContext* c, int status) {
    if (status == REDIS_OK) return;
    if (auto owner = Conn::Of(c->data)->owner.lock()) ++owner->stats_.errors;
  });
  (subscriber ? sub_ : cmd_) = conn;
  if (subscriber) {
    std::string channel(kChannel);
    const char* argv[] = {"SUBSCRIBE", channel.c_str()};
    const size_t lens[] = {9, channel.size()};
    // A subscription's callback stays registered: called for the
    // confirmation, every message, and with NULL when the context goes.
    redisAsyncCommandArgv(
        ctx,
        [](redisAsyncContext* c, void* r, void*) {
          Conn* conn = Conn::Of(c->data);
          auto owner = conn->owner.lock();
          if (!owner || r == nullptr) return;
          owner->OnMessage(static_cast<redisReply*>(r));
        },
        nullptr, 2, argv, lens);
    // The same bound as the command connection's (its PING is a command,
    // under the watchdog): a Redis that does not confirm the subscription
    // in time (a black-holed address, a stopped server) is dropped and
    // retried, rather than waited for as long as TCP keeps trying.
    sub_connect_timer_.expires_after(options_.timeout);
    sub_connect_timer_.async_wait([weak = weak_from_this(), conn](std::error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->stopped_ || self->sub_ != conn || self->sub_up_ || conn->ctx == nullptr) return;
      ++self->stats_.errors;
      redisAsyncFree(conn->ctx);  // Cleanup posts OnConnLost: reconnects
    });
    return;
  }
  auto on_ready = [weak = weak_from_this(), conn](redisReply* r) {
    auto self = weak.lock();
    if (!self || self->cmd_ != conn) return;
    if (r == nullptr || r->type == REDIS_REPLY_ERROR) return;  // the watchdog / Cleanup handle it
    self->cmd_up_ = true;
    self->NoteState();
  };
  std::vector<std::string> select;
  if (options_.address.db != 0) {
    Command({"SELECT", std::to_string(options_.address.db)}, nullptr);
  }
  Command({"PING"}, std::move(on_ready));
}

void RedisStore::ScheduleReconnect(bool subscriber) {
  if (stopped_) return;
  asio::steady_timer& t = subscriber ? sub_retry_ : cmd_retry_;
  t.expires_after(options_.reconnect_every);
  t.async_wait([weak = weak_from_this(), subscriber](std::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->stopped_) return;
    ++self->stats_.reconnects;
    self->Connect(subscriber);
  });
}

void RedisStore::OnConnLost(bool subscriber) {
  ++stats_.errors;
  if (subscriber) {
    sub_.reset();
    sub_up_ = false;
  } else {
    cmd_.reset();
    cmd_up_ = false;
    auto pending = std::move(pending_);
    for (auto& p : pending) p->Finish(nullptr);
  }
  NoteState();
  ScheduleReconnect(subscriber);
}

void RedisStore::NoteState() {
  const bool now = up();
  stats_.up.store(now, std::memory_order_relaxed);
  if (now == logged_up_) return;
  logged_up_ = now;
  logged_once_ = true;
  Log(now ? fmt::format("redis://{}:{} up: shared tier in use", options_.address.host, options_.address.port)
          : fmt::format("redis://{}:{} down: working from the local tier and the origin", options_.address.host,
                        options_.address.port));
}

void RedisStore::Command(std::vector<std::string> args, ReplyFn done) {
  auto p = std::make_shared<Pending>();
  p->deadline = std::chrono::steady_clock::now() + options_.timeout;
  p->done = std::move(done);
  if (stopped_ || !cmd_ || cmd_->ctx == nullptr) {
    asio::post(executor_, [p] { p->Finish(nullptr); });
    return;
  }
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* thunk = new ReplyThunkData{p};
  int rc = redisAsyncCommandArgv(
      cmd_->ctx,
      [](redisAsyncContext*, void* r, void* priv) {
        std::unique_ptr<ReplyThunkData> data(static_cast<ReplyThunkData*>(priv));
        auto pending = std::static_pointer_cast<Pending>(data->pending);
        pending->Finish(static_cast<redisReply*>(r));
      },
      thunk, static_cast<int>(argv.size()), argv.data(), lens.data());
  if (rc != REDIS_OK) {
    delete thunk;
    ++stats_.errors;
    asio::post(executor_, [p] { p->Finish(nullptr); });
    return;
  }
  pending_.push_back(std::move(p));
  ArmWatchdog();
}

void RedisStore::ArmWatchdog() {
  while (!pending_.empty() && pending_.front()->finished) pending_.pop_front();
  if (watchdog_armed_ || pending_.empty()) return;
  watchdog_armed_ = true;
  watchdog_.expires_at(pending_.front()->deadline);
  watchdog_.async_wait([weak = weak_from_this()](std::error_code) {
    if (auto self = weak.lock()) {
      self->watchdog_armed_ = false;
      if (!self->stopped_) self->OnWatchdog();
    }
  });
}

void RedisStore::OnWatchdog() {
  while (!pending_.empty() && pending_.front()->finished) pending_.pop_front();
  if (pending_.empty()) return;
  if (std::chrono::steady_clock::now() < pending_.front()->deadline) {
    ArmWatchdog();
    return;
  }
  // The oldest command is late: everything queued behind it on this
  // connection is too. Fail them all and drop the connection (a reply that
  // comes later must not be taken for a later command's).
  ++stats_.errors;
  auto pending = std::move(pending_);
  for (auto& p : pending) p->Finish(nullptr);
  if (cmd_ && cmd_->ctx != nullptr) {
    std::shared_ptr<Conn> conn = cmd_;
    redisAsyncFree(conn->ctx);  // Cleanup posts OnConnLost
  }
}

std::string RedisStore::EntryKey(const std::string& key) const {
  std::string k = fmt::format("hp1:e:{}:{}:", options_.ns.size(), options_.ns);
  k += key;
  return k;
}

std::string RedisStore::GenKey(std::string_view database, const std::string* table) const {
  std::string k = fmt::format("hp1:g:{}:{}:{}:{}", options_.ns.size(), options_.ns, database.size(), database);
  if (table != nullptr) {
    k += ':';
    k += *table;
  }
  return k;
}

void RedisStore::Get(const std::string& key, std::string_view database, const std::vector<std::string>& tables,
                     GetDone done) {
  if (!up()) {
    asio::post(executor_, [done = std::move(done)] { done(nullptr, SharedToken{}); });
    return;
  }
  std::vector<std::string> args{"MGET", EntryKey(key), GenKey(database, nullptr)};
  for (const std::string& t : tables) args.push_back(GenKey(database, &t));
  const size_t want = args.size() - 1;
  Command(std::move(args), [weak = weak_from_this(), tables, want, done = std::move(done)](redisReply* r) {
    auto self = weak.lock();
    if (!self || r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != want) {
      if (self && r != nullptr) ++self->stats_.errors;
      done(nullptr, SharedToken{});
      return;
    }
    SharedToken token;
    token.valid = true;
    for (size_t i = 1; i < want; ++i) {
      std::string_view v = ReplyString(r->element[i]);
      uint64_t g = 0;
      if (!v.empty()) std::from_chars(v.data(), v.data() + v.size(), g);
      token.generations.push_back(g);
    }
    std::optional<DecodedSharedEntry> d;
    if (r->element[0]->type == REDIS_REPLY_STRING) d = DecodeSharedEntry(ReplyString(r->element[0]));
    if (!d || d->generations != token.generations || d->entry.tables != tables) {
      ++self->stats_.misses;
      done(nullptr, std::move(token));
      return;
    }
    ++self->stats_.hits;
    done(std::make_shared<const CacheEntry>(std::move(d->entry)), std::move(token));
  });
}

void RedisStore::Put(const std::string& key, const CacheEntry& entry, const SharedToken& token) {
  if (!token.valid || !up()) return;
  const auto until = std::max(entry.stale_until, entry.keep_until);
  const auto px = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  if (px.count() <= 0) return;
  ++stats_.stores;
  Command({"SET", EntryKey(key), EncodeSharedEntry(entry, token.generations), "PX", std::to_string(px.count())},
          [weak = weak_from_this()](redisReply* r) {
            auto self = weak.lock();
            if (self && r != nullptr && r->type == REDIS_REPLY_ERROR) ++self->stats_.errors;
          });
}

void RedisStore::Invalidate(const SharedInvalidation& inv) {
  if (!cmd_ || !cmd_up_) {
    // Other Endpoints keep what they have until its max age (documented).
    ++stats_.errors;
    return;
  }
  auto count_error = [weak = weak_from_this()](redisReply* r) {
    auto self = weak.lock();
    if (self && (r == nullptr || r->type == REDIS_REPLY_ERROR)) ++self->stats_.errors;
  };
  if (inv.all) {
    Command({"INCR", GenKey(inv.database, nullptr)}, count_error);
  } else {
    for (const std::string& t : inv.tables) Command({"INCR", GenKey(inv.database, &t)}, count_error);
  }
  std::string payload = options_.instance;
  payload.push_back('\0');
  payload += options_.ns;
  payload.push_back('\0');
  payload += inv.database;
  payload.push_back('\0');
  payload += inv.all ? "1" : "0";
  for (const std::string& t : inv.tables) {
    payload.push_back('\0');
    payload += t;
  }
  ++stats_.published;
  Command({"PUBLISH", std::string(kChannel), std::move(payload)}, count_error);
}

void RedisStore::OnMessage(redisReply* r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 3) return;
  std::string_view kind = ReplyString(r->element[0]);
  if (kind == "subscribe") {
    // (Re)subscribed. After a gap, invalidations may have been missed:
    // drop everything local that another Endpoint's write could have made
    // stale.
    const bool gap = sub_was_up_;
    sub_connect_timer_.cancel();
    sub_up_ = sub_was_up_ = true;
    NoteState();
    if (gap && on_invalidation_) on_invalidation_(SharedInvalidation{"", true, {}});
    return;
  }
  if (kind != "message") return;
  std::string_view payload = ReplyString(r->element[2]);
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    size_t z = payload.find('\0', start);
    fields.push_back(payload.substr(start, z == std::string_view::npos ? std::string_view::npos : z - start));
    if (z == std::string_view::npos) break;
    start = z + 1;
  }
  if (fields.size() < 4 || fields[0] == options_.instance || fields[1] != options_.ns) return;
  SharedInvalidation inv;
  inv.database = std::string(fields[2]);
  inv.all = fields[3] == "1";
  for (size_t i = 4; i < fields.size(); ++i) inv.tables.emplace_back(fields[i]);
  ++stats_.received;
  if (on_invalidation_) on_invalidation_(inv);
}

}  // namespace hyperpool::cache
