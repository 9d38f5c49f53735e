#pragma once
// Option types for the Client, the Endpoint and hyperpool::connect().

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hyperpool/log.h"

#include "hyperpool/cache.h"

namespace hyperpool {

class AdminConsole;

// Which databases a Client serves and which app users may use each
// (hyperpool serve's [databases] and [users.NAME] databases = [...]). The
// login asks it only after a successful authentication, as PostgreSQL
// looks the database up and checks CONNECT privilege only then: before,
// an unknown database is indistinguishable from a wrong password.
// Thread-safe; its answers may change at run time (a reload).
class DatabaseDirectory {
 public:
  enum class Access {
    kAllowed,
    kDenied,   // FATAL 42501 permission denied for database "X"
    kUnknown,  // FATAL 3D000 database "X" does not exist
  };
  virtual ~DatabaseDirectory() = default;
  virtual Access Check(std::string_view user, std::string_view database) const = 0;
};

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
  // An idle connection is watched for the origin speaking on it (a FATAL
  // before it closes) once it has been idle this long; one lent again
  // sooner is checked for that with a single poll() when lent. Arming the
  // watch at every release and cancelling it at the next lend cost an
  // epoll_ctl and two completions per transaction. 0: watch at once.
  std::chrono::milliseconds idle_watch_delay{100};
  // ...except one lent again within this time of its release: a backend
  // that died in so short a window is met at its first use, as on a direct
  // connection (its FATAL reaches the client), and the poll was a syscall
  // per transaction under load. 0: poll at every lend.
  std::chrono::microseconds idle_poll_after{1000};
  // Limit for opening one origin connection (TCP, TLS and login): the
  // server connect timeout. Shorter than acquire_timeout, so that a
  // transaction waiting on an unreachable origin hears why (08001 "timed
  // out ...") rather than 53300. A connect_timeout in the origin string wins.
  std::chrono::milliseconds connect_timeout{5000};
};

// Invalidation from the origin's write-ahead log (docs/architecture.md,
// "Query cache" > "Invalidation from the origin's WAL"): a logical
// replication connection with a temporary slot and test_decoding.
//   kOff   writes that bypass hyperpool are seen only when max_age runs out.
//   kAuto  the feed runs when the origin allows it (wal_level = logical, a
//          role with REPLICATION); while the origin refuses, the cache works
//          by max age as with kOff (logged). Once streaming, a break or lag
//          past the bound stops serving cached rows until caught up.
//   kOn    the feed is required: while it is not streaming within the bound
//          (starting, broken, refused) no cached rows are served.
enum class WalInvalidation : unsigned char { kOff, kAuto, kOn };

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
  // Makes the tier's Cache (the plug-in, hyperpool/cache.h). Empty: the
  // in-memory LRU cache with the limits above.
  CacheFactory factory;
  // Endpoint only. A shared tier on Redis behind the local one
  // (docs/architecture.md, "Shared cache tier"): "redis://host:port[/db]".
  // Empty: none. Local first, then Redis, then the origin; both are filled.
  std::string redis_url;
  // Endpoint only. A Redis command not answered within this counts as an
  // error: the tier works without Redis until it answers again.
  std::chrono::milliseconds redis_timeout{50};
  // Endpoint only. stale-if-error: when the origin cannot be reached, a
  // result past max_age but at most this much older is served instead of
  // the error (never inside a transaction or after the session's own
  // write). Zero: off.
  std::chrono::milliseconds stale_if_error{0};
  // Endpoint only. Invalidation from the origin's WAL (above). With kOn and
  // max_age left at its default, the CLI uses kWalMaxAge.
  WalInvalidation wal_invalidation = WalInvalidation::kAuto;
  // Cached rows are served only while the feed has applied every commit
  // acknowledged more than this long ago.
  std::chrono::milliseconds wal_max_lag{100};
  // Past this lag the feed drops its slot (closes the connection), drops
  // every cached row of the database and starts a fresh slot, so the origin
  // never retains WAL for a feed that cannot keep up.
  std::chrono::milliseconds wal_hard_lag{10000};
};
// max_age's default when the feed is on (kOn): freshness then comes from
// invalidation; max age only bounds what the feed cannot see (unlogged
// tables written elsewhere) and how often the catalog is re-read.
inline constexpr std::chrono::milliseconds kWalMaxAge{600000};

