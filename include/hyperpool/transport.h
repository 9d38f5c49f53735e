#pragma once
// The Transport plug-in: how a Client reaches an Endpoint.
//
// A Client opens one Link per application session. A Link is an ordered,
// reliable, duplex stream of bytes; the bytes are PostgreSQL v3 protocol
// messages (see docs/architecture.md, "The link protocol"): the Client sends
// a StartupMessage-shaped hello followed by frontend messages, the Endpoint
// answers with backend messages. Client and Endpoint share nothing that a
// Link does not carry, so the same halves work in one process
// (InProcessTransport) or across a network (a socket transport).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hyperpool {

// One end of a link. Each end is used by one coroutine at a time for reading
// and one for writing; the two ends may live on different executors.
class Link {
 public:
  virtual ~Link() = default;

  // Sends `bytes` (whole or partial protocol messages) to the peer, in order.
  // Completes when the peer end has accepted the bytes (bounded buffering:
  // a slow reader slows the writer). Fails once either end has closed.
  virtual asio::awaitable<absl::Status> Send(std::string bytes) = 0;

  // Sends `bytes` without suspending when the link can take them now (true:
  // taken, `bytes` is left empty); false: nothing was sent, use Send. A link
  // that can never do this (the default) says false at once. Not while a
  // Send of this end is pending.
  virtual bool TrySend(std::string& bytes) {
    (void)bytes;
    return false;
  }

  // Appends the next bytes from the peer to `buffer` (keeping what is already
  // there, so a caller can keep partial frames and reuse capacity). Returns
  // the number of bytes appended, or an error; absl::StatusCode::kCancelled /
  // kUnavailable when the peer closed the link.
  virtual asio::awaitable<absl::StatusOr<std::size_t>> Receive(std::string& buffer) = 0;

  // Receive without suspending, for a reader that holds no coroutine while
  // it waits (WhenReadable): appends what has arrived to `buffer` and returns
  // how many bytes, or Receive's error once the link has ended; nullopt when
  // nothing has arrived yet, and always from a link that cannot tell (the
  // default). Not while a Receive of this end is pending.
  virtual std::optional<absl::StatusOr<std::size_t>> TryReceive(std::string& buffer) {
    (void)buffer;
    return std::nullopt;
  }

  // Calls `ready` once, when TryReceive has something to return: bytes
  // arrived, or the link ended (either end closed). Never inside this call:
  // posted to `executor`, or (a direct link) run inside the peer's Send or
  // TrySend that delivered the bytes when that runs on `executor` and is
  // not itself inside such a callback. True: armed; false: this link cannot (the default), use
  // Receive. At most one at a time, and not while a Receive of this end is
  // pending.
  // (Move-only: a callback that captures one shared_ptr is stored without
  // an allocation of its own.)
  using ReadyCallback = absl::AnyInvocable<void()>;
  virtual bool WhenReadable(const asio::any_io_executor& executor, ReadyCallback ready) {
    (void)executor;
    (void)ready;
    return false;
  }

  // Closes both directions; pending and later operations on either end fail.
  virtual void Close() = 0;
};

// The Endpoint side: receives links opened by Clients.
class LinkAcceptor {
 public:
  virtual ~LinkAcceptor() = default;
  // Takes ownership of a newly opened link. Called on any thread; the
  // acceptor moves the work to its own executor.
  virtual void Accept(std::unique_ptr<Link> link) = 0;
};

// The Client side: opens links to an Endpoint.
class Transport {
 public:
  virtual ~Transport() = default;

  // Opens a link whose first message carries `initial_bytes` (the hello plus
  // whatever queries the Client has buffered), so no round trip is spent on
  // setting up the link before work starts. `executor` is where the caller's
  // end completes its operations.
  virtual asio::awaitable<absl::StatusOr<std::unique_ptr<Link>>> Open(asio::any_io_executor executor,
                                                                       std::string initial_bytes) = 0;

  // Where the Client should run the sessions whose links this transport
  // opens, if it has a preference: an in-process transport's Endpoint
  // executor, so that a session's unit of work never crosses threads
  // (links opened there are direct: no channel). None by default.
  virtual std::optional<asio::any_io_executor> session_executor() const { return std::nullopt; }

  // Which Endpoint new links go to, for a transport that chooses among
  // several (failover, placement): a number that changes whenever that
  // choice changes. A transport to one Endpoint keeps 0. The Client's
  // invalidation watch follows it (docs/architecture.md, "Invalidation").
  virtual std::uint64_t route() const { return 0; }
  // Calls `changed` after each change of route(), on any thread, with no
  // lock of the transport held; returns an id for RemoveRouteListener.
  // Thread-safe. A transport that never changes route never calls it.
  virtual std::uint64_t AddRouteListener(std::function<void()> changed) {
    (void)changed;
    return 0;
  }
  // After it returns, the listener is not called again (unless a call is
  // running on another thread right now). Thread-safe.
  virtual void RemoveRouteListener(std::uint64_t id) { (void)id; }
};

