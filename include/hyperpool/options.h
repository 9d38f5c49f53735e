#pragma once
// Option types for the Client, the Endpoint and hyperpool::connect().

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hyperpool {

// How origin connections are shared.
enum class PoolMode {
  kTransaction,  // a connection is lent for one transaction (default)
  kSession,      // a connection is lent for a client's whole session
};

struct PoolOptions {
  PoolMode mode = PoolMode::kTransaction;
  // Most origin connections open at once (a hard cap, counting ones being opened).
  std::size_t max_size = 10;
  // Connections kept open and idle even without demand.
  std::size_t min_idle = 0;
  // How long a transaction waits for a connection before failing with 53300.
  std::chrono::milliseconds acquire_timeout{15000};
  // Idle connections above min_idle are closed after this long.
  std::chrono::milliseconds idle_timeout{600000};
  // Any connection is closed (when next idle) after this long.
  std::chrono::milliseconds max_lifetime{3600000};
  // A connection idle this long is checked (an empty query) before it is lent.
  std::chrono::milliseconds health_check_after{30000};
  // Limit for opening one origin connection (TCP, TLS and login).
  std::chrono::milliseconds connect_timeout{15000};
};

// The query cache (two tiers: the Client's local one and the Endpoint's).
struct CacheOptions {
  // Caching is on by default; `hyperpool serve --no-cache` turns it off.
  bool enabled = true;
  // How long a result is served fresh, and then stale while one refresh runs.
  std::chrono::milliseconds max_age{60000};
  std::chrono::milliseconds stale_while_revalidate{15000};
  // Memory bound per tier, and the largest result kept (larger ones are
  // returned, not cached).
  std::size_t max_bytes = 64u << 20;
  std::size_t max_entry_bytes = 50u << 20;
  // Queries longer than this are not considered for caching.
  std::size_t max_query_bytes = 16u << 10;
};

struct EndpointOptions {
  // The origin database: a libpq URI (postgresql://user:pass@host:port/db?sslmode=...)
  // or a key=value string. These credentials never reach applications.
  std::string origin;
  PoolOptions pool;
  CacheOptions cache;
};

struct ClientOptions {
  // Where the Client listens for application drivers. Port 0 picks a free port.
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 0;
  // The credentials applications use towards the Client. Generated (random
  // password) when empty; they are unrelated to the origin's credentials.
  std::string user = "hyperpool";
  std::string password;
  std::string database = "hyperpool";
  // client_login_timeout: how long an application may take to finish its
  // handshake (like PostgreSQL's authentication_timeout). The connection is
  // then closed without a message, as PostgreSQL does.
  std::chrono::milliseconds handshake_timeout{15000};
  // client_idle_timeout: an application idle this long outside a transaction
  // (ReadyForQuery 'I' sent, nothing outstanding) gets FATAL 57P05 and is
  // closed, like PostgreSQL's idle_session_timeout. 0 = never.
  std::chrono::milliseconds idle_timeout{0};
  // Largest message an application may send after login (the value of its
  // length field). Larger ones get FATAL 54000 and a close, before any of the
  // body is buffered. PostgreSQL's own limit is 1 GiB.
  std::size_t max_message_size = 64u << 20;
  CacheOptions cache;
  // Each executor given to Client::Create runs on exactly one thread (as
  // hyperpool's own workers do; connect() sets this): a session then runs on
  // the executor itself rather than on a strand of it, which saves a lock
  // and a queue per completion. Leave false for an io_context that several
  // threads run.
  bool one_thread_per_executor = false;
};

}  // namespace hyperpool
