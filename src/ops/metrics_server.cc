#include "ops/metrics_server.h"

#include <fcntl.h>

#include <memory>
#include <optional>
#include <thread>
#include <unordered_set>
#include <tuple>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include "ops/dashboard.h"
#include "ops/exposition_writer.h"

namespace hyperpool::ops {

namespace {

using asio::ip::tcp;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

// The dashboard's page may run only its own script and talk only to this
// listener, and no other site may frame it.
constexpr std::string_view kDashboardHeaders =
    "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n"
    "X-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\n";

std::string Response(std::string_view status, std::string_view content_type, std::string_view body,
                     bool head_only, std::string_view extra_headers = {}) {
  std::string out = fmt::format(
      "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n{}Connection: close\r\n"
      "\r\n",
      status, content_type, body.size(), extra_headers);
  if (!head_only) out += body;
  return out;
}

}  // namespace

std::string BuildResponse(const HttpRequestHead& head, bool draining, const std::function<std::string()>& render,
                          const std::function<std::string()>& dashboard_json) {
  constexpr std::string_view kText = "text/plain; charset=utf-8";
  if (head.result != HttpRequestHead::Result::kComplete) {
    const bool too_large = head.error == "request head too large";
    return Response(too_large ? "431 Request Header Fields Too Large" : "400 Bad Request", kText,
                    head.error + "\n", false);
  }
  const bool head_only = head.method == "HEAD";
  const DashboardAsset* asset = dashboard_json ? FindDashboardAsset(head.path) : nullptr;
  const bool dashboard = asset != nullptr || (dashboard_json && head.path == "/dashboard.json");
  if (head.path != "/metrics" && head.path != "/healthz" && !dashboard) {
    return Response("404 Not Found", kText,
                    dashboard_json ? "not found: try /metrics, /healthz or /dashboard\n"
                                   : "not found: try /metrics or /healthz\n",
                    head_only);
  }
  if (head.method != "GET" && !head_only) {
    std::string out = Response("405 Method Not Allowed", kText, "only GET and HEAD\n", false);
    out.insert(out.find("\r\n") + 2, "Allow: GET, HEAD\r\n");
    return out;
  }
  if (head.path == "/healthz") {
    return draining ? Response("503 Service Unavailable", kText, "draining\n", head_only)
                    : Response("200 OK", kText, "ok\n", head_only);
  }
  if (asset) return Response("200 OK", asset->content_type, asset->body, head_only, kDashboardHeaders);
  if (dashboard) {
    return Response("200 OK", "application/json", dashboard_json(), head_only, kDashboardHeaders);
  }
  return Response("200 OK", ExpositionWriter::kContentType, render(), head_only);
}

struct MetricsServer::Impl {
  explicit Impl(MetricsServerOptions options_in, std::function<std::string()> render_in,
                std::function<std::string()> dashboard_in)
      : options(std::move(options_in)), render(std::move(render_in)), dashboard_json(std::move(dashboard_in)) {}

  asio::awaitable<void> AcceptLoop();
  asio::awaitable<void> Serve(std::shared_ptr<tcp::socket> socket);

  const MetricsServerOptions options;
  const std::function<std::string()> render;
  const std::function<std::string()> dashboard_json;
  // Connections being served; on the server's thread only. Stop() closes
  // them. Declared before `io`: the coroutine frames that io's destructor
  // destroys still erase themselves from it.
  std::unordered_set<std::shared_ptr<tcp::socket>> open;
  // Both reset by Stop() once the thread is joined: destroying the
  // io_context destroys the coroutines of connections not yet finished,
  // which closes their sockets.
  std::unique_ptr<asio::io_context> io = std::make_unique<asio::io_context>(1);
  std::optional<tcp::acceptor> acceptor{std::in_place, *io};
  std::thread thread;
  std::string address;
  std::uint16_t port = 0;
  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};
};

