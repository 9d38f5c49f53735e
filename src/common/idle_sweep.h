// IdleSweep: what a session gives back once it has stayed idle a while
// (docs/architecture.md, "What an idle session holds"). A session that
// goes idle queues itself (Note); one timer, armed only while some wait,
// fires `delay` after the first and calls `visit` on each queued session
// still alive, which checks it is still idle and gives back what it can.
// Not at once: a session between two transactions would free its state and
// make it again for the next. Used by both halves: the Endpoint's sessions
// (their buffers, the query cache's per-unit state, sleep) and the
// Client's (the extended-protocol state). Confined to one executor that
// runs one handler at a time; a wait that outlives the sweep (its timer's
// destruction cancels it) touches nothing.
#ifndef HYPERPOOL_COMMON_IDLE_SWEEP_H_
#define HYPERPOOL_COMMON_IDLE_SWEEP_H_

#include <chrono>
#include <memory>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

namespace hyperpool {

template <typename T>
class IdleSweep {
 public:
  // `visit` runs for each session queued since the last sweep and still alive.
  using Visit = void (*)(T&);
  IdleSweep(std::chrono::milliseconds delay, Visit visit) : state_(std::make_shared<State>(delay, visit)) {}

  // Queues `session` (its owner queues it once per sweep) and arms the
  // timer on `executor` unless it is armed.
  void Note(const asio::any_io_executor& executor, std::weak_ptr<T> session) {
    State& s = *state_;
    s.queued.push_back(std::move(session));
    if (s.armed) return;
    if (!s.timer) s.timer.emplace(executor);
    s.armed = true;
    s.timer->expires_after(s.delay);
    s.timer->async_wait([weak = std::weak_ptr<State>(state_)](std::error_code) {
      std::shared_ptr<State> state = weak.lock();
      if (!state) return;
      state->armed = false;
      std::vector<std::weak_ptr<T>> queued;
      queued.swap(state->queued);
      for (const std::weak_ptr<T>& w : queued) {
        if (std::shared_ptr<T> session = w.lock()) state->visit(*session);
      }
    });
  }

 private:
  struct State {
    State(std::chrono::milliseconds d, Visit v) : delay(d), visit(v) {}
    const std::chrono::milliseconds delay;
    const Visit visit;
    std::vector<std::weak_ptr<T>> queued;
    std::optional<asio::steady_timer> timer;  // made at the first Note
    bool armed = false;
  };
  std::shared_ptr<State> state_;
};

}  // namespace hyperpool

#endif  // HYPERPOOL_COMMON_IDLE_SWEEP_H_
