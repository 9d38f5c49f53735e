// The Endpoint half: per-link sessions that lend pooled origin connections
// per unit of work (docs/architecture.md, "The link protocol" and "Failure
// handling"). The Asio-heavy translation unit of the Endpoint's data path.
//
// A session runs two coroutines on the Endpoint's executor:
//  - Run() reads the link: the hello, then frontend frames, which it
//    forwards raw to the lent origin connection (acquiring one when a unit
//    of work starts) or answers locally (pool exhausted, failed transaction).
//  - Pump() is the only writer of the link: it forwards origin frames raw,
//    batched into one Send per burst, and the locally made answers, in order.
// The session counts outstanding requests (each Query, Sync and
// FunctionCall sent adds one; each ReadyForQuery removes one) and gives the
// connection back only through DecideRelease (src/pool/release_policy.h).
//
// Lifetime rule that keeps a connection from being destroyed under a
// pending operation: the lease is released only when neither coroutine is
// inside an operation on the connection (`writing_`, `pump_reading_`).
// Whoever finishes last releases it; the other only closes the socket
// (CloseNow), which makes the pending operation fail promptly.

#include "hyperpool/endpoint.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <future>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "absl/strings/cord.h"
#include "endpoint/copy_tracker.h"
#include "endpoint/endpoint_cache.h"
#include "endpoint/notification_pid.h"
#include "endpoint/listen_state.h"
#include "endpoint/listener.h"
#include "endpoint/origin_config.h"
#include "endpoint/origin_connection.h"
#include "endpoint/origin_password.h"
#include "endpoint/pin_budget.h"
#include "endpoint/session_timeouts.h"
#include "endpoint/session_settings.h"
#include "endpoint/settings_replay.h"
#include "endpoint/signal.h"
#include "endpoint/statement_session.h"
#include "ops/latency_histogram.h"
#include "placement/probe.h"
#include "pool/pool.h"
#include "pool/release_policy.h"
#include "protocol/codec.h"

namespace hyperpool {
namespace {

using endpoint::OriginConnection;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

// The payload key under which a connect failure's SQLSTATE travels through
// the pool's absl::Status.
constexpr char kSqlStatePayload[] = "type.hyperpool/sqlstate";

// One Send to the link carries at most about this much (a burst of small
// frames becomes one Send; a large result becomes several).
constexpr std::size_t kMaxLinkBatch = 256 * 1024;
// Frontend bytes written to the origin in one go.
constexpr std::size_t kMaxOriginBatch = 256 * 1024;
// A session buffer that grew past this for one large message is freed once
// empty, so an idle session does not keep the message's size.
constexpr std::size_t kKeepBufferCapacity = 256 * 1024;
void ReleaseIfLarge(std::string& buffer) {
  if (buffer.empty() && buffer.capacity() > kKeepBufferCapacity) std::string().swap(buffer);
}
// Locally made answers waiting for the link before Run() stops reading.
constexpr std::size_t kMaxLocalBacklog = 1024 * 1024;

constexpr std::string_view kSqlStateTooManyConnections = "53300";
constexpr std::string_view kSqlStateQueryCanceled = "57014";
constexpr std::string_view kSqlStateIdleInTransactionTimeout = "25P03";
constexpr std::string_view kSqlStateProtocolViolation = "08P01";
constexpr std::string_view kSqlStateAdminShutdown = "57P01";

absl::Status FailureToStatus(const endpoint::OriginFailure& failure) {
  absl::Status status;
  switch (failure.failure) {
    case ValidationFailure::kBadCredentials:
      status = absl::PermissionDeniedError(failure.message);
      break;
    case ValidationFailure::kNoSuchDatabase:
      status = absl::NotFoundError(failure.message);
      break;
    case ValidationFailure::kTimeout:
      status = absl::DeadlineExceededError(failure.message);
      break;
    default:
      status = absl::UnavailableError(failure.message);
      break;
  }
  status.SetPayload(kSqlStatePayload, absl::Cord(failure.sqlstate));
  return status;
}

// The SQLSTATE to report to the app for a failed Acquire().
std::string SqlStateOf(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kResourceExhausted) return std::string(kSqlStateTooManyConnections);
  if (status.code() == absl::StatusCode::kCancelled) return std::string(kSqlStateAdminShutdown);
  if (auto payload = status.GetPayload(kSqlStatePayload); payload && !payload->empty()) {
    return std::string(*payload);
  }
  return std::string(endpoint::kSqlStateCannotConnect);
}

std::string AcquireErrorMessage(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    return "Failed to acquire a connection from the pool";
  }
  if (status.code() == absl::StatusCode::kCancelled) return "hyperpool endpoint is shutting down";
  // The origin's own error (settings replay) or a cancel before the work started.
  if (status.code() == absl::StatusCode::kAborted) return std::string(status.message());
  return fmt::format("hyperpool could not connect to the origin database: {}", std::string(status.message()));
}

void AppendReadyForQuery(std::string& out, char status) {
  protocol::AppendFrame(out, 'Z', std::string_view(&status, 1));
}

TransactionStatus ToPoolStatus(char status) {
  switch (status) {
    case 'I': return TransactionStatus::kIdle;
    case 'T': return TransactionStatus::kInTransaction;
    case 'E': return TransactionStatus::kFailed;
    default: return TransactionStatus::kNone;
  }
}

using endpoint::Signal;  // endpoint/signal.h

}  // namespace

class Session;

struct Endpoint::Impl : std::enable_shared_from_this<Endpoint::Impl> {
  asio::any_io_executor executor;
  EndpointOptions options;
  std::shared_ptr<const OriginConfig> config;
  std::unique_ptr<Pool> pool;
  // The Endpoint cache tier (endpoint_cache.h); created with the pool.
  std::shared_ptr<endpoint::EndpointCache> cache;

  // Executor-only state.
  // The origin's ParameterStatus set as of the most recent login (link-ready).
  std::vector<std::pair<std::string, std::string>> origin_parameters;
  std::unordered_set<Session*> sessions;
  // Sessions by their hello's hyperpool.session_id: where cancel links go.
  std::unordered_map<std::string, Session*> sessions_by_id;
  // One server-side name per distinct prepared statement (statement_registry.h).
  endpoint::StatementCatalog statements;
  // Sessions holding a pinned connection outside the pool's cap (pin_budget.h).
  endpoint::PinBudget pin_budget{1};
  // The last session serial given out (sequence_state.h: never reused).
  std::uint64_t last_session_serial = 0;
  // Origin backend pid -> app pid of its last session (notification_pid.h).
  endpoint::NotifierPids notifier_pids;
  // LISTEN/NOTIFY without pinning (listener.h): the listener connection and
  // the sessions it delivers to, by subscriber id.
  std::shared_ptr<endpoint::ListenerConnection> listener;
  std::unordered_map<endpoint::ListenRegistry::Subscriber, Session*> listen_sessions;
  endpoint::ListenRegistry::Subscriber next_listen_id = 0;

  // Thread-safe.
  std::atomic<bool> stopped{false};
  std::atomic<std::thread::id> executor_thread{};
  std::atomic<std::size_t> session_count{0};
  std::atomic<std::size_t> watch_count{0};  // invalidation watch links (not sessions)
  std::atomic<std::size_t> transactions{0};
  std::atomic<std::size_t> queries{0};
  ops::LatencyHistogram transaction_time;  // observed at each ReadyForQuery 'I'
  ops::LatencyHistogram acquire_wait;      // observed at each unit's pool Acquire()
  std::atomic<std::size_t> acquire_timeouts{0};
  std::atomic<std::size_t> discarded{0};
  std::atomic<std::size_t> pending_cancels{0};
  std::atomic<std::size_t> pinned_sessions{0};
  std::atomic<std::size_t> pinned_connections{0};
  std::atomic<std::size_t> pins_rejected{0};
  std::atomic<std::size_t> pinned_idle_timeouts{0};
  std::array<std::atomic<std::size_t>, static_cast<std::size_t>(kLastPinReason) + 1> pins{};
  std::atomic<std::size_t> cancels_forwarded{0};
  std::atomic<std::size_t> cancels_ignored{0};
  std::atomic<std::size_t> notifications_delivered{0};
  std::mutex mutex;
  std::condition_variable sessions_done;

  // Origin round trips (executor only), and their minimum for Stats().
  static constexpr std::size_t kRttWindow = 8;
  std::array<std::chrono::microseconds, kRttWindow> rtt_samples{};
  std::size_t rtt_count = 0;
  std::chrono::steady_clock::time_point rtt_measured_at{};
  bool rtt_refreshing = false;  // a background probe measurement runs
  std::atomic<std::size_t> origin_rtt_us{0};

  void NoteThread() { executor_thread.store(std::this_thread::get_id(), std::memory_order_relaxed); }

  void RecordOriginRtt(std::chrono::microseconds rtt) {
    rtt_samples[rtt_count++ % kRttWindow] = rtt;
    rtt_measured_at = std::chrono::steady_clock::now();
    const std::size_t n = std::min(rtt_count, kRttWindow);
    auto best = *std::min_element(rtt_samples.begin(), rtt_samples.begin() + static_cast<std::ptrdiff_t>(n));
    origin_rtt_us.store(static_cast<std::size_t>(std::max<std::int64_t>(1, best.count())));
  }
};

namespace {

// An empty-query round trip on `conn`, recorded as an origin RTT sample.
asio::awaitable<absl::Status> TimedPing(std::weak_ptr<Endpoint::Impl> weak, OriginConnection& conn) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = co_await conn.Ping();
  if (status.ok()) {
    if (auto self = weak.lock()) {
      self->RecordOriginRtt(
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start));
    }
  }
  co_return status;
}

