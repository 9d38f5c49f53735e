// In-process links, two kinds:
//  - Channel links: each direction is a bounded asio concurrent_channel of
//    byte chunks. A chunk is moved, never copied, from sender to receiver;
//    the channel's completion runs on the receiving coroutine's own
//    executor, so the two ends may live on different worker threads
//    ("cross-worker work is a post to the owner"). The end of a stream is an
//    empty chunk carrying asio::error::eof, so bytes sent just before
//    Close() are never lost.
//  - Direct links: both ends on one executor that runs one handler at a
//    time (an io_context run by one thread, or a strand). No channel, no
//    lock: a Send appends to the peer's inbox and resumes its waiting
//    Receive (one post), or runs its WhenReadable callback at once
//    (WakeReader); a Receive with bytes waiting returns at once. A
//    Send waits only when the peer has more than its limit unread. The
//    in-process transport uses them for sessions on the Endpoint's own
//    executor (docs/architecture.md, "Threads").

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/concurrent_channel.hpp>
#include <asio/use_awaitable.hpp>

#include "common/fifo_channel.h"
#include "hyperpool/transport.h"

namespace hyperpool {
namespace {

using Channel = asio::experimental::basic_concurrent_channel<asio::any_io_executor, FifoChannelTraits<>,
                                                             void(asio::error_code, std::string)>;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

struct Pipe {
  Pipe(asio::any_io_executor executor, std::size_t capacity)
      : a_to_b(executor, capacity), b_to_a(executor, capacity) {}
  Channel a_to_b;
  Channel b_to_a;
  // Orders a sender's parking on a full channel against Close() (either
  // end, any thread): a Send parks before the closing cancel() (which wakes
  // it) or starts after close() (and fails at once), never in between.
  std::mutex park_mutex;
};

class InProcessLink final : public Link {
 public:
  InProcessLink(std::shared_ptr<Pipe> pipe, Channel& out, Channel& in)
      : pipe_(std::move(pipe)), out_(out), in_(in) {}
  ~InProcessLink() override { Close(); }

  asio::awaitable<absl::Status> Send(std::string bytes) override {
    if (closed_) co_return absl::CancelledError("link closed");
    if (bytes.empty()) co_return absl::OkStatus();
    auto [ec] = co_await asio::async_initiate<decltype(kAsTuple), void(asio::error_code)>(
        [this](auto handler, std::string chunk) {
          // Channel completions are posted (never run inline), so holding
          // the lock here cannot re-enter it.
          std::lock_guard<std::mutex> lock(pipe_->park_mutex);
          out_.async_send(asio::error_code{}, std::move(chunk), std::move(handler));
        },
        kAsTuple, std::move(bytes));
    if (ec) co_return absl::UnavailableError("link closed by peer");
    co_return absl::OkStatus();
  }

  asio::awaitable<absl::StatusOr<std::size_t>> Receive(std::string& buffer) override {
    if (closed_ || peer_done_) co_return absl::UnavailableError("link closed");
    auto [ec, chunk] = co_await in_.async_receive(kAsTuple);
    if (ec) {
      peer_done_ = true;
      co_return absl::UnavailableError(ec == asio::error::eof ? "link closed by peer" : "link closed");
    }
    std::size_t n = chunk.size();
    if (buffer.empty()) {
      buffer.swap(chunk);  // keeps the chunk's allocation instead of copying
    } else {
      buffer.append(chunk);
    }
    co_return n;
  }

  void Close() override {
    if (closed_.exchange(true)) return;
    std::lock_guard<std::mutex> lock(pipe_->park_mutex);
    // Tell the peer the stream ended after everything already queued; if the
    // queue is full the peer is not reading anyway, so close it outright.
    // A channel's close() completes waiting receivers only: a Send of ours
    // parked on the full queue would wait forever (the Endpoint's Pump did,
    // after a client vanished mid-COPY TO without reading: issue 15), so
    // cancel the waiters first. cancel() must come before close(): once
    // closed, asio no longer tells waiting senders from receivers.
    if (!out_.try_send(asio::error::eof, std::string())) {
      out_.cancel();
      out_.close();
    }
    // Our peer's sends towards us must fail from now on, the ones already
    // waiting for room too (and our own pending Receive, as documented).
    in_.cancel();
    in_.close();
  }

