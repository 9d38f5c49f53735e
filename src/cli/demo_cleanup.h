// Cleanup actions of `hyperpool demo` that must run however the demo ends:
// normally, on an error return, or on SIGINT/SIGTERM/SIGHUP (a watcher thread
// runs them, then exits the process). Each action runs at most once, in
// reverse order of registration; RunAll is thread-safe.
#ifndef HYPERPOOL_CLI_DEMO_CLEANUP_H_
#define HYPERPOOL_CLI_DEMO_CLEANUP_H_

#include <functional>
#include <mutex>
#include <utility>
#include <vector>

namespace hyperpool::cli::demo {

class CleanupList {
 public:
  // Returns an id for Forget().
  size_t Add(std::function<void()> action) {
    std::lock_guard lock(mu_);
    actions_.push_back(std::move(action));
    return actions_.size() - 1;
  }

  // Drops an action that its owner has already performed.
  void Forget(size_t id) {
    std::lock_guard lock(mu_);
    if (id < actions_.size()) actions_[id] = nullptr;
  }

  void RunAll() {
    std::lock_guard lock(mu_);
    while (!actions_.empty()) {
      std::function<void()> action = std::move(actions_.back());
      actions_.pop_back();
      if (action) action();
    }
  }

 private:
  std::mutex mu_;
  std::vector<std::function<void()>> actions_;
};

}  // namespace hyperpool::cli::demo

#endif  // HYPERPOOL_CLI_DEMO_CLEANUP_H_