asio::awaitable<void> MetricsServer::Impl::AcceptLoop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor->async_accept(kAsTuple);
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) co_return;
    if (ec) {
      // Out of descriptors or similar: pause instead of spinning.
      asio::steady_timer pause(*io, std::chrono::milliseconds(50));
      co_await pause.async_wait(kAsTuple);
      continue;
    }
    if (int flags = ::fcntl(socket.native_handle(), F_GETFD); flags >= 0) {
      ::fcntl(socket.native_handle(), F_SETFD, flags | FD_CLOEXEC);
    }
    if (open.size() >= options.max_connections) continue;  // closed as `socket` goes
    // Counted from here, not from when Serve starts, so a burst of accepts
    // cannot exceed the bound.
    auto shared = std::make_shared<tcp::socket>(std::move(socket));
    open.insert(shared);
    asio::co_spawn(*io, Serve(std::move(shared)), asio::detached);
  }
}

// `socket` is shared with the watchdog, whose handler may run after this frame ends.
asio::awaitable<void> MetricsServer::Impl::Serve(std::shared_ptr<tcp::socket> socket) {
  struct Forget {
    Impl* impl;
    std::shared_ptr<tcp::socket> socket;
    ~Forget() { impl->open.erase(socket); }
  } forget{this, socket};
  // The watchdog closes a connection that has not sent its request head, or
  // taken its answer, in time; that ends the pending read or write.
  asio::steady_timer watchdog(*io, options.read_timeout);
  watchdog.async_wait([socket](const asio::error_code& ec) {
    if (ec) return;
    asio::error_code ignored;
    socket->close(ignored);
  });
  std::string received;
  char buffer[1024];
  HttpRequestHead head;
  while (head.result == HttpRequestHead::Result::kNeedMore) {
    auto [ec, n] = co_await socket->async_read_some(asio::buffer(buffer), kAsTuple);
    if (ec) co_return;  // peer gone or timed out: nothing to answer
    received.append(buffer, n);
    head = ParseRequestHead(received);
  }
  const std::string response = BuildResponse(head, draining.load(), render, dashboard_json);
  co_await asio::async_write(*socket, asio::buffer(response), kAsTuple);
  asio::error_code ignored;
  socket->shutdown(tcp::socket::shutdown_both, ignored);
  socket->close(ignored);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(MetricsServerOptions options,
                                                                    std::function<std::string()> render,
                                                                    std::function<std::string()> dashboard_json) {
  auto impl = std::make_unique<Impl>(std::move(options), std::move(render), std::move(dashboard_json));
  asio::error_code ec;
  std::string host = impl->options.host.empty() ? "127.0.0.1" : impl->options.host;
  if (host == "localhost") host = "127.0.0.1";
  asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec) return absl::InvalidArgumentError(fmt::format("metrics listen host '{}' is not an IP address", host));
  const tcp::endpoint local(address, impl->options.port);
  auto fail = [&](std::string_view what) {
    return absl::UnavailableError(
        fmt::format("cannot {} metrics address {}:{}: {}", what, host, impl->options.port, ec.message()));
  };
  impl->acceptor->open(local.protocol(), ec);
  if (ec) return fail("open a socket for");
  if (int flags = ::fcntl(impl->acceptor->native_handle(), F_GETFD); flags >= 0) {
    ::fcntl(impl->acceptor->native_handle(), F_SETFD, flags | FD_CLOEXEC);
  }
  impl->acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  impl->acceptor->bind(local, ec);
  if (ec) return fail("bind");
  impl->acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen on");
  impl->port = impl->acceptor->local_endpoint(ec).port();
  impl->address = address.is_v6() ? fmt::format("[{}]:{}", address.to_string(), impl->port)
                                  : fmt::format("{}:{}", address.to_string(), impl->port);
  asio::co_spawn(*impl->io, impl->AcceptLoop(), asio::detached);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->io->run(); });
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsServer::~MetricsServer() { Stop(); }

std::string MetricsServer::address() const { return impl_->address; }
std::uint16_t MetricsServer::port() const { return impl_->port; }
void MetricsServer::SetDraining(bool draining) { impl_->draining.store(draining); }

void MetricsServer::Stop() {
  if (impl_->stopped.exchange(true)) return;
  // On the server's thread: close the listener and the connections being
  // served, then stop; connections accepted but not yet served go with the
  // io_context below.
  asio::post(*impl_->io, [impl = impl_.get()] {
    asio::error_code ignored;
    impl->acceptor->close(ignored);
    for (const auto& socket : impl->open) socket->close(ignored);
    impl->io->stop();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->acceptor.reset();
  impl_->io.reset();
}

}  // namespace hyperpool::ops
