// hyperpool::connect(): one Client and one in-process Endpoint, on worker
// threads hyperpool owns (one io_context each) or on the host's io_context;
// with ConnectOptions::databases one Endpoint per database behind a
// DatabaseRouter (database_router.h).
// hyperpool::connect_remote(): the same with only the Client, whose links go
// to a remote Endpoint through a SocketTransport.

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include "absl/strings/str_cat.h"
#include "client/database_router.h"
#include "client/endpoint_set.h"
#include "hyperpool/hyperpool.h"
#include "hyperpool/version.h"
#include "protocol/pooler_errors.h"
#include "protocol/sqlstate.h"

namespace hyperpool {
namespace {

// How long Close() lets sessions unwind on their own before it stops the
// io_contexts outright.
constexpr std::chrono::seconds kDrainLimit{5};
// Appended to an event loop that cannot start: what to do about it.
constexpr const char* kEventLoopHint =
    "; an io_uring build (-DHYPERPOOL_IO_URING=ON) needs a kernel and a seccomp profile that allow io_uring: "
    "rebuild with -DHYPERPOOL_IO_URING=OFF (epoll) otherwise";

// ClientOptions::databases when the host gives none: every database the
// router serves (any name with a "*" entry), open to every app user.
class RouterDirectory final : public DatabaseDirectory {
 public:
  RouterDirectory(std::shared_ptr<const client::DatabaseRouter> router, bool any)
      : router_(std::move(router)), any_(any) {}
  Access Check(std::string_view, std::string_view database) const override {
    if (any_) return Access::kAllowed;
    for (const std::string& name : router_->Names()) {
      if (name == database) return Access::kAllowed;
    }
    return Access::kUnknown;
  }

 private:
  std::shared_ptr<const client::DatabaseRouter> router_;
  bool any_ = false;
};

class ConnectionImpl final : public Connection {
 public:
  ~ConnectionImpl() override { Close(); }

  const std::string& connection_string() const override { return url_; }

  EndpointStats endpoint_stats() const override {
    std::lock_guard lock(mu_);
    return default_endpoint_ ? default_endpoint_->Stats() : EndpointStats{};
  }

  ClientStats client_stats() const override {
    std::lock_guard lock(mu_);
    return client_ ? client_->Stats() : ClientStats{};
  }

  Client* client() override {
    std::lock_guard lock(mu_);
    return client_.get();
  }
  Endpoint* endpoint() override {
    std::lock_guard lock(mu_);
    return default_endpoint_;
  }

  std::vector<std::string> databases() const override {
    std::lock_guard lock(mu_);
    std::vector<std::string> names;
    for (const auto& [name, db] : databases_) names.push_back(name);
    return names;
  }

  Endpoint* endpoint(std::string_view database) override {
    std::lock_guard lock(mu_);
    auto it = databases_.find(database);
    return it == databases_.end() ? nullptr : it->second.endpoint.get();
  }

  absl::Status AddDatabase(std::string name, EndpointOptions options) override {
    std::lock_guard lock(mu_);
    if (!router_ || closed_) return absl::FailedPreconditionError("this connection serves one database");
    return AddDatabaseLocked(std::move(name), std::move(options));
  }

  absl::Status RemoveDatabase(std::string_view name) override {
    std::lock_guard lock(mu_);
    if (!router_ || closed_) return absl::FailedPreconditionError("this connection serves one database");
    return RemoveDatabaseLocked(name);
  }

  // Requires mu_ and a router.
  absl::Status RemoveDatabaseLocked(std::string_view name) {
    any_names_.erase(std::string(name));
    auto it = databases_.find(name);
    if (it == databases_.end()) return absl::NotFoundError(absl::StrCat("database \"", std::string(name), "\" is not served"));
    if (it->second.endpoint.get() == default_endpoint_) {
      return absl::FailedPreconditionError(absl::StrCat("database \"", std::string(name), "\" is the default; it stays"));
    }
    router_->Remove(name);
    // Its origin connections go as they become free (min_idle would reopen them).
    PoolOptions pool = it->second.pool;
    pool.min_idle = 0;
    (void)it->second.endpoint->UpdatePool(pool);
    it->second.endpoint->ReconnectPool();
    retired_.push_back(std::move(it->second.endpoint));  // its sessions still use it
    databases_.erase(it);
    return absl::OkStatus();
  }

