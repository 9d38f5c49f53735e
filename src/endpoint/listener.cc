#include "endpoint/listener.h"

#include <algorithm>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "protocol/codec.h"

namespace hyperpool::endpoint {
namespace {
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);
}  // namespace

ListenerConnection::ListenerConnection(asio::any_io_executor executor, Connect connect, Deliver deliver,
                                       Options options)
    : executor_(executor),
      connect_(std::move(connect)),
      deliver_(std::move(deliver)),
      options_(options),
      wake_(executor) {}

void ListenerConnection::NotifyAll() {
  for (asio::steady_timer* t : waiters_) t->cancel();
}

asio::awaitable<void> ListenerConnection::WaitChange(std::chrono::steady_clock::time_point deadline) {
  asio::steady_timer timer(executor_, deadline);
  waiters_.push_back(&timer);
  (void)co_await timer.async_wait(kAsTuple);
  waiters_.erase(std::remove(waiters_.begin(), waiters_.end(), &timer), waiters_.end());
}

asio::awaitable<void> ListenerConnection::Set(Subscriber subscriber, std::set<std::string> channels) {
  const ListenRegistry::Change change = registry_.Set(subscriber, channels);
  if (change.empty() || stopped_) co_return;
  if (!started_) {
    started_ = true;
    running_.store(true);  // from now until Run ends (Endpoint::Stop waits for it)
    asio::co_spawn(executor_, [self = shared_from_this()]() { return self->Run(); }, asio::detached);
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.confirm_timeout;
  if (state_ == State::kUp) {
    const std::uint64_t seq = Enqueue(BuildListenerQuery(change));
    if (change.to_listen.empty()) co_return;  // UNLISTEN needs no confirmation
    const OriginConnection* conn = conn_.get();
    while (!stopped_ && conn_.get() == conn && state_ == State::kUp && acked_ < seq &&
           std::chrono::steady_clock::now() < deadline) {
      co_await WaitChange(deadline);
    }
    co_return;
  }
  if (change.to_listen.empty()) co_return;  // the next connection LISTENs the union anyway
  // Not connected: the connection being opened LISTENs the whole union
  // (this subscription included) as its first Query.
  if (state_ == State::kIdle) wake_.cancel();
  const std::uint64_t failures = failures_;
  while (!stopped_ && failures_ == failures && !(state_ == State::kUp && acked_ >= 1) &&
         std::chrono::steady_clock::now() < deadline) {
    co_await WaitChange(deadline);
  }
}

asio::awaitable<void> ListenerConnection::Barrier() {
  if (stopped_ || state_ != State::kUp) co_return;
  const std::uint64_t seq = Enqueue(";");  // EmptyQueryResponse, then ReadyForQuery
  if (seq == 0) co_return;
  const auto deadline = std::chrono::steady_clock::now() + options_.barrier_timeout;
  const OriginConnection* conn = conn_.get();
  while (!stopped_ && conn_.get() == conn && state_ == State::kUp && acked_ < seq &&
         std::chrono::steady_clock::now() < deadline) {
    co_await WaitChange(deadline);
  }
}

void ListenerConnection::Remove(Subscriber subscriber) { Apply(registry_.Remove(subscriber)); }

void ListenerConnection::Apply(const ListenRegistry::Change& change) {
  if (change.empty() || state_ != State::kUp) return;  // reconnecting LISTENs the union as it is then
  (void)Enqueue(BuildListenerQuery(change));
}

std::uint64_t ListenerConnection::Enqueue(const std::string& sql) {
  if (state_ != State::kUp || conn_ == nullptr || sql.empty()) return 0;
  protocol::Encode(protocol::Query{sql}, outbox_);
  const std::uint64_t seq = ++sent_;
  if (!writing_) {
    writing_ = true;
    asio::co_spawn(executor_, [self = shared_from_this()]() { return self->Flush(); }, asio::detached);
  }
  return seq;
}

asio::awaitable<void> ListenerConnection::Flush() {
  // writing_ is already true: set by Enqueue so that only one Flush runs.
  while (!outbox_.empty() && conn_ != nullptr && !conn_->broken()) {
    std::string bytes = std::move(outbox_);
    outbox_.clear();
    absl::Status st = co_await conn_->Write(bytes);
    if (!st.ok()) {
      conn_->CloseNow();  // the read loop ends and reconnects
      break;
    }
  }
  writing_ = false;
  NotifyAll();
}

void ListenerConnection::Stop() {
  stopped_ = true;
  if (conn_ != nullptr) conn_->CloseNow();
  wake_.cancel();
  NotifyAll();
  if (!started_) running_.store(false);
}

asio::awaitable<void> ListenerConnection::Run() {
  std::shared_ptr<ListenerConnection> self = shared_from_this();  // alive until the loop ends
  auto backoff = options_.min_backoff;
  while (!stopped_) {
    if (registry_.channel_count() == 0) {
      state_ = State::kIdle;  // no one listens: no connection needed
      wake_.expires_at(asio::steady_timer::time_point::max());
      (void)co_await wake_.async_wait(kAsTuple);
      continue;
    }
    state_ = State::kConnecting;
    ConnectResult r = co_await connect_();
    if (stopped_) break;
    if (!r.ok()) {
      ++failures_;
      NotifyAll();
      fmt::print(stderr, "hyperpool: the LISTEN connection could not log in to the origin (retrying in {} ms): {}\n",
                 backoff.count(), r.failure.message);
      wake_.expires_after(backoff);
      (void)co_await wake_.async_wait(kAsTuple);
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    conn_ = std::move(r.connection);
    state_ = State::kUp;
    sent_ = acked_ = 0;
    outbox_.clear();
    if (ever_up_) reconnects_++;
    ever_up_ = true;
    backoff = options_.min_backoff;
    // The union of every session's channels, as of now.
    (void)Enqueue(BuildListenerQuery({registry_.Channels(), {}}));
    co_await ReadLoop();
    // Down: wait for a Write in progress to fail before the connection goes.
    state_ = State::kConnecting;
    conn_->CloseNow();
    while (writing_) co_await WaitChange(std::chrono::steady_clock::now() + std::chrono::seconds(1));
    conn_.reset();
    NotifyAll();
    if (!stopped_) fmt::print(stderr, "hyperpool: the LISTEN connection to the origin was lost; reopening it\n");
  }
  state_ = State::kIdle;
  if (conn_ != nullptr) {
    conn_->CloseNow();
    while (writing_) co_await WaitChange(std::chrono::steady_clock::now() + std::chrono::seconds(1));
    conn_.reset();
  }
  NotifyAll();
  running_.store(false);
}

asio::awaitable<void> ListenerConnection::ReadLoop() {
  std::vector<Subscriber> subscribers;
  for (;;) {
    auto frame = co_await conn_->ReadFrame();
    if (!frame.ok()) co_return;
    switch (frame->tag) {
      case 'A': {
        auto n = protocol::DecodeNotificationResponse(frame->payload);
        if (!n.ok()) break;
        subscribers = registry_.SubscribersOf(n->channel);  // a copy: delivery must not see changes
        for (Subscriber s : subscribers) deliver_(s, frame->raw);
        break;
      }
      case 'Z':
        ++acked_;
        NotifyAll();
        break;
      case 'E': {
        auto e = protocol::DecodeErrorResponse(frame->payload);
        fmt::print(stderr, "hyperpool: the LISTEN connection's statement failed: {}\n",
                   e.ok() ? std::string(e->message()) : std::string("(undecodable error)"));
        break;
      }
      default:
        break;  // CommandComplete, NoticeResponse, ParameterStatus
    }
  }
}

}  // namespace hyperpool::endpoint
