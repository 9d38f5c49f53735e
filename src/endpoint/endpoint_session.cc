// Session (endpoint_session.h), part one: construction, the hello, the
// link kinds that are no session (placement probes, invalidation watches,
// cancels) and link-ready. Part two, endpoint_session_io.cc: the I/O
// around the session's core.
#include "endpoint/endpoint_session.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <fmt/format.h>

#include "endpoint/notification_pid.h"
#include "endpoint/origin_connection.h"
#include "placement/probe.h"
#include "protocol/codec.h"
#include "protocol/link_protocol.h"
#include "protocol/sqlstate.h"

namespace hyperpool {

Session::Session(std::shared_ptr<Endpoint::Impl> endpoint, std::unique_ptr<Link> link)
    : endpoint_(std::move(endpoint)),
      link_(std::move(link)),
      reader_(protocol::FrameReader::Mode::kStartup),
      cache_(endpoint_->cache,
             [this](std::string control) {
               // A broadcast invalidation for this session's Client.
               if (tunnel_) return;  // a walsender's link carries only the origin's bytes
               if (watch_) {
                 if (link_closed_) return;
                 link_out_ += control;
                 if (link_out_.size() > kMaxLocalBacklog) {
                   Shutdown();  // a Client not reading its watch: it drops its tier and subscribes again
                   return;
                 }
                 sent_.Notify();  // RunWatch sends it
                 return;
               }
               if (core_ || dormant_) {
                 Core().DeliverControl(control);
                 Execute(/*flush_link=*/true);
               } else {
                 link_out_ += control;  // before link-ready is sent: queued behind it
               }
             }),
      listen_id_(++endpoint_->on_executor.next_listen_id) {}

Session::~Session() {
  // A lease still held here closes its connection (Lease's destructor).
  LeavePinWait();
  if (dormant_) endpoint_->sleeping_sessions.fetch_sub(1, std::memory_order_relaxed);
  Unregister();
  std::lock_guard<std::mutex> lock(endpoint_->mutex);
  endpoint_->sessions.erase(this);
  const std::size_t left = (watch_ ? endpoint_->watch_count : endpoint_->session_count).fetch_sub(1) - 1;
  endpoint_->sessions_done.notify_all();
  if (!watch_ && left == 0 && endpoint_->options.close_idle_when_unused.count() > 0 && !endpoint_->stopped) {
    std::unique_ptr<asio::steady_timer>& timer = endpoint_->on_executor.unused_timer;
    if (!timer) timer = std::make_unique<asio::steady_timer>(endpoint_->executor);
    timer->expires_after(endpoint_->options.close_idle_when_unused);
    timer->async_wait([weak = std::weak_ptr<Endpoint::Impl>(endpoint_)](std::error_code ec) {
      std::shared_ptr<Endpoint::Impl> ep = weak.lock();
      if (ec || !ep || ep->stopped || ep->session_count.load() != 0) return;
      ep->pool->Reconnect();  // the idle ones close now (min_idle 0: none reopens)
    });
  }
}

void Session::Start() {
  asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->Run(); }, asio::detached);
}

void Session::DeliverNotification(std::string_view raw_frame) {
  if ((!core_ && !dormant_) || finished_) return;
  Core().OnNotification(raw_frame);
  Execute(/*flush_link=*/true);
}

void Session::Shutdown() {
  if (core_ || dormant_) {
    Core().Shutdown();
    Execute(/*flush_link=*/true);
  } else {
    link_closed_ = true;
    link_->Close();
  }
  sent_.Notify();
  client_wake_.Notify();
  origin_wake_.Notify();
}

asio::awaitable<void> Session::Run() {
  endpoint_->NoteThread();
  const bool hello = co_await ReadHello();
  if (hello && probe_) {
    co_await AnswerProbe();
    link_closed_ = true;
    link_->Close();
    co_return;
  }
  if (hello && watch_) {
    co_await RunWatch();
    link_closed_ = true;
    link_->Close();
    co_return;
  }
  if (hello && tunnel_) {
    co_await RunTunnel();
    link_closed_ = true;
    link_->Close();
    co_return;
  }
  const bool link_up = hello && co_await SendLinkReady();
  // Link-ready not delivered but the origin reachable: the Client closed
  // the link right after the frames that came with the hello. If they hold
  // a Terminate, what came before it still runs, as PostgreSQL runs it.
  if (link_up || (hello && endpoint::HasTerminate(in_) && !endpoint_->on_executor.origin_parameters.empty())) {
    endpoint::SessionCore::Identity identity;
    for (auto& [name, value] : hello_parameters_) {
      if (name == link::kSessionIdParam) identity.session_id = std::move(value);  // core_->session_id() from now on
    }
    identity.app_pid = app_pid_;
    identity.hello = std::move(hello_parameters_);  // the core reads them once, then frees them
    identity.listen_id = listen_id_;
    core_ = std::make_unique<endpoint::SessionCore>(*endpoint_, cache_, std::move(identity));
    registered_ = true;
    endpoint_->on_executor.listen_sessions[listen_id_] = this;
    if (!core_->session_id().empty()) endpoint_->on_executor.sessions_by_id[core_->session_id()] = this;
    if (!link_out_.empty()) {
      core_->DeliverControl(link_out_);  // invalidations that came before link-ready went out
      link_out_.clear();
    }
    // The frames that came with the hello (the link's first message).
    core_->TakeClientBytes(in_);
    if (!link_up) core_->OnClientGone();
    Execute(/*flush_link=*/true);
    if (link_up) PumpLink();  // (this coroutine ends: the link is read by callbacks from now on)
    co_return;
  }
  link_closed_ = true;
  link_->Close();
}

