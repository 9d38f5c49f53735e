// An io_context run by a thread of its own, for tests whose parts live on
// different executors.
#pragma once

#include <thread>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>

namespace hyperpool::testing {

struct IoWorker {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard{io.get_executor()};
  std::thread thread{[this] { io.run(); }};
  std::thread::id id() const { return thread.get_id(); }
  void Stop() {
    guard.reset();
    io.stop();
    if (thread.joinable()) thread.join();
  }
  ~IoWorker() { Stop(); }
};

}  // namespace hyperpool::testing