struct EndpointOptions {
  // The origin database: a libpq URI (postgresql://user:pass@host:port/db?sslmode=...)
  // or a key=value string. These credentials never reach applications.
  // Keep the password out of it where a command line or a log could show
  // it: when `origin` has none, the password comes from, in order,
  // `origin_password`, the first line of `origin_password_file`, and (when
  // `origin_password_from_environment`) PGPASSWORD, then the pgpass file
  // (`passfile=` in `origin`, PGPASSFILE or ~/.pgpass), as libpq does.
  std::string origin;
  std::string origin_password;
  std::string origin_password_file;  // must not be readable by group or others
  bool origin_password_from_environment = true;
  PoolOptions pool;
  CacheOptions cache;
  // Transaction mode: sessions pinned to their origin connection (temp
  // tables, session advisory locks, WITH HOLD cursors, SET ROLE, SQL
  // PREPARE, LISTEN) hold connections outside pool.max_size, at most this
  // many at once; 0 means max(1, pool.max_size). A statement that would
  // pin one more waits for a slot (FIFO, cancellable, at most
  // pool.acquire_timeout, then 53300) (docs/architecture.md, "Pinned
  // budget").
  std::size_t max_pinned = 0;
  // A pinned session idle (between units of work) this long is closed with
  // FATAL 57P05, freeing its connection. Zero: never.
  std::chrono::milliseconds pinned_idle_timeout{600000};
  // A unit of work (a Query, or extended messages up to Sync) running on the
  // origin longer than this is cancelled there (CancelRequest), and the
  // client gets 57014 "canceling statement due to statement timeout", as
  // PostgreSQL's statement_timeout would. Zero: off.
  std::chrono::milliseconds query_timeout{0};
  // A session idle inside a transaction block longer than this is ended as
  // PostgreSQL ends it: FATAL 25P03 "terminating connection due to
  // idle-in-transaction timeout"; its origin connection is closed (the origin
  // rolls back) and the pool slot is free again. Zero: off.
  std::chrono::milliseconds idle_in_transaction_timeout{0};
  // Backpressure towards the origin: a session whose bytes for its origin
  // connection not yet written (the origin is busy and does not read, as a
  // backend does not while it executes) pass this bound stops reading its
  // link, so its Client stops reading the app's socket and the app's sends
  // block, as directly (PostgreSQL stops at its socket buffers, ~5 MB on
  // loopback). A single message larger than the bound still passes whole
  // (up to ClientOptions::max_message_size).
  std::size_t max_pending_to_origin = 4u << 20;
  // Event logs (hyperpool/log.h): origin_connect / origin_close (with the
  // origin backend's pid) under log_connections / log_disconnections, and
  // origin_connect_failed; null: Logger::Default().
  std::shared_ptr<const Logger> logger;
  // Set by the host of the Endpoint and its Client (hyperpool::connect,
  // serve): a pg_terminate_backend / pg_cancel_backend of an app pid no
  // session of this Endpoint holds is offered to the host's other Endpoints
  // (one per database: Endpoint::SignalAppSession), so a pid handed out for
  // one database can be signalled from another, as directly (node-postgres's
  // gh-issues/130 does it from template1), and then to its Client, for a
  // session that has not opened its link yet (Client::SignalAppSession).
  // True if one of them holds it. Called on this Endpoint's executor.
  std::function<bool(std::int32_t app_pid, bool terminate)> signal_elsewhere;
  // When the last app session has gone for this long, the idle origin
  // connections are closed (0: never; they stay for PoolOptions::idle_timeout).
  // Set for the databases of a "*" entry: a database an app created, used and
  // now DROPs must not be held open by hyperpool (PostgreSQL's DROP DATABASE
  // waits 5 s for other backends, then fails with 55006).
  std::chrono::milliseconds close_idle_when_unused{0};
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
  // PBKDF2 iterations of the SCRAM verifier apps log in against (the work a
  // driver does per login, like PostgreSQL's scram_iterations), for every
  // client. 0 = 4096, except that with a generated password (24 random
  // bytes: key stretching adds nothing) clients known to accept fewer
  // (libpq and its drivers, node-postgres, postgres.js, asyncpg) are offered
  // 16, making their login cost microseconds; PgJDBC and other clients of
  // the ongres SCRAM library refuse counts below 4096 ("iteration must be
  // >= 4096") and keep 4096 (client/server_handshake.h, AcceptsQuickScram).
  std::uint32_t scram_iterations = 0;
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
  // The invalidation watch (docs/architecture.md, "Invalidation"): with the
  // cache tier on, one long-lived link to the Endpoint in use over which it
  // sends every invalidation it broadcasts (other Clients' writes, and other
  // Endpoints' through the shared tier), so the tier hears of them with no
  // app session open. The tier then serves and stores only while the watch
  // is subscribed; it is dropped whenever the watch breaks, stops answering
  // or moves with the Endpoint in use. Unset: on for connect_remote(), on
  // for connect() when its Endpoint has a shared tier (the only way another
  // Client's write reaches it), off for Client::Create called directly.
  std::optional<bool> cache_watch;
  // How often the watch sends a heartbeat (a Sync the Endpoint answers after
  // every invalidation sent before it); one unanswered by the next beat ends
  // the link (the tier is dropped, the watch opens again).
  std::chrono::milliseconds cache_watch_heartbeat{2000};
  // Each executor given to Client::Create runs on exactly one thread (as
  // hyperpool's own workers do; connect() sets this): a session then runs on
  // the executor itself rather than on a strand of it, which saves a lock
  // and a queue per completion. Leave false for an io_context that several
  // threads run.
  bool one_thread_per_executor = false;
  // When set, the Client also listens on the Unix-domain socket
  // <listen_unix_dir>/.s.PGSQL.<port> (port: the TCP listener's), as
  // PostgreSQL does, mode 0777; the socket file is removed by Stop().
  std::string listen_unix_dir;