// A transport that connects Clients to an Endpoint in the same process.
// Links are pairs of bounded in-memory queues; no sockets, no copies beyond
// moving the chunk buffers. Given the executor the acceptor runs its
// sessions on (one that runs a handler at a time), it asks Clients to run
// their sessions there too (session_executor()), and links opened on it are
// direct (MakeDirectLinkPair).
std::unique_ptr<Transport> MakeInProcessTransport(LinkAcceptor& acceptor);
std::unique_ptr<Transport> MakeInProcessTransport(LinkAcceptor& acceptor, asio::any_io_executor acceptor_executor);

// A connected pair of in-process link ends, for tests and for the in-process
// transport: `first` completes on `first_executor`, `second` on
// `second_executor`. `capacity` bounds the chunks queued per direction.
struct LinkPair {
  std::unique_ptr<Link> first;
  std::unique_ptr<Link> second;
};
LinkPair MakeInProcessLinkPair(asio::any_io_executor first_executor, asio::any_io_executor second_executor,
                               std::size_t capacity = 64);
// A connected pair for two ends on one executor that runs one handler at a
// time (used, and safe, only there; each end completes on its caller's
// executor): no channel and no lock; a Send waits only when more than
// `limit` bytes sent are unread. `first_bytes` wait in the pipe from `first`
// to `second` already (however many: no Send waits for them).
inline constexpr std::size_t kDirectLinkLimit = 1 << 20;
LinkPair MakeDirectLinkPair(std::size_t limit = kDirectLinkLimit, std::string first_bytes = {});

// ---- The socket transport: Client and Endpoint on different machines ----
//
// One TCP connection per link, always under TLS (the Client verifies the
// Endpoint's certificate); after the handshake the Client proves that it
// knows a link secret shared with the Endpoint, then the link's bytes flow
// unchanged. See docs/architecture.md, "Socket transport".
//
// Link semantics are those of Link above, with one difference a network
// imposes: Close() fails the pending and later operations of its own end at
// once, but the peer learns of it from the stream: its Receive returns the
// bytes sent before the Close and then fails (kUnavailable), and its Send
// fails from then on (until then a Send may still complete: the bytes are
// discarded).

// The Client side's settings.
struct SocketTransportOptions {
  // Where the Endpoint's LinkListener listens: a DNS name or IP address.
  std::string host;
  std::uint16_t port = 0;
  // PEM file of the CA certificates that may sign the Endpoint's certificate
  // ("system": the TLS library's default trust store). Required.
  std::string tls_ca_file;
  // The name (DNS name or IP address) the Endpoint's certificate must carry
  // in its subjectAltName. Empty: `host`.
  std::string tls_server_name;
  // The secret shared with the Endpoint (its LinkListenerOptions::link_secret);
  // at least 16 bytes. It never crosses the wire (only an HMAC of it does).
  std::string link_secret;
  // How many links are kept ready (TCP, TLS and the secret done), spread over
  // the executors, so that Open() costs no round trip. 0 turns this off.
  std::size_t preopen = 4;
  // A ready link unused for this long is closed and replaced (keep it below
  // the Endpoint's LinkListenerOptions::first_bytes_timeout, and below idle
  // timeouts of NATs and firewalls in between).
  std::chrono::milliseconds preopen_max_idle{30000};
  // Limit for one connection's TCP connect and TLS handshake (and, for links
  // opened ahead, the Endpoint's answer to the secret).
  std::chrono::milliseconds connect_timeout{5000};
  // Receives a line when links cannot be opened ahead (the Endpoint is
  // unreachable, refuses the secret, ...) and when they can again. Optional;
  // called from worker threads.
  std::function<void(const std::string&)> log;
};

// Counters of a SocketTransport (cumulative unless marked as a gauge).
struct SocketTransportStats {
  std::size_t opened_preopened = 0;  // Open() calls served by a link opened ahead
  std::size_t opened_on_demand = 0;  // Open() calls that connected themselves
  std::size_t open_failures = 0;     // Open() calls that failed
  std::size_t preopen_ready = 0;     // gauge: links opened ahead and waiting now
  std::size_t preopen_failures = 0;  // background attempts to open one ahead that failed
  std::size_t preopen_expired = 0;   // ready links replaced after preopen_max_idle
  std::size_t preopen_dead = 0;      // ready links found closed by the Endpoint, discarded
};

