// Lease (pool.h) and the Pool facade over PoolImpl (pool_impl.h).

#include "pool/pool_impl.h"

namespace hyperpool {

Lease::Lease(std::shared_ptr<PoolImpl> pool, PoolEntry* entry, PooledConnection* connection)
    : pool_(std::move(pool)), entry_(entry), connection_(connection) {}

Lease::Lease(Lease&& other) noexcept
    : pool_(std::move(other.pool_)),
      entry_(std::exchange(other.entry_, nullptr)),
      connection_(std::exchange(other.connection_, nullptr)) {}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    if (connection_ != nullptr) Release(ReleaseDecision::kClose);
    pool_ = std::move(other.pool_);
    entry_ = std::exchange(other.entry_, nullptr);
    connection_ = std::exchange(other.connection_, nullptr);
  }
  return *this;
}

Lease::~Lease() {
  if (connection_ != nullptr) Release(ReleaseDecision::kClose);
}

std::chrono::steady_clock::time_point Lease::opened_at() const { return entry_->opened_at; }

bool Lease::lifetime_exceeded() const { return pool_->LifetimeExceeded(*entry_); }

void Lease::MoveOutOfCap() {
  HYPERPOOL_POOL_CHECK(connection_ != nullptr);
  pool_->MoveOutOfCap(entry_);
}

void Lease::Release(ReleaseDecision decision) {
  HYPERPOOL_POOL_CHECK(connection_ != nullptr);
  if (decision == ReleaseDecision::kKeep) return;
  // Empty the lease first: the pool may lend the connection to a waiter
  // inside this call.
  auto pool = std::move(pool_);
  PoolEntry* entry = std::exchange(entry_, nullptr);
  connection_ = nullptr;
  pool->Release(entry, decision);
}

// Pool.

absl::StatusOr<std::unique_ptr<Pool>> Pool::Create(asio::any_io_executor executor, PoolOptions options,
                                                   PoolCallbacks callbacks) {
  using std::chrono::milliseconds;
  if (options.max_size < 1) return absl::InvalidArgumentError("pool max_size must be at least 1");
  if (options.min_idle > options.max_size) {
    return absl::InvalidArgumentError("pool min_idle must not exceed max_size");
  }
  if (options.acquire_timeout <= milliseconds::zero() || options.idle_timeout <= milliseconds::zero() ||
      options.max_lifetime <= milliseconds::zero() || options.health_check_after < milliseconds::zero() ||
      options.idle_watch_delay < milliseconds::zero() ||
      options.connect_timeout <= milliseconds::zero()) {
    return absl::InvalidArgumentError("pool timeouts must be positive");
  }
  if (!callbacks.open) return absl::InvalidArgumentError("pool needs a connection factory");
  auto impl = std::make_shared<PoolImpl>(std::move(executor), options, std::move(callbacks));
  impl->Start();
  return std::unique_ptr<Pool>(new Pool(std::move(impl)));
}

Pool::Pool(std::shared_ptr<PoolImpl> impl) : impl_(std::move(impl)) {}

Pool::~Pool() { impl_->Stop(); }

asio::awaitable<absl::StatusOr<Lease>> Pool::Acquire(AcquireCancel* cancel) {
  return PoolImpl::Acquire(impl_, cancel);
}

std::optional<Lease> Pool::TryAcquire() { return impl_->TryAcquire(); }

void Pool::Stop() { impl_->Stop(); }

PoolStats Pool::Stats() const { return impl_->Stats(); }

void Pool::Pause() { impl_->Pause(); }
void Pool::Resume() { impl_->Resume(); }
void Pool::Reconnect() { impl_->Reconnect(); }
std::vector<PoolServerInfo> Pool::Servers() const { return impl_->Servers(); }

absl::Status Pool::Update(PoolOptions options) {
  using std::chrono::milliseconds;
  if (options.max_size < 1) return absl::InvalidArgumentError("pool max_size must be at least 1");
  if (options.min_idle > options.max_size) return absl::InvalidArgumentError("pool min_idle must not exceed max_size");
  if (options.acquire_timeout <= milliseconds::zero() || options.idle_timeout <= milliseconds::zero() ||
      options.max_lifetime <= milliseconds::zero() || options.health_check_after < milliseconds::zero() ||
      options.connect_timeout <= milliseconds::zero()) {
    return absl::InvalidArgumentError("pool timeouts must be positive");
  }
  impl_->Update(options);
  return absl::OkStatus();
}

const PoolOptions& Pool::options() const { return impl_->options(); }

}  // namespace hyperpool