asio::awaitable<bool> Session::ReadHello() {
  for (;;) {
    auto r = reader_.Read(in_);
    if (r.is_frame()) {
      auto packet = protocol::DecodeStartupPacket(r.frame().payload);
      if (!packet.ok() || !std::holds_alternative<protocol::StartupMessage>(*packet)) {
        co_await SendFatal(protocol::ProtocolViolation("hyperpool: the link did not start with a StartupMessage"));
        co_return false;
      }
      for (const auto& [name, value] : std::get<protocol::StartupMessage>(*packet).parameters) {
        hello_parameters_.emplace_back(std::string(name), std::string(value));
      }
      in_.erase(0, r.frame().size());
      reader_.set_mode(protocol::FrameReader::Mode::kTagged);
      co_return OnHello();  // false: a cancel link, routed, nothing more
    }
    if (r.is_error()) {
      co_await SendFatal(protocol::ProtocolViolation(
          fmt::format("hyperpool: invalid hello on the link: {}", std::string(r.status().message()))));
      co_return false;
    }
    auto n = co_await link_->Receive(in_);
    if (!n.ok()) co_return false;
  }
}

bool Session::OnHello() {
  std::string cancel_id;
  for (const auto& [name, value] : hello_parameters_) {
    if (name == link::kCancelSessionParam) cancel_id = value;
    if (name == endpoint::kBackendPidParam) app_pid_ = endpoint::ParseBackendPid(value).value_or(0);
    if (name == placement::kProbeParam) probe_ = true;
    if (name == cache::kWatchParam && value == "1") watch_ = true;
    if (name == link::kReplicationParam && !value.empty()) tunnel_ = true;
  }
  if (watch_ && !probe_) {
    // Not a session: counted as a watch (EndpointStats::cache_watches).
    endpoint_->session_count.fetch_sub(1);
    endpoint_->watch_count.fetch_add(1);
    return true;  // served by RunWatch
  }
  watch_ = false;
  if (probe_) {
    return true;  // answered by AnswerProbe
  }
  if (!cancel_id.empty()) {
    RouteCancel(cancel_id);
    return false;
  }
  return true;
}

void Session::RouteCancel(const std::string& id) {
  auto it = endpoint_->on_executor.sessions_by_id.find(id);
  if (it != endpoint_->on_executor.sessions_by_id.end() && it->second->Cancel()) {
    endpoint_->cancels_forwarded++;
  } else {
    endpoint_->cancels_ignored++;  // idle or unknown: hits no one
  }
}

asio::awaitable<bool> Session::SendLinkReady() {
  if (endpoint_->on_executor.origin_parameters.empty()) {
    auto lease = co_await endpoint_->pool->Acquire();
    if (!lease.ok()) {
      if (lease.status().code() == absl::StatusCode::kResourceExhausted) endpoint_->acquire_timeouts++;
      co_await SendFatal(protocol::ErrorForAcquire(lease.status()));
      co_return false;
    }
    auto& conn = lease->As<OriginConnection>();
    if (endpoint_->on_executor.origin_parameters.empty()) endpoint_->on_executor.origin_parameters = conn.parameters();
    lease->Release(DecideRelease({.mode = endpoint_->options.pool.mode,
                                  .status = ToPoolStatus(conn.transaction_status()),
                                  .client_gone = true,
                                  .broken = conn.broken(),
                                  .lifetime_exceeded = lease->lifetime_exceeded()}));
  }
  std::string out;
  for (const auto& [name, value] : endpoint_->on_executor.origin_parameters) {
    protocol::Encode(protocol::ParameterStatus{name, value}, out);
  }
  AppendReadyForQuery(out, 'I');
  absl::Status sent = co_await link_->Send(std::move(out));
  co_return sent.ok() && !link_closed_;
}