// Borrows a pooled connection for one timed empty query (an origin RTT
// sample). A failed ping reports kAborted with the origin's words.
asio::awaitable<absl::Status> MeasureOriginRtt(std::shared_ptr<Endpoint::Impl> ep) {
  auto lease = co_await ep->pool->Acquire();
  if (!lease.ok()) co_return lease.status();
  auto& conn = lease->As<OriginConnection>();
  absl::Status pinged = co_await TimedPing(ep, conn);
  lease->Release(DecideRelease({.mode = ep->options.pool.mode,
                                .status = ToPoolStatus(conn.transaction_status()),
                                .client_gone = true,
                                .broken = conn.broken() || !pinged.ok(),
                                .lifetime_exceeded = lease->lifetime_exceeded()}));
  if (!pinged.ok()) {
    absl::Status failed =
        absl::AbortedError(fmt::format("hyperpool: the origin did not answer: {}", std::string(pinged.message())));
    failed.SetPayload(kSqlStatePayload, absl::Cord(std::string(endpoint::kSqlStateConnectionFailure)));
    co_return failed;
  }
  co_return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------
// Session
// ---------------------------------------------------------------------------

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<Endpoint::Impl> endpoint, std::unique_ptr<Link> link)
      : endpoint_(std::move(endpoint)),
        link_(std::move(link)),
        pump_wake_(endpoint_->executor),
        changed_(endpoint_->executor),
        reader_(protocol::FrameReader::Mode::kStartup),
        cache_(endpoint_->cache, endpoint_->executor, [this](std::string control) {
          if (watch_ && stopping_) return;
          local_out_ += control;  // a broadcast invalidation for this session's Client
          pump_wake_.Notify();
          if (watch_ && local_out_.size() > kMaxLocalBacklog) Shutdown();  // a Client not reading its watch
        }),
        listen_id_(++endpoint_->next_listen_id) {
    endpoint_->listen_sessions[listen_id_] = this;
  }

  ~Session() {
    // A lease still held here closes its connection (Lease's destructor).
    endpoint_->listen_sessions.erase(listen_id_);
    std::lock_guard<std::mutex> lock(endpoint_->mutex);
    endpoint_->sessions.erase(this);
    (watch_ ? endpoint_->watch_count : endpoint_->session_count).fetch_sub(1);
    endpoint_->sessions_done.notify_all();
  }

  // Starts Run(); Run() starts Pump() once link-ready is sent.
  void Start() {
    asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->Run(); }, asio::detached);
  }

  // The listener connection (listener.h) has a notification for a channel
  // this session listens on: delivered as PostgreSQL does, between the
  // session's units and outside a transaction block (the pump sends it when
  // the session is idle, or just before the ReadyForQuery 'I' that ends the
  // current unit).
  void DeliverNotification(std::string_view raw_frame) {
    if (session_done_ || stopping_ || notifications_overflowed_) return;
    if (pending_notifications_.size() + raw_frame.size() > kMaxQueuedNotificationBytes) {
      // A session that never goes idle while notifications pour in: end it
      // rather than buffer without bound (PostgreSQL's own queue is bounded
      // too, and a full one makes NOTIFY fail).
      notifications_overflowed_ = true;
      pending_notifications_.clear();
      QueueError("FATAL", "53200", "hyperpool: too many notifications queued for this session");
      close_after_send_ = true;
      return;
    }
    // The sender pid as the apps know it (notification_pid.h).
    endpoint::AppendTranslatedNotification(pending_notifications_, raw_frame, endpoint_->notifier_pids);
    endpoint_->notifications_delivered++;
    pump_wake_.Notify();
  }

  // Endpoint::Stop(): ends the session as if the client vanished.
  void Shutdown() {
    stopping_ = true;
    link_->Close();
    if (conn_ != nullptr) conn_->CloseNow();
    pump_wake_.Notify();
    changed_.Notify();
  }

 private:
  // ----- Run: the link reader -----------------------------------------------

  asio::awaitable<void> Run() {
    endpoint_->NoteThread();
    const bool hello = co_await ReadHello();
    if (hello && probe_) {
      co_await AnswerProbe();
    } else if (hello && watch_) {
      co_await RunWatch();
    } else if (hello && co_await SendLinkReady()) {
      asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->Pump(); }, asio::detached);
      pump_started_ = true;
      if (timeouts_.enabled()) {
        asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->WatchTimeouts(); },
                       asio::detached);
      }
      co_await WorkLoop();
    }
    co_await EndSession();
  }

  // Reads the hello (a StartupMessage); keeps its parameters. Frames after it
  // stay in `in_`.
  asio::awaitable<bool> ReadHello() {
    for (;;) {
      auto r = reader_.Read(in_);
      if (r.is_frame()) {
        auto packet = protocol::DecodeStartupPacket(r.frame().payload);
        if (!packet.ok() || !std::holds_alternative<protocol::StartupMessage>(*packet)) {
          co_await SendFatal(kSqlStateProtocolViolation, "hyperpool: the link did not start with a StartupMessage");
          co_return false;
        }
        for (const auto& [name, value] : std::get<protocol::StartupMessage>(*packet).parameters) {
          hello_parameters_.emplace_back(std::string(name), std::string(value));
        }
        in_.erase(0, r.frame().size());
        reader_.set_mode(protocol::FrameReader::Mode::kTagged);
        if (!OnHello()) co_return false;  // a cancel link: routed, nothing more
        co_return true;
      }
      if (r.is_error()) {
        co_await SendFatal(kSqlStateProtocolViolation,
                           fmt::format("hyperpool: invalid hello on the link: {}", std::string(r.status().message())));
        co_return false;
      }
      auto n = co_await link_->Receive(in_);
      if (!n.ok()) co_return false;
    }
  }

  // Link-ready: the origin's ParameterStatus set and ReadyForQuery 'I'. If
  // no origin login has happened yet, one is made first (and returned).
  asio::awaitable<bool> SendLinkReady() {
    if (endpoint_->origin_parameters.empty()) {
      auto lease = co_await endpoint_->pool->Acquire();
      if (!lease.ok()) {
        if (lease.status().code() == absl::StatusCode::kResourceExhausted) endpoint_->acquire_timeouts++;
        co_await SendFatal(SqlStateOf(lease.status()), AcquireErrorMessage(lease.status()));
        co_return false;
      }
      auto& conn = lease->As<OriginConnection>();
      if (endpoint_->origin_parameters.empty()) endpoint_->origin_parameters = conn.parameters();
      lease->Release(DecideRelease({.mode = endpoint_->options.pool.mode,
                                    .status = ToPoolStatus(conn.transaction_status()),
                                    .client_gone = true,
                                    .broken = conn.broken(),
                                    .lifetime_exceeded = lease->lifetime_exceeded()}));
    }
    std::string out;
    for (const auto& [name, value] : endpoint_->origin_parameters) {
      protocol::Encode(protocol::ParameterStatus{name, value}, out);
    }
    AppendReadyForQuery(out, 'I');
    absl::Status sent = co_await link_->Send(std::move(out));
    co_return sent.ok() && !stopping_;
  }

  // A placement probe (docs/architecture.md, "The link protocol"): answers
  // the origin round trip, measured now unless a recent sample exists, as
  // ParameterStatus hyperpool.origin_rtt_us, then ReadyForQuery; or a FATAL
  // error when the origin cannot be reached. The link closes after.
  asio::awaitable<void> AnswerProbe() {
    constexpr auto kFresh = std::chrono::seconds(10);
    std::shared_ptr<Endpoint::Impl> ep = endpoint_;
    if (ep->rtt_count == 0) {
      absl::Status measured = co_await MeasureOriginRtt(ep);
      if (!measured.ok()) {
        co_await SendFatal(SqlStateOf(measured), AcquireErrorMessage(measured));
        co_return;
      }
    } else if (std::chrono::steady_clock::now() - ep->rtt_measured_at > kFresh && !ep->rtt_refreshing) {
      // Answer with what is known now (a busy pool must not stall a probe)
      // and refresh in the background for the next one.
      ep->rtt_refreshing = true;
      asio::co_spawn(
          ep->executor,
          [ep]() -> asio::awaitable<void> {
            (void)co_await MeasureOriginRtt(ep);
            ep->rtt_refreshing = false;
          },
          asio::detached);
    }
    std::string out;
    protocol::Encode(protocol::ParameterStatus{placement::kOriginRttParam, std::to_string(ep->origin_rtt_us.load())},
                     out);
    AppendReadyForQuery(out, 'I');
    (void)co_await link_->Send(std::move(out));
  }

  // An invalidation watch (cache/tier.h, kWatchParam): the answer, then
  // every invalidation broadcast to its Client (SessionCache::StartWatch,
  // through local_out_ and the Pump), each Sync answered in order; no origin
  // connection, no unit of work. Ends at Terminate, a closed link, anything
  // else (FATAL 08P01), or a Client that lets more than kMaxLocalBacklog
  // pile up (it then drops its tier and subscribes again).
  asio::awaitable<void> RunWatch() {
    local_out_ = cache_.StartWatch(hello_parameters_);
    QueueReadyForQuery('I');
    asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->Pump(); }, asio::detached);
    pump_started_ = true;
    while (!stopping_) {
      auto r = reader_.Read(in_);
      if (r.is_need_more()) {
        auto n = co_await link_->Receive(in_);
        if (!n.ok()) co_return;
        continue;
      }
      if (r.is_error() || (r.frame().tag != 'S' && r.frame().tag != 'X')) {
        QueueError("FATAL", kSqlStateProtocolViolation, "hyperpool: a cache watch link takes only Sync and Terminate");
        end_after_flush_ = true;
        co_return;
      }
      const char tag = r.frame().tag;
      in_.erase(0, r.frame().size());
      if (tag == 'X') {
        terminated_ = true;
        co_return;
      }
      QueueReadyForQuery('I');  // the heartbeat: after every invalidation queued before it
    }
  }

  // Sends an ErrorResponse with severity FATAL before the pump runs (or after
  // it stopped): the session ends right after.
  asio::awaitable<void> SendFatal(std::string_view sqlstate, std::string_view message) {
    std::string out;
    protocol::EncodeErrorResponse(out, "FATAL", sqlstate, message);
    (void)co_await link_->Send(std::move(out));
  }

  asio::awaitable<void> WorkLoop() {
    for (;;) {
      std::size_t offset = 0;
      bool end = false;
      while (!end && !stopping_) {
        auto r = reader_.Read(std::string_view(in_).substr(offset));
        if (r.is_need_more()) break;
        if (r.is_error()) {
          QueueError("FATAL", kSqlStateProtocolViolation,
                     fmt::format("hyperpool: invalid message on the link: {}", std::string(r.status().message())));
          end = true;
          break;
        }
        const protocol::Frame frame = r.frame();
        offset += frame.size();
        switch (co_await HandleFrame(frame, offset)) {
          case Next::kContinue:
            break;
          case Next::kRestOfInputConsumed:
            offset = in_.size();
            break;
          case Next::kEnd:
            end = true;
            break;
        }
        if (terminated_) end = true;
        if (!to_origin_.empty() && (to_origin_.size() >= kMaxOriginBatch)) {
          if (!co_await FlushToOrigin()) end = end || stopping_;
        }
      }
      if (!to_origin_.empty()) co_await FlushToOrigin();
      in_.erase(0, offset);
      ReleaseIfLarge(in_);
      if (end || stopping_) co_return;
      // Backpressure for locally made answers: let the pump catch up.
      while (local_out_.size() > kMaxLocalBacklog && !stopping_) co_await changed_.Wait();
      auto n = co_await link_->Receive(in_);
      if (!n.ok()) co_return;  // the client vanished (or closed without Terminate)
    }
  }

  enum class Next { kContinue, kRestOfInputConsumed, kEnd };

  // Handles one frontend frame. `offset` is where the frames after it start
  // in `in_` (for answering the rest of the pending input locally).
  asio::awaitable<Next> HandleFrame(const protocol::Frame& frame, std::size_t offset) {
    const char tag = frame.tag;
    if (tag == 'X') {
      terminated_ = true;
      co_return Next::kEnd;
    }
    if (end_after_flush_) co_return Next::kEnd;  // the origin connection died: the session ends
    if (skip_until_sync_) {
      // After an error in extended-query mode PostgreSQL discards messages
      // until Sync, which it answers with ReadyForQuery.
      if (tag == 'S') {
        skip_until_sync_ = false;
        QueueReadyForQuery(skip_status_);
      }
      co_return Next::kContinue;
    }
    // The settings capture or a cancel still owns the connection.
    while (GateClosed() && !stopping_) {
      pump_wake_.Notify();
      co_await changed_.Wait();
    }
    if (stopping_) co_return Next::kEnd;
    if (!rewritten_pin_ && !NoteSessionEffects(frame)) co_return co_await HandleRefusedPin(frame, offset);
    if (tag == 'P' && TracksListens()) listens_.OnFrontend(tag, frame.payload);  // remembered by name
    if (lease_ && conn_->broken()) {
      // The origin connection died; wait until it has been accounted for
      // (errors queued, lease dropped) before starting new work. Nothing
      // is pending for it here: Run() flushes before every suspension.
      to_origin_.clear();
      while (lease_ && !stopping_) {
        pump_wake_.Notify();
        co_await changed_.Wait();
      }
      if (stopping_) co_return Next::kEnd;
      co_return co_await HandleFrame(frame, offset);
    }
    {
      // The query cache (endpoint_cache.h): a unit of work answered from
      // the Endpoint tier needs no origin connection.
      cache_.Start(hello_parameters_);
      const bool idle = outstanding_ == 0 && !in_unit_ && to_origin_.empty() &&
                        (!lease_ || conn_->transaction_status() == 'I');
      const bool served = co_await cache_.Intercept(frame, std::string_view(in_).substr(offset), idle, local_out_,
                                                    skip_until_sync_, skip_status_);
      if (served) {
        pump_wake_.Notify();
        co_return Next::kContinue;
      }
    }
    if (!lease_ && !rewritten_pin_ && (parse_only_unit_ || (tag == 'P' && endpoint::StatementSession::IsParseOnlyUnit(
                                                          std::string_view(in_).substr(offset - frame.size()))))) {
      // Named Parses up to a Sync (PQprepare) need no connection (statement_session.h).
      if (tag == 'P') statements_.set_scope(StatementScope());
      parse_only_unit_ = statements_.AnswerParseOnly(frame, local_out_);
      pump_wake_.Notify();
      co_return Next::kContinue;
    }
    if (!lease_) {
      // COPY data outside COPY: PostgreSQL ignores it, and it starts no work.
      if (tag == 'd' || tag == 'c' || tag == 'f') co_return Next::kContinue;
      starting_unit_ = true;  // a cancel now ends this unit before it starts
      acquiring_ = true;      // ...and a cancel while waiting leaves the queue at once
      const auto acquire_started = std::chrono::steady_clock::now();
      auto lease = co_await endpoint_->pool->Acquire(&acquire_cancel_);
      acquiring_ = false;
      endpoint_->acquire_wait.Observe(std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::steady_clock::now() - acquire_started));
      if (stopping_) co_return Next::kEnd;
      if (!lease.ok()) {
        starting_unit_ = cancel_requested_ = false;
        if (cache_.ServeStaleOnError(lease.status(), local_out_, skip_until_sync_, skip_status_)) {
          pump_wake_.Notify();  // stale-if-error (endpoint_cache.h): answered like a hit
          co_return Next::kContinue;
        }
        AnswerAcquireFailure(lease.status(), frame, offset);
        co_return Next::kRestOfInputConsumed;
      }
      lease_ = std::move(*lease);
      conn_ = &lease_.As<OriginConnection>();
      absl::Status prepared = co_await PrepareConnection();
      const bool cancelled = prepare_cancelled_;
      if (!prepared.ok()) {
        // A cancel that came as the connection was handed over: nothing of
        // the unit was sent, so the healthy connection goes back as it came.
        // A failed settings replay leaves it in an unknown state: close it.
        ReleaseLease(cancelled && !conn_->broken() && conn_->transaction_status() == 'I' ? ReleaseAtIdle()
                                                                                          : ReleaseDecision::kClose);
        cache_.AbandonUnit();
        AnswerAcquireFailure(prepared, frame, offset);
        co_return Next::kRestOfInputConsumed;
      }
    }
    if (pin_budget_held_ && !lease_out_of_cap_) {
      // Pinned: its connection leaves the pool's cap (pin_budget.h).
      lease_.MoveOutOfCap();
      lease_out_of_cap_ = true;
      endpoint_->pinned_connections++;
    }
    last_activity_ = std::chrono::steady_clock::now();
    // What a ReadyForQuery will answer, COPY included (copy_tracker.h).
    const bool answered = copy_.OnFrontend(tag);
    // Metrics: a transaction starts with the first message sent outside one.
    if (txn_started_ == std::chrono::steady_clock::time_point{}) txn_started_ = std::chrono::steady_clock::now();
    switch (tag) {
      case 'Q':
      case 'S':
      case 'F':
        // One the backend ignores (a Sync inside COPY) or consumes as an
        // error (a Query inside COPY) leaves the unit as it was.
        if (answered) {
          ++outstanding_;
          in_unit_ = false;
        }
        break;
      case 'P':
      case 'B':
      case 'D':
      case 'E':
      case 'C':
      case 'H':
        if (!copy_.in_copy_in()) in_unit_ = true;  // a Flush inside COPY opens nothing
        break;
      default:
        break;  // CopyData/CopyDone/CopyFail ride along with their COPY
    }
    // COPY data and Flush start no work of their own (a stray CopyData must
    // not make a session idle in a transaction look busy).
    if (tag != 'd' && tag != 'c' && tag != 'f' && tag != 'H') NoteWorkSent();
    cache_.OnForward(frame);  // writes and state changes, for the query cache
    if (tag != 'P' && TracksListens()) listens_.OnFrontend(tag, frame.payload);  // LISTEN/UNLISTEN (listen_state.h)
    if (tag == 'P') statements_.set_scope(StatementScope());
    if (statements_.StartShapeCheck(frame, conn_->statements(), to_origin_)) {
      // A statement prepared before DDL is re-Parsed here: its result shape
      // is checked before the client's Bind goes out (statement_session.h).
      co_await FlushToOrigin();
      while (lease_ && statements_.shape_check_pending() && !stopping_) {
        pump_wake_.Notify();
        co_await changed_.Wait();
      }
      if (stopping_) co_return Next::kEnd;
      if (!lease_) co_return Next::kContinue;  // lost meanwhile: the loss answered the unit
    }
    // Prepared statements: renamed, replayed or answered here (statement_session.h).
    statements_.OnFrontend(frame, conn_->statements(), to_origin_);
    pump_wake_.Notify();
    co_return Next::kContinue;
  }

  // Applies the session's settings (hello and captured SETs) to a freshly
  // lent connection before its work is forwarded: one round trip when the
  // connection carries different ones, none otherwise (settings_replay.h).
  asio::awaitable<absl::Status> PrepareConnection() {
    // Who sent a notification is who last ran a unit that may NOTIFY on
    // that backend (from its first message to its ReadyForQuery), not who
    // holds it now: the listener's copy of another session's NOTIFY may
    // arrive after this connection was lent again. A backend nobody used
    // yet is this session's from the start.
    if (may_notify_) {
      endpoint_->notifier_pids.Lend(conn_->backend_key().process_id, app_pid_);
    } else {
      endpoint_->notifier_pids.LendIfUnknown(conn_->backend_key().process_id, app_pid_);
    }
    writing_ = true;
    absl::Status status = co_await endpoint::ApplySettings(*conn_, settings_.desired(),
                                                           conn_->sequence_owner().NeedsDiscardFor(serial_, sequence_generation_));
    writing_ = false;
    starting_unit_ = false;
    parameter_mark_ = conn_->parameter_changes();
    prepare_cancelled_ = status.ok() && cancel_requested_;
    if (prepare_cancelled_) {
      status = absl::AbortedError("canceling statement due to user request");
      status.SetPayload(endpoint::kSqlStateStatusPayload, absl::Cord("57014"));
    }
    cancel_requested_ = false;
    co_return status;
  }

  // ----- Session settings, pins, cancel routing (session_settings.h) -------

  // Reads the hello's hyperpool.* parameters: a cancel link routes its cancel
  // and ends (false); a session registers for cancels and keeps its settings.
  bool OnHello() {
    std::string cancel_id;
    for (const auto& [name, value] : hello_parameters_) {
      if (name == "hyperpool.cancel_session") cancel_id = value;
      if (name == "hyperpool.session_id") session_id_ = value;
      if (name == endpoint::kBackendPidParam) app_pid_ = endpoint::ParseBackendPid(value).value_or(0);
      if (name == placement::kProbeParam) probe_ = true;
      if (name == cache::kWatchParam && value == "1") watch_ = true;
    }
    if (watch_ && !probe_) {
      // Not a session: counted as a watch (EndpointStats::cache_watches).
      session_id_.clear();
      endpoint_->session_count.fetch_sub(1);
      endpoint_->watch_count.fetch_add(1);
      return true;  // served by RunWatch
    }
    watch_ = false;
    if (probe_) {
      session_id_.clear();
      return true;  // answered by AnswerProbe
    }
    if (!cancel_id.empty()) {
      session_id_.clear();
      RouteCancel(cancel_id);
      return false;
    }
    settings_ = endpoint::SessionSettings(hello_parameters_);
    if (endpoint_->options.pool.mode == PoolMode::kTransaction) {
      // The query cache keys by the captured settings (endpoint_cache.h);
      // a change made while pinned is not captured, so it bypasses instead.
      cache_.TrackSettings(&settings_, [this] { return pins_.empty() && !statements_.pinned(); });
    }
    if (!session_id_.empty()) endpoint_->sessions_by_id[session_id_] = this;
    return true;
  }

  void RouteCancel(const std::string& id) {
    auto it = endpoint_->sessions_by_id.find(id);
    if (it != endpoint_->sessions_by_id.end() && it->second->CancelCurrentWork()) {
      endpoint_->cancels_forwarded++;
    } else {
      endpoint_->cancels_ignored++;  // idle or unknown: hits no one
    }
  }

  // A cancel link names this session: cancel what it runs now, on the
  // connection it holds now. The connection stays with this session until
  // the origin has processed the CancelRequest, so it never reaches the
  // next borrower. False if nothing is running.
  bool CancelCurrentWork() {
    if (session_done_ || stopping_) return false;
    if (starting_unit_) {
      // Still waiting in the pool's queue: leave it now with 57014; the pool
      // is untouched. Already handed a connection (settings replay): the
      // unit ends with 57014 before any of it is sent.
      absl::Status cancelled = absl::AbortedError("canceling statement due to user request");
      cancelled.SetPayload(kSqlStatePayload, absl::Cord(std::string(kSqlStateQueryCanceled)));
      if (!(acquiring_ && acquire_cancel_.Cancel(cancelled))) cancel_requested_ = true;
      return true;
    }
    if (!lease_ || conn_ == nullptr || (outstanding_ == 0 && !in_unit_)) return false;
    ++cancels_in_flight_;
    std::shared_ptr<Endpoint::Impl> ep = endpoint_;
    ep->pending_cancels++;
    asio::co_spawn(
        ep->executor,
        [self = shared_from_this(), ep, key = conn_->backend_key()]() -> asio::awaitable<void> {
          co_await endpoint::CancelOriginQuery(ep->executor, *ep->config, key);
          {
            std::lock_guard<std::mutex> lock(ep->mutex);
            ep->pending_cancels--;
            ep->sessions_done.notify_all();
          }
          self->OnCancelDelivered();
        },
        asio::detached);
    return true;
  }

  void OnCancelDelivered() {
    if (cancels_in_flight_ > 0) --cancels_in_flight_;
    MaybeRelease();
    changed_.Notify();
    pump_wake_.Notify();
  }

  // Settings may have changed in the unit that just ended at 'I': read them
  // before anyone else (this client's next unit included) uses the connection.
  bool CapturePending() const {
    return lease_ && conn_ != nullptr &&
           (settings_.capture_owed() || conn_->parameter_changes() != parameter_mark_) &&
           endpoint_->options.pool.mode == PoolMode::kTransaction && pins_.empty() && !statements_.pinned() &&
           outstanding_ == 0 && !in_unit_ && conn_->transaction_status() == 'I' && !conn_->broken();
  }
  bool GateClosed() const { return CapturePending() || ListenCleanupPending() || cancels_in_flight_ > 0; }

  // The pin for DecideRelease: session state, or a capture or cancel that
  // must finish before the connection may go to anyone else.
  PinReason CurrentPin() const {
    if (PinReason pin = pins_.First(); pin != PinReason::kNone) return pin;
    if (statements_.pinned()) return PinReason::kPreparedSql;
    if (cancels_in_flight_ > 0) return PinReason::kOther;
    if (CapturePending()) return PinReason::kSessionSetting;
    if (ListenCleanupPending()) return PinReason::kOther;  // UNLISTEN * first
    return PinReason::kNone;
  }

  // False if `frame` would pin the session while the pinned budget is spent
  // (the pins are then not recorded: the frame must not run as it is).
  bool NoteSessionEffects(const protocol::Frame& frame) {
    if (frame.tag != 'Q' && frame.tag != 'P' && frame.tag != 'B' && frame.tag != 'C' && frame.tag != 'F') return true;
    endpoint::SessionEffects effects = settings_.NoteFrontend(frame.tag, frame.payload);
    if (effects.sequences) used_sequences_ = true;  // marks the connection it runs on (ReleaseLease)
    if ((frame.tag == 'Q' || frame.tag == 'P') && endpoint::MayNotify(frame.payload)) {
      // From now on this backend's notifications are this session's: the
      // listener's copy may arrive before the unit's ReadyForQuery.
      may_notify_ = true;
      if (lease_) endpoint_->notifier_pids.Lend(conn_->backend_key().process_id, app_pid_);
    }
    if (effects.pins.empty()) return true;
    if (!TakePinBudget()) return false;
    for (PinReason reason : effects.pins) AddPin(reason);
    return true;
  }

  // One unit of the Endpoint's pinned budget for this session, held until
  // it is no longer pinned or ends (transaction mode only).
  bool TakePinBudget() {
    if (pin_budget_held_ || endpoint_->options.pool.mode != PoolMode::kTransaction) return true;
    if (!endpoint_->pin_budget.TryTake()) return false;
    pin_budget_held_ = true;
    if (endpoint_->options.pinned_idle_timeout.count() > 0 && !idle_watch_) {
      idle_watch_ = std::make_unique<asio::steady_timer>(endpoint_->executor);
      asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->WatchPinnedIdle(); },
                     asio::detached);
    }
    return true;
  }

  void GivePinBudget() {
    if (!pin_budget_held_) return;
    pin_budget_held_ = false;
    endpoint_->pin_budget.Give();
  }

  // The budget is spent: the pinning statement is replaced by one that
  // makes the origin raise 53300 (pin_budget.h), so nothing of it runs and
  // the error, abort and skip-until-Sync are PostgreSQL's own. A message
  // that cannot be rewritten (a Bind of a pinning statement parsed before)
  // runs, and its connection is closed after the unit instead of shared.
  asio::awaitable<Next> HandleRefusedPin(const protocol::Frame& frame, std::size_t offset) {
    endpoint_->pins_rejected++;
    fmt::print(stderr, "hyperpool: session {}: pinned budget spent (max_pinned = {}), statement refused\n",
               session_id_.empty() ? std::string("-") : session_id_, endpoint_->pin_budget.limit());
    std::string rewritten;
    if (!endpoint::RewritePinningMessage(frame.tag, frame.payload, endpoint_->pin_budget.limit(), rewritten)) {
      discard_after_unit_ = true;
      co_return co_await HandleFrameUnpinned(frame, offset);
    }
    protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
    auto r = reader.Read(rewritten);
    if (!r.is_frame()) co_return Next::kContinue;  // cannot happen: we encoded it
    // Later Binds of that name run the replacement: they pin nothing.
    if (frame.tag == 'P') (void)settings_.NoteFrontend('P', r.frame().payload);
    rewritten_pin_ = true;
    Next next = co_await HandleFrame(r.frame(), offset);
    rewritten_pin_ = false;
    co_return next;
  }

  // HandleFrame for a frame whose pins were refused but that must run.
  asio::awaitable<Next> HandleFrameUnpinned(const protocol::Frame& frame, std::size_t offset) {
    rewritten_pin_ = true;  // its effects are not noted again
    Next next = co_await HandleFrame(frame, offset);
    rewritten_pin_ = false;
    co_return next;
  }

  // Closes a pinned session idle (outside a transaction) for longer than
  // pinned_idle_timeout, as PostgreSQL's idle_session_timeout does.
  asio::awaitable<void> WatchPinnedIdle() {
    const auto limit = endpoint_->options.pinned_idle_timeout;
    last_activity_ = std::chrono::steady_clock::now();
    while (!session_done_ && !stopping_) {
      const bool idle = outstanding_ == 0 && !in_unit_ && to_origin_.empty() &&
                        (!lease_ || conn_->transaction_status() == 'I');
      const auto now = std::chrono::steady_clock::now();
      if (pin_budget_held_ && idle && now - last_activity_ >= limit) {
        endpoint_->pinned_idle_timeouts++;
        QueueError("FATAL", "57P05", "terminating connection due to idle-session timeout");
        close_after_send_ = true;
        co_return;
      }
      idle_watch_->expires_at(idle ? last_activity_ + limit : now + limit);
      (void)co_await idle_watch_->async_wait(kAsTuple);
    }
  }

  void AddPin(PinReason reason) {
    const bool first = pins_.empty();
    if (!pins_.Add(reason)) return;
    endpoint_->pins[static_cast<std::size_t>(reason)]++;
    if (first) endpoint_->pinned_sessions++;
    fmt::print(stderr, "hyperpool: session {} pinned to its origin connection: {}\n",
               session_id_.empty() ? std::string("-") : session_id_, PinReasonName(reason));
  }

  // Pump: runs the capture (Run waits at the gate meanwhile).
  asio::awaitable<void> CaptureSessionSettings() {
    OriginConnection* c = conn_;
    pump_reading_ = true;
    auto outcome = co_await endpoint::CaptureSettings(*c, settings_, endpoint_->config->user);
    pump_reading_ = false;
    parameter_mark_ = c->parameter_changes();
    absl::Status status = outcome.status();
    if (outcome.ok() && outcome->role_changed && conn_ == c) {
      // The session is someone else now and must stay so (as after SET
      // ROLE); its connection never reaches another client and is closed
      // when the session ends.
      AddPin(PinReason::kSetRole);
    }
    if (conn_ == c && !status.ok()) {
      fmt::print(stderr, "hyperpool: reading session settings failed, closing the connection: {}\n",
                 std::string(status.message()));
    }
    AfterOwnQuery(c, status.ok());
  }

  // After a query of our own on the lent connection `c` (settings capture,
  // UNLISTEN *): it goes back by the release policy, or is closed when the
  // query failed or the session is ending.
  void AfterOwnQuery(OriginConnection* c, bool healthy) {
    if (conn_ == c) {
      if (!healthy || discard_pending_ || session_done_ || stopping_) {
        if (writing_) {
          c->CloseNow();
          discard_pending_ = true;
        } else {
          ReleaseLease(ReleaseDecision::kClose);
        }
      } else {
        MaybeRelease();
      }
    }
    changed_.Notify();
    pump_wake_.Notify();
  }

  // ----- LISTEN/NOTIFY without pinning (listen_state.h, listener.h) -------

  // Transaction mode: LISTEN is carried by the listener connection. (In
  // session mode the session keeps its connection, which LISTENs itself.)
  bool TracksListens() const { return endpoint_->options.pool.mode == PoolMode::kTransaction; }

  // The lent connection may LISTEN (a unit ran LISTEN, or text that might):
  // it runs UNLISTEN * before it goes back to the pool.
  bool ListenCleanupPending() const {
    return TracksListens() && lease_ && conn_ != nullptr && listens_.connection_listened() && outstanding_ == 0 &&
           !in_unit_ && conn_->transaction_status() == 'I' && !conn_->broken();
  }

  // Between units and outside a transaction block: where PostgreSQL sends
  // NotificationResponse.
  bool IdleForNotifications() const {
    return outstanding_ == 0 && !in_unit_ && !parse_only_unit_ && !skip_until_sync_ &&
           to_origin_.empty() && !statements_.shape_check_pending() &&
           (!lease_ || conn_ == nullptr || conn_->transaction_status() == 'I');
  }

  // A NotificationResponse read from the lent connection on a channel the
  // listener connection also delivers to this session: dropped here, so the
  // session gets it exactly once.
  bool NotificationViaListener(std::string_view payload) const {
    if (!TracksListens() || !endpoint_->listener) return false;
    auto n = protocol::DecodeNotificationResponse(payload);
    return n.ok() && endpoint_->listener->Listens(listen_id_, n->channel);
  }

  // Pump, at a ReadyForQuery 'I' that committed LISTEN/UNLISTEN: updates
  // the session's channel set and waits until the listener connection has
  // LISTENed, before that ReadyForQuery is forwarded (a NOTIFY the app
  // sends after it cannot be missed).
  asio::awaitable<void> ApplyCommittedListens(const std::vector<endpoint::ListenOp>& committed) {
    if (!endpoint_->listener || session_done_) co_return;  // ended: ForgetSession unsubscribed it
    std::set<std::string> channels = endpoint_->listener->ChannelsOf(listen_id_);
    endpoint::ApplyListenOps(committed, channels);
    std::shared_ptr<endpoint::ListenerConnection> listener = endpoint_->listener;
    co_await listener->Set(listen_id_, std::move(channels));
    if (session_done_) listener->Remove(listen_id_);  // ended while waiting
  }

  // Pump: UNLISTEN * on the lent connection before it is shared (Run waits
  // at the gate meanwhile). Notifications that arrive on it first are
  // kept for the session unless the listener delivers them.
  asio::awaitable<void> UnlistenBeforeRelease() {
    OriginConnection* c = conn_;
    pump_reading_ = true;
    std::string query;
    protocol::Encode(protocol::Query{"UNLISTEN *"}, query);
    absl::Status status = co_await c->Write(query);
    while (status.ok()) {
      auto frame = co_await c->ReadFrame();
      if (!frame.ok()) {
        status = frame.status();
        break;
      }
      if (frame->tag == 'A' && !NotificationViaListener(frame->payload)) {
        endpoint::AppendTranslatedNotification(pending_notifications_, frame->raw, endpoint_->notifier_pids);
      }
      if (frame->tag == 'E') status = absl::InternalError("UNLISTEN * failed");
      if (frame->tag == 'Z') break;
    }
    pump_reading_ = false;
    listens_.ClearConnectionListened();
    // (c is looked at only while it is still this session's lease.)
    AfterOwnQuery(c, status.ok() && (conn_ != c || c->transaction_status() == 'I'));
  }

  void ForgetSession() {
    auto it = endpoint_->sessions_by_id.find(session_id_);
    if (it != endpoint_->sessions_by_id.end() && it->second == this) endpoint_->sessions_by_id.erase(it);
    if (app_pid_ != 0) endpoint_->notifier_pids.Forget(app_pid_);
    if (!pins_.empty() && !pin_counted_gone_) endpoint_->pinned_sessions--;
    pin_counted_gone_ = true;
    GivePinBudget();
    if (endpoint_->listener) endpoint_->listener->Remove(listen_id_);
    endpoint_->listen_sessions.erase(listen_id_);
    pending_notifications_.clear();
    if (idle_watch_) idle_watch_->cancel();
  }

  // Writes `to_origin_` to the lent connection. False if the write failed
  // (the connection is then treated as lost).
  asio::awaitable<bool> FlushToOrigin() {
    if (to_origin_.empty()) co_return true;
    if (!lease_) {
      to_origin_.clear();
      co_return false;
    }
    OriginConnection* c = conn_;
    writing_ = true;
    absl::Status st = co_await c->Write(to_origin_);
    writing_ = false;
    to_origin_.clear();
    ReleaseIfLarge(to_origin_);
    if (discard_pending_) {
      if (!pump_reading_) ReleaseLease(ReleaseDecision::kClose);
    } else if (!st.ok() && conn_ == c) {
      c->CloseNow();
      if (!pump_reading_) OnOriginLost(c, st);
      // else: the pump's read fails now and it handles the loss.
    } else {
      MaybeRelease();
    }
    pump_wake_.Notify();
    co_return st.ok();
  }

  // The pool (or the origin) could not give us a connection: one
  // ErrorResponse, then a ReadyForQuery for each Query/Sync of the pending
  // input, so the session stays usable.
  void AnswerAcquireFailure(const absl::Status& status, const protocol::Frame& first, std::size_t offset) {
    if (status.code() == absl::StatusCode::kResourceExhausted) endpoint_->acquire_timeouts++;
    QueueError("ERROR", SqlStateOf(status), AcquireErrorMessage(status));
    bool in_unit = false;
    auto answer = [&](char tag) {
      if (tag == 'Q' || tag == 'S' || tag == 'F') {
        QueueReadyForQuery('I');
        in_unit = false;
      } else if (tag != 'd' && tag != 'c' && tag != 'f' && tag != 'X') {
        in_unit = true;
      }
    };
    answer(first.tag);
    std::string_view rest = std::string_view(in_).substr(offset);
    for (;;) {
      auto r = reader_.Read(rest);
      if (!r.is_frame()) break;
      if (r.frame().tag == 'X') {
        terminated_ = true;  // Terminate is still honoured
        break;
      }
      answer(r.frame().tag);
      rest.remove_prefix(r.frame().size());
    }
    if (in_unit) {
      skip_until_sync_ = true;
      skip_status_ = 'I';
    }
  }

  asio::awaitable<void> EndSession() {
    // A graceful Terminate after pipelined work: let that work finish (its
    // results are forwarded) before deciding about the connection.
    if (terminated_ && !stopping_) {
      if (lease_ && copy_.in_copy_in() && !conn_->broken()) {
        // Terminate inside COPY FROM STDIN: the origin waits for data that
        // will never come. End the COPY for the client (CopyFail, then a
        // Sync for an extended-protocol COPY; the simple protocol answers
        // it with one more ReadyForQuery) so the connection returns to 'I'.
        std::string end_copy;
        protocol::Encode(protocol::CopyFail{"the client ended its session during COPY"}, end_copy);
        protocol::Encode(protocol::Sync{}, end_copy);
        copy_.OnFrontend('f');
        if (copy_.OnFrontend('S')) ++outstanding_;
        in_unit_ = false;
        to_origin_ += end_copy;
      }
      if (!to_origin_.empty()) co_await FlushToOrigin();
      while (lease_ && (outstanding_ > 0) && !conn_->broken() && !stopping_) {
        pump_wake_.Notify();
        co_await changed_.Wait();
      }
    }
    session_done_ = true;
    timeout_timer_.cancel();
    ForgetSession();
    if (lease_) {
      CancelIfBusy();
      if (pump_reading_) {
        // Mid-result or mid-transaction: the pump's read fails and it
        // releases (closes) the connection.
        conn_->CloseNow();
      } else {
        ReleaseAtEnd();
      }
    }
    if (pump_started_) {
      pump_wake_.Notify();
    } else {
      link_->Close();
    }
  }

  // ----- Pump: the link writer ---------------------------------------------

  asio::awaitable<void> Pump() {
    for (;;) {
      if (lease_ && (outstanding_ > 0 || in_unit_) && !session_done_) {
        co_await PumpOrigin();
        continue;
      }
      if (CapturePending() && !writing_ && !session_done_) {
        co_await CaptureSessionSettings();
        continue;
      }
      if (ListenCleanupPending() && !writing_ && !session_done_) {
        co_await UnlistenBeforeRelease();
        continue;
      }
      if (!pending_notifications_.empty() && IdleForNotifications()) {
        local_out_ += pending_notifications_;
        pending_notifications_.clear();
      }
      if (!local_out_.empty()) {
        std::string out = std::move(local_out_);
        local_out_.clear();
        if (link_gone_) continue;  // after Terminate: nobody to tell
        absl::Status sent = co_await link_->Send(std::move(out));
        changed_.Notify();
        if (close_after_send_ && !session_done_) {
          // A FATAL went out (pinned idle timeout): the session ends.
          stopping_ = true;
          link_->Close();
          changed_.Notify();
          continue;
        }
        if (!sent.ok()) {
          link_->Close();
          if (!session_done_) stopping_ = true;
          changed_.Notify();
        }
        continue;
      }
      if (end_after_flush_ && !stopping_) {
        // Everything for the client is out (a FATAL last): close the link.
        stopping_ = true;
        link_->Close();
        changed_.Notify();
        continue;
      }
      if (session_done_) break;
      co_await pump_wake_.Wait();
    }
    link_->Close();
  }

  // Forwards frames from the lent connection until nothing is expected from
  // it any more (released, or idle in a transaction), or it fails.
  asio::awaitable<void> PumpOrigin() {
    OriginConnection* c = conn_;
    std::string batch;
    for (;;) {
      pump_reading_ = true;
      auto frame = co_await c->ReadFrame();
      pump_reading_ = false;
      if (!frame.ok()) {
        if (conn_ != c) co_return;  // released meanwhile (cannot happen while reading, but be safe)
        if (discard_pending_ || session_done_ || stopping_) {
          // Already accounted for, or nobody to tell: just discard it.
          if (writing_) {
            discard_pending_ = true;
          } else {
            ReleaseLease(ReleaseDecision::kClose);
          }
          co_return;
        }
        local_out_ += batch;
        OnOriginLost(c, frame.status());
        co_return;
      }
      const char tag = frame->tag;
      std::string_view raw = frame->raw;
      std::string rewritten;
      if (tag == 'E') {
        // A FATAL (pg_terminate_backend, a shutdown) goes to the client as
        // it is: the origin closes next, and so does this session, as a
        // direct connection would (docs/architecture.md, "Failure handling").
        auto error = protocol::DecodeErrorResponse(frame->payload);
        if (error.ok() && (error->severity() == "FATAL" || error->severity() == "PANIC")) origin_fatal_sent_ = true;
        if (error.ok() && statement_timeout_pending_ && error->sqlstate() == kSqlStateQueryCanceled) {
          // Our own CancelRequest for query_timeout: say why, as
          // statement_timeout does.
          protocol::EncodeErrorResponse(rewritten, "ERROR", kSqlStateQueryCanceled,
                                        "canceling statement due to statement timeout");
          raw = rewritten;
        }
      }
      const endpoint::CopyTracker::BackendEffect copy = copy_.OnBackend(tag);
      if (copy.unanswered > 0) outstanding_ -= std::min(outstanding_, copy.unanswered);
      if (copy.unit_reopened) in_unit_ = true;
      if (tag == 'A' && NotificationViaListener(frame->payload)) continue;  // the listener delivers it
      if ((tag == 'Z' || tag == 'E' || tag == 'C') && TracksListens()) {
        std::vector<endpoint::ListenOp> committed = listens_.OnBackend(tag, frame->payload);
        if (!committed.empty()) co_await ApplyCommittedListens(committed);
        if (tag == 'Z' && frame->payload[0] == 'I' && outstanding_ <= 1 && !in_unit_) {
          if (may_notify_ && endpoint_->listener && !session_done_ &&
              !endpoint_->listener->ChannelsOf(listen_id_).empty()) {
            // Its own NOTIFY on a channel it listens on reaches it before
            // this ReadyForQuery, as on a direct connection (listener.h).
            std::shared_ptr<endpoint::ListenerConnection> listener = endpoint_->listener;
            co_await listener->Barrier();
          }
          if (!pending_notifications_.empty()) {
            batch += pending_notifications_;  // as a backend does: after the commit, before ReadyForQuery
            pending_notifications_.clear();
          }
        }
      }
      // The query cache (capture, invalidate, control messages) sees what
      // the client sees: not the answers to our own hidden messages.
      if (!statements_.Hides(tag)) cache_.OnOriginFrame(tag, frame->raw, batch, *c);
      const bool checking = statements_.shape_check_pending();
      if (statements_.OnBackend(*frame, c->statements(), batch) == endpoint::StatementSession::Verdict::kForward) {
        if (tag == 'A') {
          // The sender pid as the apps know it (notification_pid.h).
          endpoint::AppendTranslatedNotification(batch, frame->raw, endpoint_->notifier_pids);
        } else {
          protocol::AppendRawFrame(batch, raw);
        }
      }
      if (checking && !statements_.shape_check_pending()) changed_.Notify();  // Run waits for it
      if (tag == 'Z' && !frame->payload.empty()) {
        last_activity_ = std::chrono::steady_clock::now();
        if (may_notify_) {
          // Its NOTIFYs were this session's, whoever uses the backend next.
          endpoint_->notifier_pids.Lend(c->backend_key().process_id, app_pid_);
          may_notify_ = outstanding_ > 1;
        }
        if (outstanding_ > 0) --outstanding_;
        statement_timeout_pending_ = false;
        NoteReady(frame->payload[0]);
        endpoint_->queries.fetch_add(1, std::memory_order_relaxed);
        if (outstanding_ == 0 && !in_unit_ && frame->payload[0] == 'I') {
          endpoint_->transactions++;
          EndTransactionTimer();
        }
        changed_.Notify();
        MaybeRelease();
      }
      const bool done_here = conn_ != c || (outstanding_ == 0 && !in_unit_);
      if (done_here || batch.size() >= kMaxLinkBatch || !c->HasBufferedFrame()) {
        absl::Status sent;  // (no co_await inside ?: — GCC mis-handles its temporaries)
        if (!link_gone_) sent = co_await link_->Send(std::move(batch));
        batch = std::string();
        if (!sent.ok() && terminated_ && conn_ == c && !c->broken()) {
          // The client said Terminate and closed its link: nobody reads the
          // rest, but the connection is sound. Drain it to its ReadyForQuery
          // (EndSession waits for that) and give it back.
          link_gone_ = true;
          sent = absl::OkStatus();
        }
        if (!sent.ok()) {
          // The client vanished mid-result: Run() notices too; never hand
          // this connection on.
          stopping_ = true;
          link_->Close();
          if (conn_ == c) {
            CancelIfBusy();
            if (!writing_) {
              ReleaseLease(ReleaseDecision::kClose);
            } else {
              c->CloseNow();
              discard_pending_ = true;
            }
          }
          changed_.Notify();
          co_return;
        }
        if (done_here || conn_ != c || session_done_) co_return;
      }
    }
  }

  // The origin connection `c` failed (EOF, socket error, protocol error).
  // The session ends as a direct connection to PostgreSQL would: the
  // origin's own FATAL ErrorResponse (already forwarded, e.g. 57P01 from
  // pg_terminate_backend), or else FATAL 08006, then the link closes. A
  // driver must learn that its transaction is gone with its connection;
  // carrying on over a fresh origin connection could commit half of it.
  void OnOriginLost(OriginConnection* c, const absl::Status& reason) {
    if (conn_ != c || discard_pending_) return;
    listens_.OnConnectionLost();
    if (!origin_fatal_sent_) {
      QueueError("FATAL", endpoint::kSqlStateConnectionFailure,
                 fmt::format("hyperpool: the connection to the origin database was lost: {}",
                             std::string(reason.message())));
    }
    EndAfterFlush();
    outstanding_ = 0;
    in_unit_ = false;
    txn_started_ = {};  // a lost transaction is not timed
    if (writing_ || pump_reading_) {
      c->CloseNow();
      discard_pending_ = true;
    } else {
      ReleaseLease(ReleaseDecision::kClose);
    }
    pump_wake_.Notify();
    changed_.Notify();
  }

  // Ends the session once what is queued for the link has been sent: the
  // pump closes the link after its next Send, and Run stops reading.
  void EndAfterFlush() {
    end_after_flush_ = true;
    skip_until_sync_ = false;
    pump_wake_.Notify();
  }

  // Releases the connection if the policy says so and nobody is using it.
  void MaybeRelease() {
    if (!lease_ || writing_ || pump_reading_) return;
    if (outstanding_ > 0 || in_unit_ || copy_.in_copy_in()) return;
    ReleaseDecision d = ReleaseAtIdle();
    if (discard_after_unit_ && d != ReleaseDecision::kKeep) d = ReleaseDecision::kClose;  // refused pin ran
    ReleaseLease(d);
  }

  // The release decision for a session with nothing outstanding.
  ReleaseDecision ReleaseAtIdle() const {
    return DecideRelease({.mode = endpoint_->options.pool.mode,
                          .status = ToPoolStatus(conn_->transaction_status()),
                          .outstanding = outstanding_,
                          .pin = CurrentPin(),
                          .client_gone = false,
                          .broken = conn_->broken() || copy_.uncertain(),
                          .lifetime_exceeded = lease_.lifetime_exceeded()});
  }

  void ReleaseAtEnd() {
    ReleaseDecision d = DecideRelease({.mode = endpoint_->options.pool.mode,
                                       .status = ToPoolStatus(conn_->transaction_status()),
                                       .outstanding = outstanding_ + (in_unit_ ? 1 : 0),
                                       .pin = CurrentPin(),
                                       .client_gone = true,
                                       .broken = conn_->broken() || discard_pending_ || discard_after_unit_ ||
                                                 copy_.uncertain(),
                                       .lifetime_exceeded = lease_.lifetime_exceeded()});
    ReleaseLease(d);
  }

  void EndTransactionTimer() {
    if (txn_started_ == std::chrono::steady_clock::time_point{}) return;
    endpoint_->transaction_time.Observe(std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - txn_started_));
    txn_started_ = {};
  }

  void ReleaseLease(ReleaseDecision decision) {
    if (!lease_ || decision == ReleaseDecision::kKeep) return;
    if (decision == ReleaseDecision::kClose) {
      conn_->CloseNow();  // no Terminate: its state is unknown; the origin rolls back
      endpoint_->discarded++;
    }
    if (used_sequences_) {
      // Its work may have called nextval: the next session to borrow this
      // connection gets DISCARD SEQUENCES first (sequence_state.h).
      conn_->sequence_owner().UsedBy(serial_, ++sequence_generation_);
      used_sequences_ = false;
    }
    statements_.Reset();
    copy_.Reset();
    timeouts_.OnQuiet();
    if (decision == ReleaseDecision::kClose) listens_.OnConnectionLost();
    lease_.Release(decision);
    conn_ = nullptr;
    discard_after_unit_ = false;
    if (lease_out_of_cap_) {
      lease_out_of_cap_ = false;
      endpoint_->pinned_connections--;
    }
    if (pins_.empty() && !statements_.pinned()) GivePinBudget();  // e.g. after DEALLOCATE ALL
    discard_pending_ = false;
    origin_fatal_sent_ = false;
    changed_.Notify();
  }

  // ----- Operator timeouts (session_timeouts.h) ------------------------------

  void NoteWorkSent() {
    if (!timeouts_.enabled()) return;
    timeouts_.OnWorkSent(std::chrono::steady_clock::now());
    timeout_timer_.cancel();  // WatchTimeouts re-reads the deadline
  }

  void NoteReady(char status) {
    if (!timeouts_.enabled()) return;
    timeouts_.OnReady(std::chrono::steady_clock::now(), outstanding_ > 0 || in_unit_, status == 'T' || status == 'E');
    timeout_timer_.cancel();
  }

  asio::awaitable<void> WatchTimeouts() {
    while (!session_done_) {
      timeout_timer_.expires_at(timeouts_.NextDeadline());
      (void)co_await timeout_timer_.async_wait(kAsTuple);
      if (session_done_) break;
      switch (timeouts_.Due(std::chrono::steady_clock::now())) {
        case endpoint::SessionTimeouts::Action::kCancelQuery:
          // The same path as a client's cancel: the connection stays with
          // this session until the origin has processed the CancelRequest.
          if (lease_ && (outstanding_ > 0 || in_unit_) && CancelCurrentWork()) statement_timeout_pending_ = true;
          break;
        case endpoint::SessionTimeouts::Action::kEndIdleInTransaction:
          EndIdleInTransaction();
          break;
        case endpoint::SessionTimeouts::Action::kNone:
          break;
      }
    }
  }

  // idle_in_transaction_timeout: as PostgreSQL does, FATAL 25P03 and the
  // session ends; the origin connection is closed (its transaction rolls
  // back there) and its pool slot is free at once.
  void EndIdleInTransaction() {
    if (!lease_ || outstanding_ > 0 || in_unit_ || end_after_flush_) return;
    const char status = conn_->transaction_status();
    if (status != 'T' && status != 'E') return;
    QueueError("FATAL", kSqlStateIdleInTransactionTimeout, "terminating connection due to idle-in-transaction timeout");
    EndAfterFlush();
    if (writing_ || pump_reading_) {
      conn_->CloseNow();
      discard_pending_ = true;
    } else {
      ReleaseLease(ReleaseDecision::kClose);
    }
    changed_.Notify();
  }

  // The client is gone while the origin may still be executing its work:
  // closing the socket does not stop a query that is not writing, so ask
  // the origin to cancel it (its locks go with it).
  void CancelIfBusy() {
    if (conn_ == nullptr || cancel_sent_ || (outstanding_ == 0 && !in_unit_)) return;
    cancel_sent_ = true;
    std::shared_ptr<Endpoint::Impl> ep = endpoint_;
    ep->pending_cancels++;
    asio::co_spawn(
        ep->executor,
        [ep, key = conn_->backend_key()]() -> asio::awaitable<void> {
          co_await endpoint::CancelOriginQuery(ep->executor, *ep->config, key);
          std::lock_guard<std::mutex> lock(ep->mutex);
          ep->pending_cancels--;
          ep->sessions_done.notify_all();
        },
        asio::detached);
  }

  void QueueError(std::string_view severity, std::string_view sqlstate, std::string_view message) {
    protocol::EncodeErrorResponse(local_out_, severity, sqlstate, message);
    pump_wake_.Notify();
  }
  void QueueReadyForQuery(char status) {
    AppendReadyForQuery(local_out_, status);
    pump_wake_.Notify();
  }

  std::shared_ptr<Endpoint::Impl> endpoint_;
  std::unique_ptr<Link> link_;
  Signal pump_wake_;  // Run -> Pump: work or answers to forward
  Signal changed_;    // Pump -> Run: a ReadyForQuery, a release, a send
  protocol::FrameReader reader_;
  endpoint::SessionCache cache_;  // the query cache's hooks (endpoint_cache.h)
  std::vector<std::pair<std::string, std::string>> hello_parameters_;

  std::string in_;          // bytes from the link not yet handled
  std::string to_origin_;   // frames for the lent connection, written in one go
  std::string local_out_;   // answers made here, for the pump to send

  Lease lease_;
  OriginConnection* conn_ = nullptr;  // lease_'s connection, or null
  std::size_t outstanding_ = 0;       // Query/Sync/FunctionCall sent, ReadyForQuery not yet seen
  bool in_unit_ = false;              // extended-query messages sent since the last Sync
  std::chrono::steady_clock::time_point txn_started_{};  // first message of the open transaction, or zero
  bool writing_ = false;              // Run is inside conn_->Write
  bool pump_reading_ = false;         // Pump is inside conn_->ReadFrame
  bool discard_pending_ = false;      // close the lease once nobody is inside it
  bool origin_fatal_sent_ = false;    // the origin's FATAL went to the client: it closes next
  bool end_after_flush_ = false;      // close the link once local_out_ is sent (the session ends)
  endpoint::CopyTracker copy_;        // COPY sub-protocol state of the lent connection
  // query_timeout / idle_in_transaction_timeout, and WatchTimeouts' wake-up.
  endpoint::SessionTimeouts timeouts_{endpoint_->options.query_timeout, endpoint_->options.idle_in_transaction_timeout};
  asio::steady_timer timeout_timer_{endpoint_->executor};
  bool statement_timeout_pending_ = false;  // our CancelRequest for query_timeout is out
  AcquireCancel acquire_cancel_;      // ends a pending Acquire() on a client's cancel
  bool acquiring_ = false;            // inside pool->Acquire()
  bool prepare_cancelled_ = false;    // PrepareConnection failed only because of a cancel
  bool link_gone_ = false;            // the client closed after Terminate: drop what the origin still sends
  bool skip_until_sync_ = false;      // discard until Sync, answer it with skip_status_
  char skip_status_ = 'I';

  bool pump_started_ = false;
  bool probe_ = false;                // a placement probe link
  bool watch_ = false;                // an invalidation watch link (RunWatch)
  bool cancel_sent_ = false;          // a CancelRequest went out for this session's connection
  bool terminated_ = false;           // Terminate received
  bool session_done_ = false;         // Run has finished
  bool stopping_ = false;             // Endpoint::Stop or the link failed

  // The session's name-resolution scope for its prepared statements
  // (StatementSession::set_scope): after SET ROLE its own (never shared),
  // with a search_path of its own that search_path; else empty (shared).
  std::string StatementScope() const {
    std::string scope;
    if (pins_.Has(PinReason::kSetRole)) scope = "role " + std::to_string(serial_);
    const endpoint::SettingMap& desired = settings_.desired();
    if (auto it = desired.find("search_path"); it != desired.end()) {
      scope += " search_path ";
      scope += it->second;
    }
    return scope;
  }

  // Session settings, pins and cancel routing (session_settings.h).
  std::string session_id_;            // hyperpool.session_id of the hello
  std::int32_t app_pid_ = 0;          // hyperpool.backend_pid of the hello: the pid the app knows (0: none)
  endpoint::SessionSettings settings_;
  endpoint::PinSet pins_;
  const std::uint64_t serial_ = ++endpoint_->last_session_serial;  // this session, for sequence_state.h
  bool used_sequences_ = false;       // a unit since the last release may have called nextval
  bool may_notify_ = false;           // a text since the last ReadyForQuery may NOTIFY (notification_pid.h)
  std::uint64_t sequence_generation_ = 0;  // releases after such units (sequence_state.h)
  bool pin_counted_gone_ = false;     // pinned_sessions already decremented
  bool starting_unit_ = false;        // acquiring/preparing a connection for a new unit
  bool cancel_requested_ = false;     // a cancel arrived while starting_unit_
  std::size_t cancels_in_flight_ = 0; // CancelRequests not yet processed by the origin
  std::uint64_t parameter_mark_ = 0;  // conn_->parameter_changes() after our own replay/capture

  // Protocol-level prepared statements of this client (statement_session.h).
  endpoint::StatementSession statements_{endpoint_->statements};
  bool parse_only_unit_ = false;  // answering a Parse-only unit locally, until its Sync

  // The pinned budget (pin_budget.h).
  bool pin_budget_held_ = false;      // this session holds one unit of it
  bool lease_out_of_cap_ = false;     // lease_ was moved out of the pool's cap
  bool rewritten_pin_ = false;        // HandleFrame runs a refused pin's replacement
  bool discard_after_unit_ = false;   // a refused pin ran: close the connection at release
  bool close_after_send_ = false;     // end the session once local_out_ is sent (a FATAL)
  std::chrono::steady_clock::time_point last_activity_{};  // last frame or ReadyForQuery
  std::unique_ptr<asio::steady_timer> idle_watch_;  // WatchPinnedIdle's timer

  // LISTEN/NOTIFY (listen_state.h, listener.h).
  static constexpr std::size_t kMaxQueuedNotificationBytes = 8 * 1024 * 1024;
  endpoint::ListenRegistry::Subscriber listen_id_;  // this session in the listener's registry
  endpoint::ListenTracker listens_;                 // LISTEN/UNLISTEN awaiting their commit
  std::string pending_notifications_;               // NotificationResponse frames not yet deliverable
  bool notifications_overflowed_ = false;           // the queue hit its bound: the session ends
};