  std::string cache_report() const override {
    std::lock_guard lock(mu_);
    std::string out;
    if (client_) out += client_->CacheReport();
    if (endpoint_) out += endpoint_->CacheReport(10);
    for (const auto& [name, db] : databases_) out += "database " + name + ":\n" + db.endpoint->CacheReport(10);
    return out;
  }

  void Close() override {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    if (client_) client_->Stop();
    if (socket_transport_) socket_transport_->Stop();  // its background work keeps the workers busy
    if (endpoint_) endpoint_->Stop();
    for (auto& [name, db] : databases_) db.endpoint->Stop();
    for (auto& retired : retired_) retired->Stop();
    guards_.clear();  // worker threads return once their work has unwound
    if (!threads_.empty()) {
      std::unique_lock running_lock(running_mu_);
      bool drained = running_cv_.wait_for(running_lock, kDrainLimit, [&] { return running_ == 0; });
      running_lock.unlock();
      if (!drained) {
        for (auto& io : ios_) io->stop();
      }
      for (auto& t : threads_) {
        if (t.get_id() == std::this_thread::get_id()) {
          t.detach();  // Close() from a handler of our own worker: cannot join itself
        } else if (t.joinable()) {
          t.join();
        }
      }
      threads_.clear();
    }
    client_.reset();
    socket_transport_ = nullptr;
    transport_.reset();
    router_.reset();
    default_endpoint_ = nullptr;
    databases_.clear();
    retired_.clear();
    endpoint_.reset();
  }

  absl::Status Start(ConnectOptions options) {
    absl::StatusOr<std::vector<asio::any_io_executor>> workers = StartWorkers(options.io_context, options.threads);
    if (!workers.ok()) return workers.status();
    std::vector<asio::any_io_executor> executors = *std::move(workers);
    if (!options.databases.empty()) return StartDatabases(std::move(executors), std::move(options));
    // The Endpoint's state belongs to one executor: on a host's io_context,
    // which several threads may run, that is a strand of it.
    asio::any_io_executor endpoint_executor =
        ios_.empty() ? asio::any_io_executor(asio::make_strand(executors[0])) : executors[0];
    // Without a shared tier every write reaches this Endpoint through this
    // Client itself (inline on the writer's link): no watch needed.
    // With the WAL feed too: its invalidations come from no Client's write.
    if (!options.client.cache_watch) {
      options.client.cache_watch = !options.endpoint.cache.redis_url.empty() ||
                                   options.endpoint.cache.wal_invalidation != WalInvalidation::kOff;
    }
    options.endpoint.signal_elsewhere = [this](std::int32_t app_pid, bool terminate) {
      return SignalElsewhere(/*self=*/"", app_pid, terminate);
    };
    absl::StatusOr<std::unique_ptr<Endpoint>> endpoint =
        Endpoint::Create(std::move(endpoint_executor), std::move(options.endpoint));
    if (!endpoint.ok()) return endpoint.status();
    endpoint_ = *std::move(endpoint);
    default_endpoint_ = endpoint_.get();
    transport_ = MakeInProcessTransport(*endpoint_, endpoint_->executor());
    std::lock_guard lock(mu_);  // (client_ is read under it: signal_elsewhere above)
    return StartClient(std::move(executors), std::move(options.client));
  }

  // One Endpoint per database, spread over the executors, behind a router.
  absl::Status StartDatabases(std::vector<asio::any_io_executor> executors, ConnectOptions options) {
    std::lock_guard lock(mu_);
    executors_ = executors;
    router_ = std::make_shared<client::DatabaseRouter>();
    const std::string default_name = options.databases.front().name;
    router_->SetDefault(default_name);
    for (ConnectOptions::Database& db : options.databases) {
      if (absl::Status s = AddDatabaseLocked(std::move(db.name), std::move(db.endpoint)); !s.ok()) return s;
    }
    default_endpoint_ = databases_.find(default_name)->second.endpoint.get();
    if (options.any_database) {
      any_database_ = std::move(options.any_database);
      max_any_databases_ = std::max<std::size_t>(1, options.max_any_databases);
      router_->SetFallback([this](const std::string& name) { return OpenAnyDatabase(name); });
    }
    if (!options.client.databases) {
      options.client.databases = std::make_shared<RouterDirectory>(router_, any_database_.has_value());
    }
    return StartClient(std::move(executors), std::move(options.client), router_.get());
  }