  // More app users besides `user` (docs/architecture.md, "App users"). Each
  // logs in with SCRAM-SHA-256 against its own verifier and reaches the same
  // origin role as `user`; a name not listed gets the same 28P01 as a wrong
  // password.
  struct AppUser {
    std::string name;
    // PostgreSQL's stored form, "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>"
    // (pg_authid.rolpassword); or empty and `password` set.
    std::string scram_verifier;
    std::string password;
  };
  std::vector<AppUser> users;

  // TLS towards applications (docs/architecture.md, "TLS towards
  // applications"): with a certificate and key (PEM files), an SSLRequest is
  // answered 'S' and the login continues inside TLS; without, 'N'.
  std::string ssl_cert_file;
  std::string ssl_key_file;
  // With a certificate: refuse a login that is not inside TLS with FATAL
  // 28000, as PostgreSQL with only hostssl lines in pg_hba.conf. Otherwise
  // plaintext is allowed too (the connection string stays plaintext).
  bool ssl_required = false;

  // Replication logins (docs/architecture.md, "Replication connections"):
  // carried to a walsender of their own, logged in as the origin role.
  // kLogical (the default): replication=database, which decodes only the
  // served database; a physical walsender, which streams the whole
  // cluster, every database in it, is refused with 28000 as a pg_hba.conf
  // without a replication line refuses it. kAll: both. kOff: both refused.
  enum class Replication { kOff, kLogical, kAll };
  Replication replication = Replication::kLogical;

  // Event logs (hyperpool/log.h); null: Logger::Default().
  std::shared_ptr<const Logger> logger;
  // The admin console (include/hyperpool/admin.h): a login to
  // `admin_database` that authenticates (with the same SCRAM verifier as
  // `user`) is served by `admin` instead of the Endpoint, or refused with
  // FATAL 42501 when admin->IsAdmin(user) is false. Null: no console (the
  // name is then an ordinary unknown database). Must differ from `database`.
  std::shared_ptr<AdminConsole> admin;
  std::string admin_database = "hyperpool";
  // Several databases behind one Client (hyperpool::connect() with
  // ConnectOptions::databases sets it): a login names one of them, and
  // this decides. Null: only `database`, open to every app user.
  std::shared_ptr<const DatabaseDirectory> databases;
};

}  // namespace hyperpool
