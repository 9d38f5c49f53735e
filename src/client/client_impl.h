#pragma once
// Internal to src/client/: the Client's shared state (Client::Impl) and the
// small helpers that client.cc and the session (client_session.h) both use.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "absl/container/flat_hash_map.h"
#include "client/client_cache.h"
#include "client/client_core.h"
#include "client/client_util.h"
#include "client/invalidation_watch.h"
#include "client/server_handshake.h"
#include "client/statement_metadata.h"
#include "common/buffer_pool.h"
#include "common/idle_sweep.h"
#include "common/quiet_watch.h"
#include "common/intern_table.h"
#include "hyperpool/client.h"
#include "ops/latency_histogram.h"
#include "protocol/codec.h"
#include "protocol/sqlstate.h"
#include "tls/tls_context.h"

namespace hyperpool {

// These were client.cc's anonymous namespace. The constants are constexpr and
// the functions static inline, so they keep internal linkage in each file
// that includes this header; pr and tcp read as they did in client.cc.
namespace pr = protocol;
using asio::ip::tcp;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

static inline void Log(std::string_view line) {
  std::string text = fmt::format("hyperpool client: {}\n", line);
  std::fwrite(text.data(), 1, text.size(), stderr);
}

static inline std::string ErrorFrame(const pr::PoolerError& error) {
  std::string out;
  pr::AppendError(out, "FATAL", error);
  return out;
}

class ClientSession;  // client_session.h
// The Client's idle sweep's visit (client_session.cc).
void SweepIdleClientSession(ClientSession& session);
// A quiet session's app socket became readable (QuietWatch).
void WakeQuietClientSession(std::shared_ptr<ClientSession> session);

// How long a session stays idle before the Client's idle sweep gives back
// its per-unit state (Client::Impl::IdleSweep), as the Endpoint's
// kIdleSweepDelay.
constexpr std::chrono::milliseconds kClientIdleSweepDelay{100};

struct Client::Impl : std::enable_shared_from_this<Client::Impl> {
  Impl(std::vector<asio::any_io_executor> executors_in, Transport& transport_in, ClientOptions options_in)
      : executors(std::move(executors_in)),
        transport(transport_in),
        options(std::move(options_in)),
        accept_strand(asio::make_strand(executors[0])),
        acceptor(accept_strand),
        unix_acceptor(accept_strand) {
    MakeIdleSweeps();
  }

  // Coroutines take `self` so that the Impl outlives them.
  asio::awaitable<void> AcceptLoop(std::shared_ptr<Impl> self);
  asio::awaitable<void> UnixAcceptLoop(std::shared_ptr<Impl> self);
  // The executor the next session runs on (round robin over the workers).
  asio::any_io_executor NextSessionExecutor();
  // Starts a session on an accepted socket (bound to its session executor).
  // `peer`: the app's address as accept() returned it (nullopt on the Unix
  // listener).
  void StartSession(std::shared_ptr<Impl> self, tcp::socket socket, std::optional<tcp::endpoint> peer);
  asio::awaitable<void> Probe(std::shared_ptr<Impl> self);
  void Stop();

  // Requires `mu`: opens a probe link unless one is in flight.
  void StartProbeLocked();
  // Stores fresh origin parameters and wakes the sessions waiting for them.
  void PublishParams(client::ParamList params);
  // Wakes the waiting sessions with `error_frame` (an ErrorResponse).
  void FailParams(std::string error_frame);

  // The idle sweep (common/idle_sweep.h, as the Endpoint's) of the
  // sessions on one executor that runs one handler at a time (the
  // in-process Endpoint's, or a worker's with one_thread_per_executor): a
  // session whose ReadyForQuery 'I' went out queues itself
  // (ClientSession::NoteIdle), and those still idle kClientIdleSweepDelay
  // later give back their per-unit state (ClientCore::ReleaseIdleState).
  // With it, the executor's spare read buffers: a session that parks
  // (ClientSession::ParkApp) gives its empty app read buffer here and the
  // next read on the executor takes it, so an idle session holds no read
  // buffer and a busy executor allocates none per message.
  // And the executor's QuietWatch: a session the sweep finds idle and
  // parked gives up its Asio readability wait and waits there
  // (ClientSession::GoQuiet), so a quiet app's session holds no operation.
  // Touched only on `executor`.
  struct IdleSweep {
    explicit IdleSweep(asio::any_io_executor ex)
        : executor(std::move(ex)),
          sweep(kClientIdleSweepDelay, &SweepIdleClientSession),
          quiet(executor, &WakeQuietClientSession) {}
    asio::any_io_executor executor;
    hyperpool::IdleSweep<ClientSession> sweep;
    BufferPool buffers;
    QuietWatch<ClientSession> quiet;
  };
  // The sweep of sessions on `executor`, or null (sessions on strands of
  // a shared io_context keep their state: no sweep is theirs alone).
  IdleSweep* IdleSweepFor(const asio::any_io_executor& executor);
  void MakeIdleSweeps();