  // The router's fallback (ConnectOptions::any_database): starts `name`'s
  // Endpoint on the "*" entry's origin with `name` as its database.
  absl::StatusOr<std::shared_ptr<Transport>> OpenAnyDatabase(const std::string& name) {
    std::lock_guard lock(mu_);
    if (closed_ || !router_) return absl::UnavailableError("hyperpool is shutting down");
    if (auto it = databases_.find(name); it != databases_.end()) return it->second.transport;  // started meanwhile
    if (any_names_.size() >= max_any_databases_) {
      // Room: the Endpoints of the "*" entry no session uses now go.
      std::vector<std::string> idle;
      for (const std::string& any : any_names_) {
        auto it = databases_.find(any);
        if (it == databases_.end()) continue;
        const EndpointStats s = it->second.endpoint->Stats();
        if (s.sessions == 0 && s.origin_lent == 0) idle.push_back(any);
      }
      for (const std::string& any : idle) (void)RemoveDatabaseLocked(any);
    }
    if (any_names_.size() >= max_any_databases_) {
      return protocol::WithSqlState(
          absl::ResourceExhaustedError(absl::StrCat("too many databases served through the \"*\" entry (",
                                                    max_any_databases_, " in use); \"", name, "\" is refused")),
          kSqlStateConfigurationLimitExceeded);
    }
    EndpointOptions options = *any_database_;
    options.close_idle_when_unused = std::chrono::seconds(1);
    options.origin = client::OriginForDatabase(options.origin, name);
    if (absl::Status s = AddDatabaseLocked(name, std::move(options)); !s.ok()) return s;
    any_names_.insert(name);
    return databases_.find(name)->second.transport;
  }

  // EndpointOptions::signal_elsewhere of database `self`'s Endpoint (""
  // for the one Endpoint without databases): the other databases' Endpoints,
  // the retired ones, then our Client, for a session that has not opened
  // its link (Client::SignalAppSession).
  bool SignalElsewhere(std::string_view self, std::int32_t app_pid, bool terminate) {
    // (Not while mu_ is held: Close() and reloads wait for Endpoints with it.)
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock() || closed_) return false;
    for (auto& [other, db] : databases_) {
      if (other != self && db.endpoint->SignalAppSession(app_pid, terminate)) return true;
    }
    for (auto& retired : retired_) {
      if (retired->SignalAppSession(app_pid, terminate)) return true;
    }
    return client_ != nullptr && client_->SignalAppSession(app_pid, terminate);
  }

  // Requires mu_ and a router.
  absl::Status AddDatabaseLocked(std::string name, EndpointOptions options) {
    if (name.empty()) return absl::InvalidArgumentError("a database needs a name");
    if (databases_.count(name) != 0) return absl::AlreadyExistsError(absl::StrCat("database \"", name, "\" is listed twice"));
    const asio::any_io_executor& base = executors_[next_database_executor_++ % executors_.size()];
    asio::any_io_executor executor = ios_.empty() ? asio::any_io_executor(asio::make_strand(base)) : base;
    PoolOptions pool = options.pool;
    options.signal_elsewhere = [this, self = name](std::int32_t app_pid, bool terminate) {
      return SignalElsewhere(self, app_pid, terminate);
    };
    absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = Endpoint::Create(std::move(executor), std::move(options));
    if (!endpoint.ok()) {
      return absl::Status(endpoint.status().code(),
                          absl::StrCat("database \"", name, "\": ", endpoint.status().message()));
    }
    Database& db = databases_[name];
    db.endpoint = *std::move(endpoint);
    db.pool = pool;
    db.transport = MakeInProcessTransport(*db.endpoint, db.endpoint->executor());
    router_->Set(name, db.transport);
    return absl::OkStatus();
  }

  absl::Status StartRemote(RemoteConnectOptions options) {
    absl::StatusOr<std::vector<asio::any_io_executor>> workers = StartWorkers(options.io_context, options.threads);
    if (!workers.ok()) return workers.status();
    std::vector<asio::any_io_executor> executors = *std::move(workers);
    absl::StatusOr<std::unique_ptr<SocketTransport>> transport =
        options.failover.endpoints.size() > 1
            ? client::MakeEndpointSet(executors, std::move(options.endpoint), std::move(options.failover))
            : MakeSocketTransport(executors, std::move(options.endpoint));
    if (!transport.ok()) return transport.status();
    socket_transport_ = transport->get();
    transport_ = *std::move(transport);
    if (!options.client.cache_watch) options.client.cache_watch = true;
    return StartClient(std::move(executors), std::move(options.client));
  }

