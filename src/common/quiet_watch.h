// QuietWatch: many sockets' readability behind one Asio wait
// (docs/architecture.md, "What an idle session holds"). A Client session
// whose app stays quiet past the idle sweep gives up its own Asio
// readability wait (an operation of ~150 bytes, held for as long as the app
// is quiet) and is watched here instead: one epoll set per worker, whose
// descriptor is the one Asio wait. When a watched socket becomes readable
// (data, a hang-up, an error) its holder is handed to `wake` once and
// forgotten: it reads, and waits on Asio again, the fast path of a busy
// session. Confined to one executor that runs one handler at a time.
#ifndef HYPERPOOL_COMMON_QUIET_WATCH_H_
#define HYPERPOOL_COMMON_QUIET_WATCH_H_

#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <system_error>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/posix/stream_descriptor.hpp>

#include "absl/container/flat_hash_map.h"

namespace hyperpool {

template <typename T>
class QuietWatch {
 public:
  // `wake` runs on the executor for each watched socket that became
  // readable, with the holder Watch() was given.
  using Wake = void (*)(std::shared_ptr<T>);
  QuietWatch(const asio::any_io_executor& executor, Wake wake) : state_(std::make_shared<State>(executor, wake)) {
    const int fd = ::epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0) return;
    std::error_code ec;
    state_->epoll.assign(fd, ec);
    if (ec) ::close(fd);
  }
  QuietWatch(const QuietWatch&) = delete;
  QuietWatch& operator=(const QuietWatch&) = delete;
  // The holders still watched are dropped without a call, when the
  // cancelled wait's handler runs or the io_context is destroyed.
  ~QuietWatch() = default;

  // Watches `fd` for readability, holding `holder` until it wakes or is
  // forgotten. False: not watched (no epoll set here, or the kernel
  // refused): the caller keeps waiting its own way.
  bool Watch(int fd, std::shared_ptr<T> holder) {
    State& s = *state_;
    if (!s.epoll.is_open() || fd < 0) return false;
    std::shared_ptr<Holders> holders = s.holders.lock();
    if (holders && holders->contains(fd)) return false;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
    ev.data.fd = fd;
    if (::epoll_ctl(s.epoll.native_handle(), EPOLL_CTL_ADD, fd, &ev) != 0) return false;
    if (!holders) {
      holders = std::make_shared<Holders>();
      s.holders = holders;
    }
    holders->emplace(fd, std::move(holder));
    Arm(state_, holders);
    return true;
  }

  // Stops watching `fd` (before it is closed): its holder, or null if it
  // was not watched.
  std::shared_ptr<T> Forget(int fd) {
    State& s = *state_;
    std::shared_ptr<Holders> holders = s.holders.lock();
    if (!holders) return nullptr;
    auto it = holders->find(fd);
    if (it == holders->end()) return nullptr;
    std::shared_ptr<T> holder = std::move(it->second);
    holders->erase(it);
    ::epoll_ctl(s.epoll.native_handle(), EPOLL_CTL_DEL, fd, nullptr);
    return holder;
  }

  std::size_t size() const {
    std::shared_ptr<Holders> holders = state_->holders.lock();
    return holders ? holders->size() : 0;
  }

 private:
  using Holders = absl::flat_hash_map<int, std::shared_ptr<T>>;
  struct State {
    State(const asio::any_io_executor& executor, Wake w) : epoll(executor), wake(w) {}
    asio::posix::stream_descriptor epoll;
    // Owned by the pending wait's handler (there is one whenever a socket
    // is watched), not by the watch: when the io_context is destroyed
    // without running it, the holders go with it (a watch that owned them
    // would keep its owner alive through them: the Client's sessions hold
    // the Client).
    std::weak_ptr<Holders> holders;
    const Wake wake;
    bool armed = false;
  };

  static void Arm(const std::shared_ptr<State>& state, std::shared_ptr<Holders> holders) {
    if (state->armed || holders->empty()) return;
    state->armed = true;
    state->epoll.async_wait(asio::posix::stream_descriptor::wait_read,
                            [weak = std::weak_ptr<State>(state), holders](std::error_code ec) {
                              std::shared_ptr<State> s = weak.lock();
                              if (!s) return;
                              s->armed = false;
                              if (!ec) Drain(*s, *holders);
                              if (!ec || ec == std::errc::interrupted) Arm(s, holders);
                            });
  }

  // Hands every ready socket's holder to `wake` (which may watch or forget
  // others meanwhile).
  static void Drain(State& s, Holders& holders) {
    constexpr int kBatch = 64;
    epoll_event events[kBatch];
    for (;;) {
      const int n = ::epoll_wait(s.epoll.native_handle(), events, kBatch, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        auto it = holders.find(fd);
        if (it == holders.end()) continue;
        std::shared_ptr<T> holder = std::move(it->second);
        holders.erase(it);
        ::epoll_ctl(s.epoll.native_handle(), EPOLL_CTL_DEL, fd, nullptr);
        s.wake(std::move(holder));
      }
      if (n < kBatch) return;
    }
  }

  std::shared_ptr<State> state_;  // the wait's handler holds it weakly
};

}  // namespace hyperpool

#endif  // HYPERPOOL_COMMON_QUIET_WATCH_H_