  const std::vector<asio::any_io_executor> executors;
  // Fixed at construction (MakeIdleSweeps); each used on its executor only.
  std::vector<std::unique_ptr<IdleSweep>> idle_sweeps;
  Transport& transport;
  const ClientOptions options;
  // User, database, the verifier of options.password (computed once) and
  // the mock secret for unknown users: what every session's handshake needs.
  client::HandshakeConfig handshake_config;
  // TLS offered to applications (options.ssl_cert_file); empty: SSLRequest gets 'N'.
  std::optional<tls::ServerContext> app_tls;
  // options.logger, or Logger::Default().
  std::shared_ptr<const Logger> logger;
  std::string connection_string;
  asio::strand<asio::any_io_executor> accept_strand;
  tcp::acceptor acceptor;                // used on accept_strand only
  // Open when options.listen_unix_dir is set; accept_strand only.
  asio::local::stream_protocol::acceptor unix_acceptor;
  std::string unix_socket_path;  // removed by Stop()
  std::atomic<size_t> accepted{0};
  // ClientStats::login_time: observed once per app login by its session
  // (relaxed atomics: no lock, as the Endpoint's transaction_time).
  ops::LatencyHistogram login_time;
  std::atomic<uint64_t> next_session_id{1};  // ClientSessionInfo::id
  // Bytes of sessions that ended (guarded by mu); live ones count their own.
  uint64_t bytes_received_closed = 0;
  uint64_t bytes_sent_closed = 0;
  std::unique_ptr<Link> probe_link;      // used on accept_strand only
  std::atomic<size_t> next_executor{0};
  std::atomic<bool> stopping{false};

  std::mutex mu;
  // The origin's reported parameters from the latest link-ready answer.
  std::optional<client::ParamList> params;
  bool probe_in_flight = false;
  std::vector<std::weak_ptr<ClientSession>> params_waiters;
  absl::flat_hash_map<const ClientSession*, std::weak_ptr<ClientSession>> sessions;
  // A cancel request's key: its session's id and database (a cancel link
  // goes where its session's link went) are read from the session, under
  // mu, which the session writes them under.
  struct CancelTarget {
    std::array<char, 4> secret{};
    const ClientSession* session = nullptr;
  };
  absl::flat_hash_map<int32_t, CancelTarget> cancel_keys;

  // The Client cache tier (client_cache.h); null when caching is off.
  std::shared_ptr<client::ClientTier> cache;
  // Its invalidation watch (invalidation_watch.h); null when off.
  std::shared_ptr<client::InvalidationWatch> watch;
  // Statement metadata answered locally (statement_metadata.h): protocol
  // work, kept with the cache on or off.
  std::shared_ptr<client::StatementMetadataStore> metadata;
  // What every session's ClientCore works with (the two above, the limits):
  // one copy per Client, not per session.
  client::ClientCore::Config core_config;
  // Sent in every link hello (hyperpool.client_id): the Endpoint sends
  // invalidations to one link of each Client.
  std::string client_id;
  // HYPERPOOL_TRACE_LINK: log every flight to the link (link_trace.h).
  bool trace_link = false;
  // Flights sent over links that the app waits for (link_trace.h,
  // ExpectsAnswer): the WAN round trips its sessions cost.
  std::atomic<uint64_t> link_flights{0};
  // Links an idle session ended at the Endpoint's offer (ClientSession::
  // ReleaseLink); ClientStats::links_released.
  std::atomic<uint64_t> links_released{0};
  // Sessions that went quiet (their app socket watched by a QuietWatch)
  // and that woke from it; ClientStats::quiet_parks / quiet_wakes.
  std::atomic<uint64_t> quiet_parks{0};
  std::atomic<uint64_t> quiet_wakes{0};
  std::atomic<int64_t> quiet_now{0};  // sessions quiet now; ClientStats::quiet_sessions
  // The sessions' startup parameters, kept once per distinct set for the
  // hellos of the links they open (guarded by mu): a session that lets its
  // link go opens another with the same hello.
  InternTable<client::ParamList> hello_params;
  // The sessions' cache-key bases (client::SessionKey: database and startup
  // parameters), one per distinct one (guarded by mu; core_config.intern_key).
  InternTable<std::string> key_bases;
};

}  // namespace hyperpool