 private:
  // The executors to run on: the host's io_context, or worker threads of
  // our own (one io_context each).
  absl::StatusOr<std::vector<asio::any_io_executor>> StartWorkers(asio::io_context* host, unsigned threads) {
    std::vector<asio::any_io_executor> executors;
    if (host != nullptr) {
      executors.push_back(host->get_executor());
    } else {
      unsigned n = threads != 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
      for (unsigned i = 0; i < n; ++i) {
        auto io = std::make_unique<asio::io_context>(1);
        if (absl::Status loop = StartEventLoop(*io); !loop.ok()) return loop;
        ios_.push_back(std::move(io));
        guards_.emplace_back(ios_.back()->get_executor());
        executors.push_back(ios_.back()->get_executor());
      }
    }
    // Workers run from the start, so that a failing Create below can still
    // be unwound by Close() (Stop() of a half may need its executor).
    running_ = ios_.size();
    for (auto& io : ios_) {
      threads_.emplace_back([this, ctx = io.get()] {
        ctx->run();
        std::lock_guard lock(running_mu_);
        --running_;
        running_cv_.notify_all();
      });
    }
    return executors;
  }

  // Asio sets up an io_context's event loop (epoll, or io_uring when built
  // with -DHYPERPOOL_IO_URING=ON) with its first timer or socket, and throws
  // if the system refuses it (io_uring_queue_init fails under a seccomp
  // profile that forbids io_uring, or on an old kernel). Made here, on the
  // caller's thread, so that such a system fails connect() with a status
  // instead of a worker thread with an exception.
  static absl::Status StartEventLoop(asio::io_context& io) {
    try {
      asio::steady_timer first(io);
    } catch (const std::system_error& e) {
      return absl::FailedPreconditionError(absl::StrCat("cannot start the event loop (", hyperpool::kEventLoop, "): ", e.what(),
                                                        std::string_view(hyperpool::kEventLoop) == "io_uring"
                                                            ? kEventLoopHint
                                                            : ""));
    }
    return absl::OkStatus();
  }

  absl::Status StartClient(std::vector<asio::any_io_executor> executors, ClientOptions options,
                           Transport* transport = nullptr) {
    options.one_thread_per_executor = !ios_.empty();  // our workers: one thread per io_context
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Create(std::move(executors), transport ? *transport : *transport_, std::move(options));
    if (!client.ok()) return client.status();
    client_ = *std::move(client);
    url_ = client_->connection_string();
    return absl::OkStatus();
  }

  // Destroyed last: everything below may hold handles into these.
  std::vector<std::unique_ptr<asio::io_context>> ios_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards_;
  std::vector<std::thread> threads_;
  std::mutex running_mu_;
  std::condition_variable running_cv_;
  size_t running_ = 0;

  std::unique_ptr<Endpoint> endpoint_;
  // ConnectOptions::databases: each database's Endpoint and its transport
  // (shared with the router, which may hold it for an Open in progress);
  // removed ones stay until Close() (their sessions may still run).
  struct Database {
    std::unique_ptr<Endpoint> endpoint;
    std::shared_ptr<Transport> transport;
    PoolOptions pool;
  };
  std::map<std::string, Database, std::less<>> databases_;
  std::vector<std::unique_ptr<Endpoint>> retired_;
  std::shared_ptr<client::DatabaseRouter> router_;
  // ConnectOptions::any_database: its options, and the databases started
  // from it (in databases_ while they run).
  std::optional<EndpointOptions> any_database_;
  std::size_t max_any_databases_ = 16;
  std::set<std::string> any_names_;
  std::vector<asio::any_io_executor> executors_;
  size_t next_database_executor_ = 0;
  Endpoint* default_endpoint_ = nullptr;  // endpoint_, or the first database's
  std::unique_ptr<Transport> transport_;
  SocketTransport* socket_transport_ = nullptr;  // transport_, when the Endpoint is remote
  std::unique_ptr<Client> client_;
  std::string url_;
  mutable std::mutex mu_;
  bool closed_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Connection>> connect(ConnectOptions options) {
  auto connection = std::make_unique<ConnectionImpl>();
  absl::Status started = connection->Start(std::move(options));
  if (!started.ok()) {
    connection->Close();
    return started;
  }
  return std::unique_ptr<Connection>(std::move(connection));
}

absl::StatusOr<std::unique_ptr<Connection>> connect_remote(RemoteConnectOptions options) {
  auto connection = std::make_unique<ConnectionImpl>();
  absl::Status started = connection->StartRemote(std::move(options));
  if (!started.ok()) {
    connection->Close();
    return started;
  }
  return std::unique_ptr<Connection>(std::move(connection));
}

}  // namespace hyperpool
