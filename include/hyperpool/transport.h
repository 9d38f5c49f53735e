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

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

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

  // Appends the next bytes from the peer to `buffer` (keeping what is already
  // there, so a caller can keep partial frames and reuse capacity). Returns
  // the number of bytes appended, or an error; absl::StatusCode::kCancelled /
  // kUnavailable when the peer closed the link.
  virtual asio::awaitable<absl::StatusOr<std::size_t>> Receive(std::string& buffer) = 0;

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
};

// A transport that connects Clients to an Endpoint in the same process.
// Links are pairs of bounded in-memory queues; no sockets, no copies beyond
// moving the chunk buffers.
std::unique_ptr<Transport> MakeInProcessTransport(LinkAcceptor& acceptor);

// A connected pair of in-process link ends, for tests and for the in-process
// transport: `first` completes on `first_executor`, `second` on
// `second_executor`. `capacity` bounds the chunks queued per direction.
struct LinkPair {
  std::unique_ptr<Link> first;
  std::unique_ptr<Link> second;
};
LinkPair MakeInProcessLinkPair(asio::any_io_executor first_executor, asio::any_io_executor second_executor,
                               std::size_t capacity = 64);

}  // namespace hyperpool
