#pragma once
// A condition variable for coroutines on one executor: Wait() suspends until
// the next Notify(). Callers re-check their condition in a loop (no lost
// wake-ups on a single executor, since nothing runs between the check and
// the wait); a Notify() with nobody waiting is not remembered.
//
// Why a zero-capacity channel and not a steady_timer set to max() and
// cancelled (what this replaced): the Endpoint notifies once per frame and
// waits once per unit of work, and a timer takes the reactor's mutex and its
// timer heap on every wait and cancel. A channel on one executor takes no
// lock; its completion is posted to the waiter's executor (never run inside
// Notify), as a cancelled timer's was.

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/channel.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <memory>
#include <utility>

#include "common/fifo_channel.h"

namespace hyperpool::endpoint {

class Signal {
 public:
  Signal() = default;

  asio::awaitable<void> Wait() {
    // The channel is made by the first wait, on the waiter's executor: most
    // sessions never wait on most of their signals (an idle session parks
    // with callbacks), and each channel is ~150 bytes.
    if (!channel_) channel_ = std::make_unique<Channel>(co_await asio::this_coro::executor, 0);
    ++waiting_;
    (void)co_await channel_->async_receive(asio::experimental::as_tuple(asio::use_awaitable));
    --waiting_;
  }

  // Wakes every coroutine waiting now (each try_send hands the message to
  // one waiter; with capacity 0 it fails once nobody waits). With nobody
  // waiting it costs a compare: it is called after every event.
  void Notify() {
    if (waiting_ == 0) return;
    while (channel_->try_send(asio::error_code{}, true)) {
    }
  }

 private:
  // (void(error_code) alone is ambiguous in Asio 1.22's channel_traits.)
  // Capacity 0: its buffer never holds anything, so it allocates nothing
  // (FifoChannelTraits; the default deque took 576 bytes per signal).
  using Channel =
      asio::experimental::basic_channel<asio::any_io_executor, FifoChannelTraits<>, void(asio::error_code, bool)>;
  // Waits begun and not yet resumed (a resumption already handed a message
  // but not yet run still counts: Notify then tries once more, harmlessly).
  int waiting_ = 0;
  std::unique_ptr<Channel> channel_;
};

}  // namespace hyperpool::endpoint
