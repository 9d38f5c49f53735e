// ClientSession (client_session.h), part two: opening the link, the Client
// cache tier (local hits, candidates, control messages), the app reader
// (PumpApp), the link reader (LinkToApp, OnLinkReadable) and the one writer
// to the app (SendApp, FlushApp). Part one is client_session.cc.
#include "client/client_session.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <span>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include "cache/tier.h"
#include "client/app_outbox.h"
#include "client/client_cache.h"
#include "client/client_util.h"
#include "client/extended_session.h"
#include "client/link_ready.h"
#include "client/link_trace.h"
#include "client/session_key.h"
#include "protocol/codec.h"
#include "protocol/link_protocol.h"

namespace hyperpool {

// ---- Forwarding

asio::awaitable<bool> ClientSession::OpenLink(std::string first_frames) {
  // (A named argument: a braced temporary inside a co_await is destroyed
  // twice by GCC 12, which corrupted this frame.)
  const std::string_view no_replication;
  const bool opened = co_await OpenLinkOnly(std::move(first_frames), no_replication);
  if (!opened) co_return false;
  asio::co_spawn(executor(), LinkToApp(shared_from_this()), asio::detached);
  co_return true;
}

asio::awaitable<bool> ClientSession::OpenLinkOnly(std::string first_frames, std::string_view replication) {
  if (impl_->stopping) co_return false;
  absl::StatusOr<std::string> id = client::NewSessionId();
  if (!id.ok()) {
    SendAppThenClose(ErrorFrame(pr::PoolerError{std::string(kSqlStateConnectionFailure), "could not generate a session id"}));
    co_return false;
  }
  {
    std::lock_guard lock(impl_->mu);  // (ForwardCancel reads it on other threads)
    session_id_ = *id;
  }
  // The app's parameters, as the login kept them (hello_params_, shared
  // with the Client's other sessions that sent the same; set by Run before
  // any link opens).
  client::ParamList hello_params = *hello_params_;
  if (!impl_->client_id.empty()) hello_params.emplace_back(link::kClientIdParam, impl_->client_id);
  hello_params.emplace_back(client::kDatabaseParam, database_);  // for a router of several databases
  // The pid of our BackendKeyData: the Endpoint shows it as the sender of
  // this session's notifications (src/endpoint/notification_pid.h).
  if (cancel_pid_ != 0) hello_params.emplace_back(link::kBackendPidParam, std::to_string(cancel_pid_));
  if (!replication.empty()) hello_params.emplace_back(link::kReplicationParam, std::string(replication));
  if (released_wrote_) hello_params.emplace_back(link::kWroteParam, "1");
  // The hello goes in front of the frames (which may be one large
  // message, moved here without a copy): one more copy of it is avoided.
  first_frames.insert(0, client::BuildLinkHello(hello_params, session_id_));
  auto link = co_await impl_->transport.Open(executor(), std::move(first_frames));
  if (!link.ok()) {
    Log(fmt::format("could not open a link to the endpoint: {}", std::string(link.status().message())));
    if (auto sqlstate = link.status().GetPayload(pr::kSqlStatePayload); sqlstate && !sqlstate->empty()) {
      // A refusal that says why (the "*" entry's limit): the app is told.
      const pr::PoolerError refusal{std::string(*sqlstate), std::string(link.status().message())};
      SendAppThenClose(ErrorFrame(refusal));
    } else {
      SendAppThenClose(ErrorFrame(pr::LinkFailure("could not reach the hyperpool endpoint")));
    }
    co_return false;
  }
  if (reason_ != EndReason::kNone && reason_ != EndReason::kTerminate) {  // stopped while opening
    (*link)->Close();
    co_return false;
  }
  link_ = std::move(*link);
  co_return true;
}

// ---- Replication connections

asio::awaitable<void> ClientSession::RunTunnel(std::shared_ptr<ClientSession> self, std::string replication) {
  SetState(State::kBusy);  // SHOW CLIENTS: active, as a walsender is
  std::string first(In().view());  // what the app sent right after its login
  In().Consume(first.size());
  if (!co_await OpenLinkOnly(std::move(first), replication)) co_return;
  asio::co_spawn(executor(), TunnelLinkToApp(self), asio::detached);
  while (link_ && co_await Fill(1)) {
    std::string chunk(In().view());
    In().Consume(chunk.size());
    if (!(co_await link_->Send(std::move(chunk))).ok()) break;
  }
  CloseLink();  // the Endpoint closes the walsender connection
}

asio::awaitable<void> ClientSession::TunnelLinkToApp(std::shared_ptr<ClientSession> self) {
  std::string bytes;
  for (;;) {
    bytes.clear();
    if (!(co_await link_->Receive(bytes)).ok()) break;
    auto [ec, n] = co_await WriteApp(bytes);
    CountSent(n);
    if (ec) break;
  }
  if (!pending_error_.empty()) {  // KILL_CLIENT (EndSession): why, as for any session
    auto [ec, n] = co_await WriteApp(pending_error_);
    CountSent(n);
  }
  CloseSocket();  // the walsender ended (or the app left): so does the app's connection
  SetState(State::kClosed);
}

// ---- The Client cache tier (client_cache.h, docs/architecture.md "Query cache")

void ClientSession::TraceFlight(std::string_view to_link, std::string_view local) const {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count() % 1000000;
  Log(fmt::format("trace {} t={}ms {}{}{}", cancel_pid_, ms,
                  to_link.empty() ? std::string("local only")
                                  : fmt::format("{} link: {}", link_ ? "to" : "opening", client::SummarizeFlight(to_link)),
                  local.empty() ? "" : " | answered locally: ", client::SummarizeFlight(local, false)));
}

bool ClientSession::ServeLocalHits(client::ClientCore::LocalMiss& miss) {
  for (;;) {
    std::string answer;
    const size_t n = core_.ServeLocalHit(In().view(), miss, answer);
    if (n == 0) return true;
    In().Consume(n);
    if (impl_->trace_link) TraceFlight({}, answer);
    // Queued after the link's bytes of earlier units (the outbox is one
    // queue): they reach the app first.
    SendApp(std::move(answer));
    if (state_ == State::kClosed) return false;
    ArmIdleTimer();  // a ReadyForQuery 'I' went out
    if (app_write_waiting_) {
      app_waits_out_ = true;  // the app is slow to read: read no more until it has
      return false;
    }
  }
}

void ClientSession::AppReadEnded() {
  if (reason_ == EndReason::kNone) reason_ = EndReason::kAppGone;
  CloseLink();
  if (!link_) {
    CloseSocket();
    SetState(State::kClosed);
  }
}

// ---- The writer

void ClientSession::SendApp(std::string bytes) {
  Out().Push(std::move(bytes));
  if (!app_write_waiting_) FlushApp();
}

void ClientSession::SendAppThenClose(std::string bytes) {
  close_when_drained_ = true;
  SendApp(std::move(bytes));
  if (OutEmpty() && !app_write_waiting_ && state_ != State::kClosed) {
    CloseLink();
    CloseSocket();
    SetState(State::kClosed);
  }
}

void ClientSession::FlushApp() {
  asio::error_code ec;
  if (!socket_.non_blocking()) socket_.non_blocking(true, ec);
  client::AppOutbox::Buffers buffers;
  while (!ec && !OutEmpty()) {
    const size_t count = Out().Gather(buffers);
    const size_t n = socket_.write_some(std::span<const asio::const_buffer>(buffers.data(), count), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      // The socket is full: one wait, then the rest (what is queued
      // meanwhile joins it; the buffers are gathered again then).
      app_write_waiting_ = true;
      socket_.async_wait(tcp::socket::wait_write, [self = shared_from_this()](asio::error_code wait_ec) {
        self->app_write_waiting_ = false;
        if (wait_ec) {
          self->Out().Clear();
          self->AppWriteFailed();
          return;
        }
        self->FlushApp();
        if (self->OutEmpty() && !self->app_write_waiting_) self->OnAppDrained();
      });
      return;
    }
    if (ec) break;
    Out().Consume(n);
    CountSent(n);
  }
  if (ec) {
    Out().Clear();
    AppWriteFailed();
  }
}

void ClientSession::OnAppDrained() {
  if (state_ == State::kClosed) return;
  if (close_when_drained_) {
    CloseLink();
    CloseSocket();
    SetState(State::kClosed);
    return;
  }
  if (link_waits_out_) {
    link_waits_out_ = false;
    WaitLink();  // link_in_ holds at most a partial frame
  }
  if (app_waits_out_ && !app_write_waiting_) {
    app_waits_out_ = false;
    PumpApp();
  }
}

// ---- The app reader

void ClientSession::PumpApp() {
  for (;;) {
    // The idle timeout or a Kill ended the session while we waited for the
    // app (EndSession): nothing more may be sent on the link.
    if (reason_ == EndReason::kIdleTimeout || reason_ == EndReason::kKilled) return;
    if (state_ == State::kClosed) return;
    client::ClientCore::LocalMiss miss;
    if (!ServeLocalHits(miss)) return;
    client::ClientCore::AppBatch batch = core_.TakeBatch(In().view(), miss, link_ != nullptr);
    // Set before the Terminate goes out: the Endpoint may close the link
    // before Send() returns, and the link reader must not call that a failure.
    if (batch.terminate && reason_ == EndReason::kNone) reason_ = EndReason::kTerminate;
    if (batch.consumed > 0) DisarmIdleTimer();  // a message arrived: not idle until the next ReadyForQuery
    In().Consume(batch.consumed);
    app_want_ = static_cast<uint32_t>(batch.want);
    if (impl_->trace_link && (batch.send_to_link || !batch.local.empty())) {
      TraceFlight(batch.send_to_link ? batch.to_link : "", batch.local);
    }
    if (batch.send_to_link && client::ExpectsAnswer(batch.to_link)) {
      impl_->link_flights.fetch_add(1, std::memory_order_relaxed);
    }
    const bool sent_local = !batch.local.empty();
    if (sent_local) {
      // Before anything this batch sends: their answers come later.
      SendApp(std::move(batch.local));
      if (state_ == State::kClosed) return;
    }
    if (batch.send_to_link) {
      if (!link_) {
        asio::co_spawn(executor(), OpenLinkThen(shared_from_this(), std::move(batch), sent_local), asio::detached);
        return;
      }
      if (!link_->TrySend(batch.to_link)) {
        asio::co_spawn(executor(), SendThen(shared_from_this(), std::move(batch), sent_local), asio::detached);
        return;
      }
    }
    if (!AfterBatch(batch, sent_local)) return;
  }
}

asio::awaitable<void> ClientSession::OpenLinkThen(std::shared_ptr<ClientSession> self,
                                                  client::ClientCore::AppBatch batch, bool sent_local) {
  // Not `if (!co_await ...)`: GCC 12 miscompiles that in this coroutine
  // (a by-value aggregate parameter): SIGILL on resumption.
  const bool opened = co_await OpenLink(std::move(batch.to_link));
  if (!opened) {
    // OpenLink told the app why (and closes once that is written), or the
    // session was stopped meanwhile.
    if (!close_when_drained_) CloseSocket();
    co_return;
  }
  if (self->AfterBatch(batch, sent_local)) PumpApp();
}

asio::awaitable<void> ClientSession::SendThen(std::shared_ptr<ClientSession> self, client::ClientCore::AppBatch batch,
                                              bool sent_local) {
  absl::Status sent = co_await link_->Send(std::move(batch.to_link));
  if (!sent.ok()) co_return;  // the link reader reports the broken link
  if (self->AfterBatch(batch, sent_local)) PumpApp();
}

bool ClientSession::AfterBatch(client::ClientCore::AppBatch& batch, bool sent_local) {
  if (batch.send_to_link && core_.outstanding() > 0 && state_ == State::kIdle) SetState(State::kBusy);
  if (batch.terminate) {
    if (reason_ == EndReason::kNone) reason_ = EndReason::kTerminate;
    CloseLink();
    CloseSocket();
    SetState(State::kClosed);
    return false;
  }
  if (!batch.bad.ok()) {
    std::string error = ErrorFrame({std::string(batch.bad_sqlstate), std::string(batch.bad.message())});
    Log(fmt::format("closing an app connection: {}", std::string(batch.bad.message())));
    if (link_ && reason_ == EndReason::kNone) {
      // The link reader delivers the error when the link ends (LinkEnded).
      pending_error_ = std::move(error);
      reason_ = EndReason::kAppProtocolError;
      CloseLink();
    } else if (!link_) {
      SendAppThenClose(std::move(error));
    }
    return false;
  }
  if (sent_local && app_write_waiting_) {
    // Read no more until the app has read its answers (OnAppDrained runs
    // PumpApp again).
    app_waits_out_ = true;
    return false;
  }
  if (reason_ != EndReason::kNone) {
    AppReadEnded();
    return false;
  }
  // Nothing buffered (no coroutine waits for the app's next message), or
  // a partial frame: a readability wait reads on.
  ParkApp();
  return false;
}

// ---- The link reader

asio::awaitable<void> ClientSession::LinkToApp(std::shared_ptr<ClientSession> self) {
  std::string& buf = link_in_;
  // Link-ready: ParameterStatus... ReadyForQuery('I'). Not for the app
  // (it had its own from our handshake); refreshes the cached parameters.
  client::LinkReadyReader ready;
  for (;;) {
    size_t consumed = 0;
    const client::LinkReadyReader::Result r = ready.Read(buf, &consumed);
    if (r == client::LinkReadyReader::Result::kReady) {
      if (!ready.params().empty()) {
        std::lock_guard lock(impl_->mu);
        impl_->params = ready.TakeParams();
      }
      buf.erase(0, consumed);
      break;
    }
    if (r == client::LinkReadyReader::Result::kRefused) {
      // The Endpoint cannot serve: its error is the app's answer.
      SendApp(ready.error());
      farewell_sent_ = true;
      LinkEnded();
      co_return;
    }
    if (r == client::LinkReadyReader::Result::kMalformed) {
      Log("malformed link-ready from the endpoint");
      LinkEnded();
      co_return;
    }
    absl::StatusOr<size_t> n = co_await link_->Receive(buf);
    if (!n.ok()) {
      LinkEnded();
      co_return;
    }
  }
  if (ForwardLinkBytes() == LinkStep::kMore) WaitLink();
}

ClientSession::LinkStep ClientSession::ForwardLinkBytes() {
  bool malformed = false;
  client::ClientCore::LinkEvents events;
  if (!link_in_.empty()) {
    std::string copy;
    size_t consumed = 0;
    client::AppBytes out(link_in_, copy);
    malformed = !core_.OnLinkBytes(link_in_, out, consumed, events);
    if (events.metadata_dropped && impl_->trace_link) {
      Log(fmt::format("trace {} invalidate all (statement metadata dropped)", cancel_pid_));
    }
    if (core_.outstanding() == 0 && state_ == State::kBusy) SetState(State::kIdle);
    if (events.ready_idle) ArmIdleTimer();
    if (!out.verbatim()) {
      link_in_.erase(0, consumed);
      SendApp(std::move(copy));
    } else if (const size_t verbatim = out.verbatim_size(); verbatim == 0) {
      link_in_.erase(0, consumed);
    } else if (link_in_.size() - consumed <= verbatim) {
      // The usual case: the received chunk itself goes to the app, the
      // frames the Client consumed (the cache's controls) moved out of it
      // in place (a partial frame after it is copied out first).
      std::string rest = link_in_.substr(consumed);
      std::string chunk = std::move(link_in_);
      out.CompactTo(chunk);
      link_in_ = std::move(rest);
      SendApp(std::move(chunk));
    } else {
      SendApp(out.Gathered());
      link_in_.erase(0, consumed);
    }
    if (state_ == State::kClosed) return LinkStep::kEnded;  // the app is gone (AppWriteFailed)
  }
  if (malformed) {
    Log("malformed backend stream from the endpoint");
    LinkEnded();
    return LinkStep::kEnded;
  }
  if (events.release_offered) OnReleaseOffer(events.release_wrote);
  if (!OutEmpty()) {
    link_waits_out_ = true;  // read the link again once the app has read these
    return LinkStep::kWait;
  }
  return LinkStep::kMore;
}

void ClientSession::OnReleaseOffer(bool wrote) {
  if (state_ != State::kIdle || reason_ != EndReason::kNone) return;
  // Not at once: the Endpoint's sweep found the session idle at one
  // instant, which a session between two transactions also is. Two sweeps
  // of ours with no message from the app in between (idle_generation_
  // moves with every one) say it stays idle: SweepIdleClientSession.
  release_stage_ = 1;
  release_wrote_ = wrote;
  release_generation_ = static_cast<uint32_t>(idle_generation_);
  NoteIdle();
}

bool ClientSession::ReleaseLink(bool wrote) {
  if (!link_ || state_ != State::kIdle || reason_ != EndReason::kNone || close_when_drained_ || InSize() != 0 ||
      !link_in_.empty() || !OutEmpty() || app_write_waiting_ || app_waits_out_ || link_waits_out_ ||
      !core_.LinkReleasable()) {
    return false;
  }
  // Terminate: the Endpoint's half ends as after any client's goodbye (its
  // callback may run inside this send; closing its end posts our parked
  // callback, which link_epoch_ then tells that the link is gone).
  std::string bye;
  pr::Encode(pr::Terminate{}, bye);
  if (!link_->TrySend(bye)) return false;
  link_->Close();
  link_.reset();
  ++link_epoch_;
  std::string().swap(link_in_);
  {
    std::lock_guard lock(impl_->mu);  // (ForwardCancel reads it on other threads)
    session_id_.clear();
  }
  released_wrote_ = released_wrote_ || wrote;  // said in every later hello
  impl_->links_released.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void ClientSession::WaitLink() {
  std::shared_ptr<ClientSession> self = shared_from_this();
  if (ParkLink(self)) return;
  asio::co_spawn(executor(), ReceiveLink(std::move(self)), asio::detached);
}

asio::awaitable<void> ClientSession::ReceiveLink(std::shared_ptr<ClientSession> self) {
  for (;;) {
    // A large chunk (a big result) is not kept for the session's life.
    if (link_in_.empty() && link_in_.capacity() > (256u << 10)) std::string().swap(link_in_);
    absl::StatusOr<size_t> n = co_await link_->Receive(link_in_);
    if (!n.ok()) {
      LinkEnded();
      co_return;
    }
    if (ForwardLinkBytes() != LinkStep::kMore) co_return;
  }
}

bool ClientSession::ParkLink(const std::shared_ptr<ClientSession>& self) {
  if (!link_->WhenReadable(executor(), [self, epoch = link_epoch_] {
        if (self->link_epoch_ == epoch) self->OnLinkReadable();  // (else the link was let go: ReleaseLink)
      })) {
    return false;
  }
  // (The callback is posted.) An idle session keeps no chunk; a partial
  // frame stays for the bytes that complete it.
  if (link_in_.empty()) std::string().swap(link_in_);
  return true;
}

void ClientSession::OnLinkReadable() {
  for (;;) {
    std::optional<absl::StatusOr<size_t>> n = link_->TryReceive(link_in_);
    if (!n) {
      WaitLink();
      return;
    }
    if (!n->ok()) {
      LinkEnded();
      return;
    }
    // Forwarded as it arrives; a write the socket cannot take at once
    // waits in the outbox, and the link is read again when it drained.
    if (ForwardLinkBytes() != LinkStep::kMore) return;
  }
}

void ClientSession::AppWriteFailed() {
  if (reason_ == EndReason::kNone) reason_ = EndReason::kAppGone;
  CloseLink();
  CloseSocket();
  SetState(State::kClosed);
}

void ClientSession::LinkEnded() {
  std::string error;
  switch (reason_) {
    case EndReason::kNone: {
      reason_ = EndReason::kLinkFailed;
      bool endpoint_said_why = farewell_sent_ || core_.ended_with_error();
      if (!endpoint_said_why) {
        Log("the link to the endpoint failed");
        error = ErrorFrame(pr::LinkFailure("lost the connection to the hyperpool endpoint"));
      }
      break;
    }
    case EndReason::kAppProtocolError:
    case EndReason::kIdleTimeout:
    case EndReason::kKilled:
      error = pending_error_;
      break;
    case EndReason::kStopped:
      break;
    default:
      break;
  }
  CloseLink();
  // After what is queued for the app (the link's last answers).
  SendAppThenClose(std::move(error));
}

}  // namespace hyperpool