// ---------------------------------------------------------------------------
// Endpoint
// ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Endpoint>> Endpoint::Create(asio::any_io_executor executor,
                                                           EndpointOptions options) {
  auto config = ParseOriginConfig(options.origin);
  if (!config.ok()) return config.status();
  if (absl::Status s = endpoint::ResolveOriginPassword(*config, endpoint::PasswordSourcesOf(options)); !s.ok()) {
    return s;
  }
  auto impl = std::make_shared<Impl>();
  impl->executor = executor;
  impl->config = std::make_shared<const OriginConfig>(std::move(*config));
  impl->options = std::move(options);
  impl->pin_budget =
      endpoint::PinBudget(endpoint::EffectivePinnedBudget(impl->options.max_pinned, impl->options.pool.max_size));

  endpoint::ConnectOptions connect;
  connect.timeout = impl->config->connect_timeout.count() > 0
                        ? std::chrono::duration_cast<std::chrono::milliseconds>(impl->config->connect_timeout)
                        : impl->options.pool.connect_timeout;

  PoolCallbacks callbacks;
  std::weak_ptr<Impl> weak = impl;
  std::shared_ptr<const OriginConfig> cfg = impl->config;
  std::shared_ptr<const Logger> logger = impl->options.logger ? impl->options.logger : Logger::Default();
  callbacks.open = [weak, cfg, connect, executor, logger]()
      -> asio::awaitable<absl::StatusOr<std::unique_ptr<PooledConnection>>> {
    endpoint::ConnectResult r = co_await endpoint::ConnectOrigin(executor, *cfg, connect);
    const std::string origin = fmt::format("{}:{}", cfg->host, cfg->port);
    if (!r.ok()) {
      absl::Status failed = FailureToStatus(r.failure);
      logger->Log(LogLevel::kWarn, "origin_connect_failed", {{"origin", origin}, {"reason", std::string(failed.message())}});
      co_return failed;
    }
    if (logger->log_connections()) {
      logger->Log(LogLevel::kInfo, "origin_connect",
                  {{"origin", origin}, {"backend_pid", std::to_string(r.connection->backend_key().process_id)}});
    }
    r.connection->set_logger(logger);
    if (auto self = weak.lock()) self->origin_parameters = r.connection->parameters();
    co_return std::unique_ptr<PooledConnection>(std::move(r.connection));
  };
  callbacks.health_check = [weak](PooledConnection& c) { return TimedPing(weak, static_cast<OriginConnection&>(c)); };
  // Session mode: DISCARD ALL before the next session (release_policy.h).
  callbacks.reset = [](PooledConnection& c) { return endpoint::ResetConnection(static_cast<OriginConnection&>(c)); };
  callbacks.rollback = [](PooledConnection& c) {
    return endpoint::RollbackConnection(static_cast<OriginConnection&>(c));
  };
  auto pool = Pool::Create(executor, impl->options.pool, std::move(callbacks));
  if (!pool.ok()) return pool.status();
  impl->pool = std::move(*pool);
  endpoint::ListenerConnection::Connect listener_connect = [cfg, connect, executor]() {
    return endpoint::ConnectOrigin(executor, *cfg, connect);
  };
  impl->listener = std::make_shared<endpoint::ListenerConnection>(
      executor, std::move(listener_connect),
      [weak](endpoint::ListenRegistry::Subscriber id, std::string_view raw) {
        auto self = weak.lock();
        if (!self) return;
        auto it = self->listen_sessions.find(id);
        if (it != self->listen_sessions.end()) it->second->DeliverNotification(raw);
      },
      endpoint::ListenerConnection::Options{});
  const std::string cache_db = cfg->dbname.empty() ? cfg->user : cfg->dbname;
  auto shared_tier = endpoint::EndpointCache::MakeSharedTier(
      executor, impl->options.cache, fmt::format("{}:{}/{}", cfg->host, cfg->port, cache_db));
  if (!shared_tier.ok()) return shared_tier.status();
  impl->cache = std::make_shared<endpoint::EndpointCache>(
      executor, impl->options.cache, cache_db, cfg->user, impl->options.pool.max_size,
      [weak]() -> asio::awaitable<absl::StatusOr<Lease>> {
        auto self = weak.lock();
        if (!self || self->stopped.load()) co_return absl::CancelledError("endpoint stopped");
        co_return co_await self->pool->Acquire();
      },
      std::move(*shared_tier));
  return std::unique_ptr<Endpoint>(new Endpoint(std::move(impl)));
}

