// Internals shared by origin_connection.cc (the connection) and
// origin_login.cc (connecting and logging in to the origin, cancels):
// the stream behind an OriginConnection and two small helpers. Not a
// public header.

#ifndef HYPERPOOL_ENDPOINT_ORIGIN_STREAM_H_
#define HYPERPOOL_ENDPOINT_ORIGIN_STREAM_H_


#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <poll.h>

#include <asio/connect.hpp>
#include <asio/post.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include "absl/functional/any_invocable.h"

#include "protocol/auth/password.h"
#include "protocol/auth/scram.h"
#include "protocol/codec.h"
#include "protocol/sqlstate.h"
#include "tls/tls_context.h"
#include "tls/tls_stream.h"


namespace hyperpool::endpoint {
namespace origin_detail {

constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);
// Bytes asked of the socket per read when the pending frame's size allows.
constexpr std::size_t kReadChunk = 16 * 1024;
// Largest single growth of the read buffer: a declared 1 GiB message is read
// in steps, so memory follows the bytes that really arrive.
constexpr std::size_t kMaxReadStep = 1024 * 1024;
// A read buffer larger than this is released once it is empty again.
constexpr std::size_t kKeepBufferCapacity = 1024 * 1024;

// One line, bounded: peer text goes into logs and error messages.
inline std::string OneLine(std::string_view text, std::size_t max = 300) {
  std::string out;
  out.reserve(std::min(text.size(), max));
  for (char c : text) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    out.push_back(c == '\n' || c == '\r' || c == '\t' ? ' ' : c);
  }
  return out;
}

inline OriginFailure Failure(ValidationFailure kind, std::string_view sqlstate, std::string message) {
  return OriginFailure{kind, std::string(sqlstate), std::move(message)};
}

}  // namespace origin_detail

using origin_detail::kAsTuple;

// ---------------------------------------------------------------------------
// The stream: plain TCP, Unix socket or TLS behind one small interface.
// ---------------------------------------------------------------------------

class OriginConnection::Stream {
 public:
  using Variant = std::variant<asio::ip::tcp::socket, asio::local::stream_protocol::socket, tls::TlsStream>;
  explicit Stream(Variant v) : v_(std::move(v)) {}

  asio::awaitable<absl::StatusOr<std::size_t>> ReadSome(asio::mutable_buffer buffer) {
    if (auto* t = std::get_if<tls::TlsStream>(&v_)) {
      auto n = co_await t->ReadSome(buffer);
      if (n.ok() && *n == 0) co_return absl::UnavailableError("the origin closed the connection");
      co_return n;
    }
    std::error_code ec;
    std::size_t n = 0;
    if (auto* s = std::get_if<asio::ip::tcp::socket>(&v_)) {
      std::tie(ec, n) = co_await s->async_read_some(buffer, kAsTuple);
    } else {
      auto& u = std::get<asio::local::stream_protocol::socket>(v_);
      std::tie(ec, n) = co_await u.async_read_some(buffer, kAsTuple);
    }
    if (n > 0) co_return n;
    if (ec == asio::error::eof || !ec) co_return absl::UnavailableError("the origin closed the connection");
    if (ec == asio::error::operation_aborted) co_return absl::CancelledError("origin read cancelled");
    co_return absl::UnavailableError(fmt::format("reading from the origin failed: {}", ec.message()));
  }

  asio::awaitable<absl::Status> WriteAll(asio::const_buffer buffer) {
    if (auto* t = std::get_if<tls::TlsStream>(&v_)) co_return co_await t->WriteAll(buffer);
    std::error_code ec;
    std::size_t n = 0;
    if (auto* s = std::get_if<asio::ip::tcp::socket>(&v_)) {
      std::tie(ec, n) = co_await asio::async_write(*s, buffer, kAsTuple);
    } else {
      auto& u = std::get<asio::local::stream_protocol::socket>(v_);
      std::tie(ec, n) = co_await asio::async_write(u, buffer, kAsTuple);
    }
    if (ec == asio::error::operation_aborted) co_return absl::CancelledError("origin write cancelled");
    if (ec) co_return absl::UnavailableError(fmt::format("writing to the origin failed: {}", ec.message()));
    co_return absl::OkStatus();
  }