 private:
  std::shared_ptr<Pipe> pipe_;
  Channel& out_;
  Channel& in_;
  std::atomic<bool> closed_{false};  // Close() may come from another thread
  bool peer_done_ = false;
};

// ----- Direct links -------------------------------------------------------

// A parked Send or Receive: its completion, type-erased (move-only).
class Parked {
 public:
  virtual ~Parked() = default;
  // Resumes the parked coroutine (posted to its executor, never inline).
  virtual void Complete(asio::error_code ec) = 0;
};

template <typename Handler>
class ParkedHandler final : public Parked {
 public:
  explicit ParkedHandler(Handler handler) : handler_(std::move(handler)) {}
  void Complete(asio::error_code ec) override {
    auto executor = asio::get_associated_executor(handler_);
    asio::post(executor, [h = std::move(handler_), ec]() mutable { h(ec); });
  }

 private:
  Handler handler_;
};

struct DirectPipe {
  struct Direction {
    std::string inbox;                // sent, not yet received
    bool writer_closed = false;       // the sending end closed: after the inbox, end of stream
    bool reader_closed = false;       // the receiving end closed: sends fail
    std::unique_ptr<Parked> receiver;  // a Receive waiting for bytes
    std::unique_ptr<Parked> sender;    // a Send waiting for the inbox to drain
    // A WhenReadable waiting for bytes, held here rather than as a Parked:
    // parking and waking it allocates nothing (a callback that captures a
    // shared_ptr is stored inside the AnyInvocable itself).
    Link::ReadyCallback ready;
    asio::any_io_executor ready_executor;
  };
  explicit DirectPipe(std::size_t limit) : limit(limit) {}
  const std::size_t limit;  // unread bytes a Send may leave before it waits
  Direction a_to_b;
  Direction b_to_a;
};

void Wake(std::unique_ptr<Parked>& parked, asio::error_code ec) {
  if (!parked) return;
  std::unique_ptr<Parked> p = std::move(parked);
  p->Complete(ec);
}

// True while this thread runs a WhenReadable callback inline from its
// peer's send (WakeReader): a send made inside it posts its wake-up, so
// the two halves nest at most one level and neither is ever re-entered
// (a half that sends from inside the other's callback finds its own
// callback posted, as before). An execution guard of the calling thread,
// as Asio's own call stack, not shared state: nothing else reads it.
thread_local bool t_delivering_inline = false;

// Whether `executor` is the one this thread is running a handler of now
// (an io_context's or a strand's executor; any other kind: no).
bool RunningIn(const asio::any_io_executor& executor) {
  if (const auto* io = executor.target<asio::io_context::executor_type>()) return io->running_in_this_thread();
  if (const auto* strand = executor.target<asio::strand<asio::io_context::executor_type>>()) {
    return strand->running_in_this_thread();
  }
  return false;
}

// Wakes what waits to read `d`: a parked Receive (posted), or a
// WhenReadable callback. The callback runs inline when `from_send` (a Send
// or TrySend of the peer delivered bytes), this thread is already running
// the callback's executor, and it is not itself inside such a callback:
// the reader's work then happens in the sender's handler, without a post
// and a pass through the scheduler (two per query in `serve`, one each
// way: issue 26). Otherwise it is posted. Nothing of `d` is touched after
// the callback, which may end either side's session.
void WakeReader(DirectPipe::Direction& d, asio::error_code ec, bool from_send = false) {
  Wake(d.receiver, ec);
  if (d.ready) {
    Link::ReadyCallback ready = std::move(d.ready);
    d.ready = nullptr;
    if (from_send && !t_delivering_inline && RunningIn(d.ready_executor)) {
      t_delivering_inline = true;
      struct Reset {
        ~Reset() { t_delivering_inline = false; }
      } reset;
      ready();
      return;
    }
    asio::post(d.ready_executor, std::move(ready));
  }
}

class DirectLink final : public Link {
 public:
  DirectLink(std::shared_ptr<DirectPipe> pipe, DirectPipe::Direction& out, DirectPipe::Direction& in)
      : pipe_(std::move(pipe)), out_(out), in_(in) {}
  ~DirectLink() override { Close(); }