Endpoint::Endpoint(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Endpoint::~Endpoint() { Stop(); }

void Endpoint::Accept(std::unique_ptr<Link> link) {
  std::shared_ptr<Impl> impl = impl_;
  asio::post(impl->executor, [impl, link = std::move(link)]() mutable {
    impl->NoteThread();
    if (impl->stopped.load()) {
      link->Close();
      return;
    }
    auto session = std::make_shared<Session>(impl, std::move(link));
    {
      std::lock_guard<std::mutex> lock(impl->mutex);
      impl->sessions.insert(session.get());
      impl->session_count.fetch_add(1);
    }
    session->Start();
  });
}

void Endpoint::Stop() {
  std::shared_ptr<Impl> impl = impl_;
  if (!impl->stopped.exchange(true)) {
    asio::post(impl->executor, [impl] {
      impl->pool->Stop();
      impl->listener->Stop();
      if (impl->cache) impl->cache->Stop();
      std::vector<Session*> sessions;
      {
        std::lock_guard<std::mutex> lock(impl->mutex);
        sessions.assign(impl->sessions.begin(), impl->sessions.end());
      }
      for (Session* s : sessions) s->Shutdown();
    });
  }
  // On the executor's own thread nothing can finish while we block: the
  // work above completes once control returns to the executor.
  if (impl->executor_thread.load() == std::this_thread::get_id()) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::unique_lock<std::mutex> lock(impl->mutex);
  while (std::chrono::steady_clock::now() < deadline) {
    const PoolStats stats = impl->pool->Stats();
    if (impl->sessions.empty() && stats.open == 0 && stats.closing == 0 && impl->pending_cancels.load() == 0 &&
        !impl->listener->running()) {
      return;
    }
    impl->sessions_done.wait_for(lock, std::chrono::milliseconds(5));
  }
}

// The operator controls post to the executor the pool lives on (pool.h).
void Endpoint::PausePool() {
  asio::post(impl_->executor, [impl = impl_] { impl->pool->Pause(); });
}
void Endpoint::ResumePool() {
  asio::post(impl_->executor, [impl = impl_] { impl->pool->Resume(); });
}
void Endpoint::ReconnectPool() {
  asio::post(impl_->executor, [impl = impl_] { impl->pool->Reconnect(); });
}
absl::Status Endpoint::UpdatePool(PoolOptions options) {
  if (options.max_size < 1 || options.min_idle > options.max_size) {
    return absl::InvalidArgumentError("pool size must be at least 1 and at least min_idle");
  }
  asio::post(impl_->executor, [impl = impl_, options] { (void)impl->pool->Update(options); });
  return absl::OkStatus();
}

std::vector<OriginServerInfo> Endpoint::Servers() const {
  std::shared_ptr<Impl> impl = impl_;
  auto collect = [impl] {
    std::vector<OriginServerInfo> out;
    const auto steady_now = std::chrono::steady_clock::now();
    const auto system_now = std::chrono::system_clock::now();
    for (const PoolServerInfo& p : impl->pool->Servers()) {
      OriginServerInfo info;
      info.state = p.state;
      info.backend_pid = p.backend_pid;
      if (p.opened_at != std::chrono::steady_clock::time_point{}) {
        info.connect_time = system_now - std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                             steady_now - p.opened_at);
      }
      info.pinned = p.pinned;
      info.retired = p.retired;
      out.push_back(std::move(info));
    }
    return out;
  };
  // On the executor's own thread the pool can be read at once (and a post
  // would wait for ourselves).
  if (impl->executor_thread.load() == std::this_thread::get_id()) return collect();
  auto promise = std::make_shared<std::promise<std::vector<OriginServerInfo>>>();
  std::future<std::vector<OriginServerInfo>> future = promise->get_future();
  asio::post(impl->executor, [impl, promise, collect] {
    impl->NoteThread();
    promise->set_value(collect());
  });
  if (future.wait_for(std::chrono::seconds(2)) != std::future_status::ready) return {};
  return future.get();
}