  // Writes what the socket takes now, without waiting: the bytes written,
  // 0 when it would block or for TLS (whose records only WriteAll makes);
  // `*failed` on a socket error.
  std::size_t TryWrite(asio::const_buffer buffer, bool* failed) {
    std::error_code ec;
    std::size_t n = 0;
    if (auto* s = std::get_if<asio::ip::tcp::socket>(&v_)) {
      if (!s->non_blocking()) s->non_blocking(true, ec);
      if (!ec) n = s->write_some(buffer, ec);
    } else if (auto* u = std::get_if<asio::local::stream_protocol::socket>(&v_)) {
      if (!u->non_blocking()) u->non_blocking(true, ec);
      if (!ec) n = u->write_some(buffer, ec);
    } else {
      return 0;
    }
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) *failed = true;
    return ec ? 0 : n;
  }

  // Reads what a plain socket has now, without waiting: the bytes read, 0
  // when none are there yet; nullopt for TLS (only ReadSome reads it).
  // EOF and socket errors as ReadSome's.
  std::optional<absl::StatusOr<std::size_t>> TryReadSome(asio::mutable_buffer buffer) {
    std::error_code ec;
    std::size_t n = 0;
    if (auto* s = std::get_if<asio::ip::tcp::socket>(&v_)) {
      if (!s->non_blocking()) s->non_blocking(true, ec);
      if (!ec) n = s->read_some(buffer, ec);
    } else if (auto* u = std::get_if<asio::local::stream_protocol::socket>(&v_)) {
      if (!u->non_blocking()) u->non_blocking(true, ec);
      if (!ec) n = u->read_some(buffer, ec);
    } else {
      return std::nullopt;
    }
    if (ec == asio::error::would_block || ec == asio::error::try_again) return absl::StatusOr<std::size_t>(0);
    if (n > 0) return absl::StatusOr<std::size_t>(n);
    if (ec == asio::error::eof || !ec) {
      return absl::StatusOr<std::size_t>(absl::UnavailableError("the origin closed the connection"));
    }
    return absl::StatusOr<std::size_t>(
        absl::UnavailableError(fmt::format("reading from the origin failed: {}", ec.message())));
  }

  void Close() {
    std::error_code ignored;
    if (auto* t = std::get_if<tls::TlsStream>(&v_)) {
      t->socket().close(ignored);
    } else if (auto* s = std::get_if<asio::ip::tcp::socket>(&v_)) {
      s->close(ignored);
    } else {
      std::get<asio::local::stream_protocol::socket>(v_).close(ignored);
    }
  }

  // Calls `handler(ec)` once the socket is readable (bytes or EOF) or the
  // wait fails or is cancelled. Reads nothing, so TLS state is untouched.
  // (Move-only: a handler capturing one shared_ptr allocates nothing here.)
  void AsyncWaitReadable(absl::AnyInvocable<void(std::error_code)> handler) {
    if (auto* t = std::get_if<tls::TlsStream>(&v_)) {
      t->socket().async_wait(asio::socket_base::wait_read, std::move(handler));
    } else if (auto* s = std::get_if<asio::ip::tcp::socket>(&v_)) {
      s->async_wait(asio::socket_base::wait_read, std::move(handler));
    } else {
      std::get<asio::local::stream_protocol::socket>(v_).async_wait(asio::socket_base::wait_read,
                                                                     std::move(handler));
    }
  }
  asio::any_io_executor executor() {
    if (auto* t = std::get_if<tls::TlsStream>(&v_)) return t->socket().get_executor();
    if (auto* s = std::get_if<asio::ip::tcp::socket>(&v_)) return s->get_executor();
    return std::get<asio::local::stream_protocol::socket>(v_).get_executor();
  }
  // Whether the socket is readable now (bytes or EOF), without reading or
  // blocking: one poll(). Reads nothing, so TLS state is untouched.
  bool ReadableNow() {
    pollfd p{};
    if (auto* t = std::get_if<tls::TlsStream>(&v_)) {
      p.fd = t->socket().native_handle();
    } else if (auto* s = std::get_if<asio::ip::tcp::socket>(&v_)) {
      p.fd = s->native_handle();
    } else {
      p.fd = std::get<asio::local::stream_protocol::socket>(v_).native_handle();
    }
    p.events = POLLIN;
    const int n = ::poll(&p, 1, 0);
    return n != 0;  // readable, hung up, or poll failed: treat as spoken
  }
  // Cancels a pending AsyncWaitReadable (nothing else is pending while idle).
  void CancelWait() {
    std::error_code ignored;
    if (auto* t = std::get_if<tls::TlsStream>(&v_)) {
      t->socket().cancel(ignored);
    } else if (auto* s = std::get_if<asio::ip::tcp::socket>(&v_)) {
      s->cancel(ignored);
    } else {
      std::get<asio::local::stream_protocol::socket>(v_).cancel(ignored);
    }
  }

  tls::TlsStream* tls() { return std::get_if<tls::TlsStream>(&v_); }
  const tls::TlsStream* tls() const { return std::get_if<tls::TlsStream>(&v_); }

 private:
  Variant v_;
};

}  // namespace hyperpool::endpoint

#endif  // HYPERPOOL_ENDPOINT_ORIGIN_STREAM_H_