asio::awaitable<void> Session::AnswerProbe() {
  constexpr auto kFresh = std::chrono::seconds(10);
  std::shared_ptr<Endpoint::Impl> ep = endpoint_;
  if (ep->on_executor.rtt_count == 0) {
    absl::Status measured = co_await MeasureOriginRtt(ep);
    if (!measured.ok()) {
      co_await SendFatal(protocol::ErrorForAcquire(measured));
      co_return;
    }
  } else if (std::chrono::steady_clock::now() - ep->on_executor.rtt_measured_at > kFresh &&
             !ep->on_executor.rtt_refreshing) {
    // Answer with what is known now (a busy pool must not stall a probe)
    // and refresh in the background for the next one.
    ep->on_executor.rtt_refreshing = true;
    asio::co_spawn(
        ep->executor,
        [ep]() -> asio::awaitable<void> {
          (void)co_await MeasureOriginRtt(ep);
          ep->on_executor.rtt_refreshing = false;
        },
        asio::detached);
  }
  std::string out;
  protocol::Encode(protocol::ParameterStatus{placement::kOriginRttParam, std::to_string(ep->origin_rtt_us.load())},
                   out);
  AppendReadyForQuery(out, 'I');
  (void)co_await link_->Send(std::move(out));
}

asio::awaitable<void> Session::RunWatch() {
  link_out_ = cache_.StartWatch(hello_parameters_) + link_out_;
  AppendReadyForQuery(link_out_, 'I');
  asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->FlushWatch(); }, asio::detached);
  while (!link_closed_) {
    auto r = reader_.Read(in_);
    if (r.is_need_more()) {
      auto n = co_await link_->Receive(in_);
      if (!n.ok()) break;
      continue;
    }
    if (r.is_error() || (r.frame().tag != 'S' && r.frame().tag != 'X')) {
      protocol::AppendError(link_out_, "FATAL",
                            protocol::ProtocolViolation("hyperpool: a cache watch link takes only Sync and Terminate"));
      finished_ = true;  // FlushWatch closes the link after it
      sent_.Notify();
      co_return;
    }
    const char tag = r.frame().tag;
    in_.erase(0, r.frame().size());
    if (tag == 'X') break;
    AppendReadyForQuery(link_out_, 'I');  // the heartbeat: after every invalidation queued before it
    sent_.Notify();
  }
  finished_ = true;
  sent_.Notify();
}

asio::awaitable<void> Session::FlushWatch() {
  for (;;) {
    if (!link_out_.empty() && !link_closed_) {
      std::string out = std::move(link_out_);
      link_out_.clear();
      absl::Status sent = co_await link_->Send(std::move(out));
      if (!sent.ok()) break;
      continue;
    }
    if (finished_ || link_closed_) break;
    co_await sent_.Wait();
  }
  link_closed_ = true;
  link_->Close();
}

asio::awaitable<void> Session::RunTunnel() {
  std::string replication;
  std::vector<std::pair<std::string, std::string>> app_parameters;
  for (auto& [name, value] : hello_parameters_) {
    if (name == link::kReplicationParam) {
      replication = std::move(value);
    } else if (!name.starts_with(link::kParamPrefix)) {
      app_parameters.emplace_back(std::move(name), std::move(value));
    }
  }
  hello_parameters_.clear();
  endpoint::ConnectResult r = co_await endpoint_->connect_walsender(std::move(replication), std::move(app_parameters));
  if (!r.ok()) {
    // As the origin answered it (28000 without a replication line in
    // pg_hba.conf, 42501 without the REPLICATION attribute), else 08001.
    // (Named, not a braced temporary inside the co_await: GCC 12 destroys
    // such a temporary twice.)
    const protocol::PoolerError refusal{
        r.failure.sqlstate.empty() ? std::string(kSqlStateCannotConnect) : r.failure.sqlstate, r.failure.message};
    co_await SendFatal(refusal);
    co_return;
  }
  std::shared_ptr<OriginConnection> origin(std::move(r.connection));
  asio::co_spawn(endpoint_->executor,
                 [self = shared_from_this(), origin]() { return self->TunnelOriginToLink(origin); }, asio::detached);
  // The frames that came with the hello, then everything after them.
  std::string bytes = std::move(in_);
  in_.clear();
  for (;;) {
    if (!bytes.empty() && !(co_await origin->Write(bytes)).ok()) break;
    bytes.clear();
    if (link_closed_ || !(co_await link_->Receive(bytes)).ok()) break;
  }
  origin->CloseNow();  // the app left: the walsender ends (its pending read fails)
}

asio::awaitable<void> Session::TunnelOriginToLink(std::shared_ptr<OriginConnection> origin) {
  for (;;) {
    absl::StatusOr<protocol::Frame> f = co_await origin->ReadFrame();
    if (!f.ok()) break;
    std::string out(f->raw);
    // What else the read brought, in one send.
    while (origin->HasBufferedFrame()) {
      absl::StatusOr<std::optional<protocol::Frame>> more = origin->TakeBufferedFrame();
      if (!more.ok() || !*more) break;
      out.append((*more)->raw);
    }
    if (!(co_await link_->Send(std::move(out))).ok()) break;
  }
  origin->CloseNow();
  link_closed_ = true;
  link_->Close();  // the walsender ended (or the link went): so does the app's connection
}

asio::awaitable<void> Session::SendFatal(const protocol::PoolerError& error) {
  std::string out;
  protocol::AppendError(out, "FATAL", error);
  (void)co_await link_->Send(std::move(out));
}

}  // namespace hyperpool
