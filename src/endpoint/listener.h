#pragma once
// The Endpoint's listener connection (docs/architecture.md, "Session
// state"): one origin connection per Endpoint, outside the transaction
// pool's cap, that LISTENs on the union of the channels its sessions listen
// on (ListenRegistry, listen_state.h) and fans every NotificationResponse out
// to each session listening on that channel. Sessions therefore never pin a
// pooled connection for LISTEN, and an idle session still gets its
// notifications.
//
// Opened on the first subscription with the Endpoint's own origin login. If
// it dies it is reopened with exponential backoff, and the new connection
// LISTENs the whole union again (a notification sent while it is down is
// lost: PostgreSQL queues notifications only for backends that listen).
// Everything runs on the Endpoint's executor.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>

#include "endpoint/listen_state.h"
#include "endpoint/origin_connection.h"

namespace hyperpool::endpoint {

class ListenerConnection : public std::enable_shared_from_this<ListenerConnection> {
 public:
  using Subscriber = ListenRegistry::Subscriber;
  // Opens a logged-in origin connection (the Endpoint's connector).
  using Connect = std::function<asio::awaitable<ConnectResult>()>;
  // One NotificationResponse for one subscriber: the frame as the origin
  // sent it (tag and length included).
  using Deliver = std::function<void(Subscriber subscriber, std::string_view raw_frame)>;

  struct Options {
    std::chrono::milliseconds min_backoff{100};   // first wait after a failure
    std::chrono::milliseconds max_backoff{5000};  // the wait doubles up to this
    // How long Set() waits for the listener connection to confirm its
    // LISTEN before giving up (the subscription stays and is LISTENed once
    // the connection is back).
    std::chrono::milliseconds confirm_timeout{10000};
    // How long Barrier() waits at most.
    std::chrono::milliseconds barrier_timeout{1000};
  };

  ListenerConnection(asio::any_io_executor executor, Connect connect, Deliver deliver, Options options);

  // Makes `subscriber`'s channel set `channels`. Completes once the listener
  // connection has run the LISTENs this needs, so a NOTIFY sent after it
  // cannot be missed; or at once if nothing changed, or after
  // confirm_timeout / a failed connect attempt (then the subscription is
  // LISTENed when the connection comes back).
  asio::awaitable<void> Set(Subscriber subscriber, std::set<std::string> channels);
  // Completes once every notification committed before the call has been
  // handed to Deliver: an empty Query on the listener connection, whose
  // backend sends the notifications signalled to it before that Query's
  // ReadyForQuery (PostgreSQL does so for every ReadyForQuery outside a
  // transaction). At once when the connection is not up; at most
  // barrier_timeout. A session whose unit may have notified a channel it
  // listens on waits for this before its own ReadyForQuery, as a direct
  // connection delivers self-notifications before it.
  asio::awaitable<void> Barrier();
  // The subscriber is gone: its channels no one else listens on are
  // UNLISTENed.
  void Remove(Subscriber subscriber);
  // Whether `subscriber` listens on `channel` here.
  bool Listens(Subscriber subscriber, std::string_view channel) const { return registry_.Listens(subscriber, channel); }
  const std::set<std::string>& ChannelsOf(Subscriber subscriber) const { return registry_.ChannelsOf(subscriber); }
  // Whether any subscriber listens on any channel here.
  bool HasChannels() const { return registry_.channel_count() != 0; }

  // Closes the connection; the run loop ends (running() turns false).
  void Stop();
  // Thread-safe.
  bool running() const { return running_.load(); }
  // Times the connection was reopened after it had been up.
  std::size_t reconnects() const { return reconnects_.load(); }

 private:
  enum class State {
    kIdle,        // no connection and none wanted yet (no subscriber so far)
    kConnecting,  // ConnectOrigin runs (or the backoff wait before it)
    kUp,          // logged in; LISTENs are sent on it
  };

  asio::awaitable<void> Run();
  asio::awaitable<void> ReadLoop();
  // Queues `sql` as a simple Query on the live connection; returns its
  // sequence number on this connection (0 if there is none).
  std::uint64_t Enqueue(const std::string& sql);
  asio::awaitable<void> Flush();
  void Apply(const ListenRegistry::Change& change);
  void NotifyAll();
  asio::awaitable<void> WaitChange(std::chrono::steady_clock::time_point deadline);

  asio::any_io_executor executor_;
  Connect connect_;
  Deliver deliver_;
  Options options_;
  ListenRegistry registry_;

  State state_ = State::kIdle;
  bool started_ = false;
  bool stopped_ = false;
  std::unique_ptr<OriginConnection> conn_;
  std::string outbox_;             // Query frames not yet written
  bool writing_ = false;           // Flush is inside conn_->Write
  std::uint64_t sent_ = 0;         // Queries queued on this connection
  std::uint64_t acked_ = 0;        // their ReadyForQuery seen
  std::uint64_t failures_ = 0;     // connect attempts that failed
  bool ever_up_ = false;
  asio::steady_timer wake_;        // Run's wait for the first subscriber / backoff
  std::vector<asio::steady_timer*> waiters_;  // Set() calls waiting for progress

  std::atomic<bool> running_{false};
  std::atomic<std::size_t> reconnects_{0};
};

}  // namespace hyperpool::endpoint
