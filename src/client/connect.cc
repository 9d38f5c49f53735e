// hyperpool::connect(): one Client and one in-process Endpoint, on worker
// threads hyperpool owns (one io_context each) or on the host's io_context.
// hyperpool::connect_remote(): the same with only the Client, whose links go
// to a remote Endpoint through a SocketTransport.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/strand.hpp>

#include "client/endpoint_set.h"
#include "hyperpool/hyperpool.h"

namespace hyperpool {
namespace {

// How long Close() lets sessions unwind on their own before it stops the
// io_contexts outright.
constexpr std::chrono::seconds kDrainLimit{5};

class ConnectionImpl final : public Connection {
 public:
  ~ConnectionImpl() override { Close(); }

  const std::string& connection_string() const override { return url_; }

  EndpointStats endpoint_stats() const override {
    std::lock_guard lock(mu_);
    return endpoint_ ? endpoint_->Stats() : EndpointStats{};
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
    return endpoint_.get();
  }

  std::string cache_report() const override {
    std::lock_guard lock(mu_);
    std::string out;
    if (client_) out += client_->CacheReport();
    if (endpoint_) out += endpoint_->CacheReport(10);
    return out;
  }

  void Close() override {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    if (client_) client_->Stop();
    if (socket_transport_) socket_transport_->Stop();  // its background work keeps the workers busy
    if (endpoint_) endpoint_->Stop();
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
    endpoint_.reset();
  }

  absl::Status Start(ConnectOptions options) {
    std::vector<asio::any_io_executor> executors = StartWorkers(options.io_context, options.threads);
    // The Endpoint's state belongs to one executor: on a host's io_context,
    // which several threads may run, that is a strand of it.
    asio::any_io_executor endpoint_executor =
        ios_.empty() ? asio::any_io_executor(asio::make_strand(executors[0])) : executors[0];
    // Without a shared tier every write reaches this Endpoint through this
    // Client itself (inline on the writer's link): no watch needed.
    if (!options.client.cache_watch) options.client.cache_watch = !options.endpoint.cache.redis_url.empty();
    absl::StatusOr<std::unique_ptr<Endpoint>> endpoint =
        Endpoint::Create(std::move(endpoint_executor), std::move(options.endpoint));
    if (!endpoint.ok()) return endpoint.status();
    endpoint_ = *std::move(endpoint);
    transport_ = MakeInProcessTransport(*endpoint_);
    return StartClient(std::move(executors), std::move(options.client));
  }

  absl::Status StartRemote(RemoteConnectOptions options) {
    std::vector<asio::any_io_executor> executors = StartWorkers(options.io_context, options.threads);
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
  std::vector<asio::any_io_executor> StartWorkers(asio::io_context* host, unsigned threads) {
    std::vector<asio::any_io_executor> executors;
    if (host != nullptr) {
      executors.push_back(host->get_executor());
    } else {
      unsigned n = threads != 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
      for (unsigned i = 0; i < n; ++i) {
        ios_.push_back(std::make_unique<asio::io_context>(1));
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

  absl::Status StartClient(std::vector<asio::any_io_executor> executors, ClientOptions options) {
    options.one_thread_per_executor = !ios_.empty();  // our workers: one thread per io_context
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(std::move(executors), *transport_, std::move(options));
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