  asio::awaitable<absl::Status> Send(std::string bytes) override {
    if (closed_) co_return absl::CancelledError("link closed");
    if (out_.reader_closed) co_return absl::UnavailableError("link closed by peer");
    if (bytes.empty()) co_return absl::OkStatus();
    Deliver(bytes);
    while (out_.inbox.size() > pipe_->limit && !out_.reader_closed && !closed_) {
      auto [ec] = co_await Park(out_.sender);
      if (ec) break;
    }
    if (closed_) co_return absl::CancelledError("link closed");
    if (out_.reader_closed) co_return absl::UnavailableError("link closed by peer");
    co_return absl::OkStatus();
  }

  bool TrySend(std::string& bytes) override {
    if (closed_ || out_.reader_closed || out_.inbox.size() + bytes.size() > pipe_->limit) return false;
    if (!bytes.empty()) Deliver(bytes);
    return true;
  }

  asio::awaitable<absl::StatusOr<std::size_t>> Receive(std::string& buffer) override {
    for (;;) {
      if (std::optional<absl::StatusOr<std::size_t>> r = TryReceive(buffer)) co_return *std::move(r);
      auto [ec] = co_await Park(in_.receiver);
      if (ec) co_return absl::UnavailableError("link closed");
    }
  }

  std::optional<absl::StatusOr<std::size_t>> TryReceive(std::string& buffer) override {
    if (closed_) return absl::StatusOr<std::size_t>(absl::UnavailableError("link closed"));
    if (!in_.inbox.empty()) {
      const std::size_t n = in_.inbox.size();
      if (buffer.empty()) {
        buffer.swap(in_.inbox);  // keeps the chunk's allocation instead of copying
      } else {
        buffer.append(in_.inbox);
      }
      in_.inbox.clear();
      Wake(in_.sender, {});
      return absl::StatusOr<std::size_t>(n);
    }
    if (in_.writer_closed) return absl::StatusOr<std::size_t>(absl::UnavailableError("link closed by peer"));
    return std::nullopt;
  }

  bool WhenReadable(const asio::any_io_executor& executor, ReadyCallback ready) override {
    if (closed_ || !in_.inbox.empty() || in_.writer_closed) {
      asio::post(executor, std::move(ready));
    } else {
      if (in_.ready_executor != executor) in_.ready_executor = executor;
      in_.ready = std::move(ready);
    }
    return true;
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    // The peer reads what was sent before this, then the end of the stream.
    out_.writer_closed = true;
    WakeReader(out_, {});
    Wake(out_.sender, asio::error::operation_aborted);  // our own Send, if parked
    // The peer's sends towards us fail from now on (a parked one too), and
    // so does our own pending Receive.
    in_.reader_closed = true;
    in_.inbox.clear();
    Wake(in_.sender, asio::error::operation_aborted);
    WakeReader(in_, asio::error::operation_aborted);
  }

 private:
  // Appends `bytes` (non-empty) to the peer's inbox, leaving `bytes` empty,
  // and wakes its waiting Receive. Into an empty inbox the string itself
  // moves: the receiver takes its allocation as it is.
  void Deliver(std::string& bytes) {
    if (out_.inbox.empty()) {
      out_.inbox.swap(bytes);
    } else {
      out_.inbox += bytes;
    }
    bytes.clear();
    WakeReader(out_, {}, /*from_send=*/true);
  }