// The Client side over TCP + TLS.
class SocketTransport : public Transport {
 public:
  // Opens a link: takes a ready one if there is (it carries `initial_bytes`
  // as its first message: no round trip), else connects now (the secret and
  // `initial_bytes` then go out together right after the TLS handshake).
  // Unavailable / DeadlineExceeded when the Endpoint cannot be reached within
  // connect_timeout, Unauthenticated when its certificate does not verify;
  // the message names the Endpoint's address. A secret the Endpoint rejects
  // surfaces as PermissionDenied from a link opened on demand's first
  // Receive, and in the log for links opened ahead.
  asio::awaitable<absl::StatusOr<std::unique_ptr<Link>>> Open(asio::any_io_executor executor,
                                                               std::string initial_bytes) override = 0;
  // Stops opening links ahead and closes the ready ones; later Open() calls
  // fail. Open links are not affected. Thread-safe, idempotent, does not
  // wait; the destructor calls it.
  virtual void Stop() = 0;
  // A snapshot of the counters (thread-safe).
  virtual SocketTransportStats Stats() const = 0;
};

// Creates a socket transport whose links complete on the executors they are
// opened for. Links are opened ahead on `executors` (the Client's workers;
// each distinct io_context gets its share of options.preopen), starting now.
// Fails (InvalidArgument) on bad options or an unreadable CA file; the
// Endpoint itself is reached lazily. Destroy the transport before the
// io_contexts of `executors` (like any Asio I/O object).
absl::StatusOr<std::unique_ptr<SocketTransport>> MakeSocketTransport(std::vector<asio::any_io_executor> executors,
                                                                     SocketTransportOptions options);

// The Endpoint side's settings.
struct LinkListenerOptions {
  // Address to listen on (an IP address; "0.0.0.0" or "::" for all). Port 0
  // picks a free port (see LinkListener::port()).
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  // PEM certificate chain (leaf first) and private key presented to Clients.
  std::string tls_cert_file;
  std::string tls_key_file;
  // The secret Clients must prove they know; at least 16 bytes.
  std::string link_secret;
  // Limit from TCP accept to a verified secret. A peer silent or too slow
  // for this long is disconnected.
  std::chrono::milliseconds handshake_timeout{10000};
  // How long a verified link may wait for its first message (Clients open
  // links ahead of need and replace unused ones after their
  // preopen_max_idle, so this should be longer).
  std::chrono::milliseconds first_bytes_timeout{120000};
  // Most connections in TLS handshake or proof at once; more are closed on
  // accept (bounded memory under a connection flood).
  std::size_t max_handshakes = 256;
  // Receives a line per notable event (rejected secrets, with the peer's
  // address; at most about one line a second). Optional; called on the
  // listener's executor.
  std::function<void(const std::string&)> log;
};

// Counters of a LinkListener (cumulative unless marked as a gauge).
struct LinkListenerStats {
  std::size_t accepted = 0;      // links handed to the LinkAcceptor
  std::size_t pending = 0;       // gauge: connections not handed over yet
  std::size_t tls_failures = 0;  // failed TLS handshakes (plaintext or broken clients)
  std::size_t rejected = 0;      // wrong secret or malformed proof frame
  std::size_t timeouts = 0;      // peers too slow for handshake_timeout
  std::size_t idle_closed = 0;   // verified links that sent nothing within first_bytes_timeout
  std::size_t refused = 0;       // connections closed at accept (max_handshakes reached)
};

// The Endpoint side: accepts TLS connections from SocketTransports, checks
// the secret, and hands each verified connection to a LinkAcceptor as a Link
// once its first bytes have arrived (so the acceptor's first Receive returns
// the hello and whatever came with it).
class LinkListener {
 public:
  virtual ~LinkListener() = default;
  // The port it listens on.
  virtual std::uint16_t port() const = 0;
  // Stops accepting and closes the connections not yet handed over. Links
  // already handed over belong to the acceptor. Thread-safe, idempotent,
  // does not wait; the destructor calls it.
  virtual void Stop() = 0;
  // A snapshot of the counters (thread-safe).
  virtual LinkListenerStats Stats() const = 0;
};

// Binds and starts listening (so port() is valid on return). Everything runs
// on `executor` (which must not run handlers concurrently: an io_context run
// by one thread, or a strand), and so do the links' ends: give the
// Endpoint's executor. `acceptor` must outlive the listener's work.
absl::StatusOr<std::unique_ptr<LinkListener>> MakeLinkListener(asio::any_io_executor executor, LinkAcceptor& acceptor,
                                                               LinkListenerOptions options);

}  // namespace hyperpool