EndpointStats Endpoint::Stats() const {
  EndpointStats s;
  const PoolStats pool = impl_->pool->Stats();
  s.sessions = impl_->session_count.load();
  s.cache_watches = impl_->watch_count.load();
  s.origin_open = pool.open;
  s.origin_idle = pool.idle;
  s.waiting = pool.waiting;
  s.origin_lent = pool.lent;
  s.pool_max_size = pool.max_size;
  s.pool_paused = pool.paused;
  s.max_wait_us = static_cast<std::size_t>(std::chrono::duration_cast<std::chrono::microseconds>(pool.max_wait).count());
  s.transactions = impl_->transactions.load();
  s.acquire_timeouts = impl_->acquire_timeouts.load();
  s.discarded = impl_->discarded.load();
  s.origin_discarded = pool.discarded;
  s.pinned_sessions = impl_->pinned_sessions.load();
  auto pins = [&](PinReason r) { return impl_->pins[static_cast<std::size_t>(r)].load(); };
  for (const auto& p : impl_->pins) s.pins_total += p.load();
  s.pins_prepared_sql = pins(PinReason::kPreparedSql);
  s.pins_temp_table = pins(PinReason::kTempTable);
  s.pins_advisory_lock = pins(PinReason::kAdvisoryLock);
  s.pins_listen = pins(PinReason::kListen);
  s.pins_with_hold_cursor = pins(PinReason::kWithHoldCursor);
  s.pins_set_role = pins(PinReason::kSetRole);
  s.pinned_connections = impl_->pinned_connections.load();
  s.pins_rejected = impl_->pins_rejected.load();
  s.pinned_idle_timeouts = impl_->pinned_idle_timeouts.load();
  s.cancels_forwarded = impl_->cancels_forwarded.load();
  s.cancels_ignored = impl_->cancels_ignored.load();
  s.notifications_delivered = impl_->notifications_delivered.load();
  s.listener_reconnects = impl_->listener->reconnects();
  s.origin_rtt_us = impl_->origin_rtt_us.load();
  s.queries = impl_->queries.load(std::memory_order_relaxed);
  s.transaction_time = impl_->transaction_time.Snapshot();
  s.acquire_wait = impl_->acquire_wait.Snapshot();
  if (impl_->cache) {
    const endpoint::EndpointCacheReport c = impl_->cache->Report(0);
    s.cache_hits = c.tier.hits;
    s.cache_stale_hits = c.tier.stale_hits;
    s.cache_misses = c.tier.misses;
    s.cache_coalesced = c.tier.coalesced;
    s.cache_served = c.served;
    s.cache_uncacheable = c.uncacheable;
    s.cache_bypassed = c.bypassed;
    s.cache_stores = c.tier.stores;
    s.cache_evictions = c.tier.evictions;
    s.cache_invalidations = c.tier.invalidations;
    s.cache_write_invalidations = c.invalidations;
    s.cache_bytes = c.tier.bytes;
    s.cache_entries = c.tier.entries;
    s.redis_configured = c.shared_configured;
    s.redis_up = c.shared.up;
    s.redis_errors = c.shared.errors;
    s.shared_hits = c.shared.hits;
    s.shared_misses = c.shared.misses;
    s.shared_served = c.shared_served;
    s.shared_invalidations_received = c.shared.received;
    s.cache_stale_if_error = c.stale_if_error;
  }
  return s;
}

std::string Endpoint::CacheReport(std::size_t top) const {
  return impl_->cache ? endpoint::FormatCacheReport(impl_->cache->Report(top)) : std::string();
}

}  // namespace hyperpool