  // Suspends until Wake(`slot`, ec).
  asio::awaitable<std::tuple<asio::error_code>> Park(std::unique_ptr<Parked>& slot) {
    return asio::async_initiate<decltype(kAsTuple), void(asio::error_code)>(
        [&slot](auto handler) {
          slot = std::make_unique<ParkedHandler<std::decay_t<decltype(handler)>>>(std::move(handler));
        },
        kAsTuple);
  }

  std::shared_ptr<DirectPipe> pipe_;
  DirectPipe::Direction& out_;
  DirectPipe::Direction& in_;
  bool closed_ = false;
};

class InProcessTransport final : public Transport {
 public:
  InProcessTransport(LinkAcceptor& acceptor, std::optional<asio::any_io_executor> acceptor_executor)
      : acceptor_(acceptor), acceptor_executor_(std::move(acceptor_executor)) {}

  std::optional<asio::any_io_executor> session_executor() const override { return acceptor_executor_; }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Link>>> Open(asio::any_io_executor executor,
                                                               std::string initial_bytes) override {
    // A session on the acceptor's own executor talks to it without a
    // channel or a thread hop.
    if (acceptor_executor_ && executor == *acceptor_executor_) {
      // The first message waits in the pipe, whatever its size: the
      // Endpoint's session, which drains it, starts only with Accept.
      LinkPair pair = MakeDirectLinkPair(kDirectLinkLimit, std::move(initial_bytes));
      acceptor_.Accept(std::move(pair.second));
      co_return std::move(pair.first);
    }
    LinkPair pair = MakeInProcessLinkPair(executor, executor);
    // The first chunk is queued before the acceptor sees the link, so the
    // Endpoint's first read returns the hello and the buffered queries at once.
    if (!initial_bytes.empty()) {
      absl::Status sent = co_await pair.first->Send(std::move(initial_bytes));
      if (!sent.ok()) co_return sent;
    }
    acceptor_.Accept(std::move(pair.second));
    co_return std::move(pair.first);
  }

 private:
  LinkAcceptor& acceptor_;
  std::optional<asio::any_io_executor> acceptor_executor_;
};

}  // namespace

LinkPair MakeInProcessLinkPair(asio::any_io_executor first_executor, asio::any_io_executor second_executor,
                               std::size_t capacity) {
  // Channels complete on the awaiting coroutine's executor; the one given to
  // the channel only serves operations that have no executor of their own.
  auto pipe = std::make_shared<Pipe>(first_executor, capacity);
  LinkPair pair;
  pair.first = std::make_unique<InProcessLink>(pipe, pipe->a_to_b, pipe->b_to_a);
  pair.second = std::make_unique<InProcessLink>(pipe, pipe->b_to_a, pipe->a_to_b);
  (void)second_executor;
  return pair;
}

LinkPair MakeDirectLinkPair(std::size_t limit, std::string first_bytes) {
  auto pipe = std::make_shared<DirectPipe>(limit);
  pipe->a_to_b.inbox = std::move(first_bytes);
  LinkPair pair;
  pair.first = std::make_unique<DirectLink>(pipe, pipe->a_to_b, pipe->b_to_a);
  pair.second = std::make_unique<DirectLink>(pipe, pipe->b_to_a, pipe->a_to_b);
  return pair;
}

std::unique_ptr<Transport> MakeInProcessTransport(LinkAcceptor& acceptor) {
  return std::make_unique<InProcessTransport>(acceptor, std::nullopt);
}

std::unique_ptr<Transport> MakeInProcessTransport(LinkAcceptor& acceptor, asio::any_io_executor acceptor_executor) {
  return std::make_unique<InProcessTransport>(acceptor, std::move(acceptor_executor));
}

}  // namespace hyperpool
