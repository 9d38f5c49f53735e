// Session (endpoint_session.h), part two: the I/O around SessionCore. The
// two readers feed the core; Execute() carries out what it decided; one
// coroutine per asynchronous command reports its completion back.
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>
#include <fmt/format.h>

#include "endpoint/endpoint_session.h"
#include "endpoint/listener.h"
#include "endpoint/origin_connection.h"
#include "endpoint/settings_replay.h"
#include "protocol/codec.h"

namespace hyperpool {

using endpoint::SessionCommand;

bool Session::Cancel() {
  if (!core_ || finished_) return false;
  const bool cancelled = core_->OnCancelRequest();
  Execute(/*flush_link=*/true);
  return cancelled;
}

// ----- The readers

bool Session::MayReadLink() const {
  if (!core_->wants_client()) return false;
  const OriginIo* o = origin_io_.get();
  const std::size_t pending =
      core_->outbox().to_origin.size() + (o ? o->origin_out.size() + o->origin_writing_buf.size() : 0);
  return pending <= endpoint_->options.max_pending_to_origin;
}

asio::awaitable<void> Session::ReadLink() {
  for (;;) {
    // Backpressure (MayReadLink): an app that pipelines while its origin
    // connection is busy blocks in its send, as directly.
    while (!finished_ && !core_->ending() && !MayReadLink()) co_await client_wake_.Wait();
    if (finished_ || core_->ending()) co_return;
    // Into a buffer of our own: a Receive in progress may hold scratch
    // space at its end, which the core must never read.
    absl::StatusOr<std::size_t> n = co_await link_->Receive(in_);
    if (finished_) co_return;
    if (!n.ok()) {
      // The Client closed the link: after Terminate (its units finish) or
      // without it (a vanished client).
      core_->OnClientGone();
      Execute(/*flush_link=*/true);
      co_return;
    }
    core_->TakeClientBytes(in_);
    ReleaseIfLarge(in_);  // (it may now hold the core's old buffer)
    Execute(/*flush_link=*/true);
  }
}

void Session::PumpLink() {
  if (pumping_link_ || link_armed_ || link_coroutine_) return;
  pumping_link_ = true;
  auto self = shared_from_this();  // (Execute may end the session)
  (void)Core();  // the link has something (bytes, or its end): a sleeping core wakes
  while (!finished_ && !core_->ending()) {
    if (!MayReadLink()) {
      link_blocked_ = true;  // LinkRoom calls again
      break;
    }
    std::optional<absl::StatusOr<std::size_t>> n = link_->TryReceive(in_);
    if (!n) {
      link_armed_ = link_->WhenReadable(endpoint_->executor, [self] {
        self->link_armed_ = false;
        self->PumpLink();
      });
      if (!link_armed_) {
        link_coroutine_ = true;
        asio::co_spawn(endpoint_->executor, [self]() { return self->ReadLink(); }, asio::detached);
      }
      break;
    }
    if (!n->ok()) {
      // As in ReadLink: the Client closed the link.
      core_->OnClientGone();
      Execute(/*flush_link=*/true);
      break;
    }
    core_->TakeClientBytes(in_);
    ReleaseIfLarge(in_);
    Execute(/*flush_link=*/true);
  }
  pumping_link_ = false;
}

void Session::LinkRoom() {
  if (!MayReadLink()) return;
  client_wake_.Notify();
  if (link_blocked_ && !pumping_link_) {
    link_blocked_ = false;
    // Posted, as the coroutine reader's wake-up was: not inside this event.
    asio::post(endpoint_->executor, [self = shared_from_this()] { self->PumpLink(); });
  }
}

bool Session::OriginPumpWanted() const {
  const OriginIo* o = origin_io_.get();
  return o != nullptr && !finished_ && o->lease && o->own_query == nullptr && core_->wants_origin() &&
         o->origin_waiting == nullptr && !o->pumping_origin && link_out_.size() <= kMaxLinkBatch;
}

void Session::PumpOrigin() {
  if (O().origin_reader || O().pumping_origin || O().origin_waiting != nullptr) return;
  O().pumping_origin = true;
  auto self = shared_from_this();  // (Execute may end the session)
  // ReadOrigin's loop without a coroutine: the frames already buffered;
  // when they are used up, another read if the last one filled all the
  // space it had (a large result streaming in), else a readability wait
  // whose callback reads and calls back here.
  while (!finished_ && O().lease && O().own_query == nullptr && core_->wants_origin() &&
         link_out_.size() <= kMaxLinkBatch) {
    OriginConnection* c = &O().lease.As<OriginConnection>();
    absl::StatusOr<std::optional<protocol::Frame>> buffered = c->TakeBufferedFrame();
    if (buffered.ok() && !*buffered) {
      if (!c->SupportsTryFill()) {
        // TLS: only a coroutine reads it (its records).
        O().origin_reader = true;
        asio::co_spawn(endpoint_->executor, [self]() { return self->ReadOrigin(); }, asio::detached);
        break;
      }
      if (O().origin_read_full) {
        O().origin_read_full = false;
        std::optional<absl::StatusOr<bool>> more = c->TryFill(&O().origin_read_full);
        if (more->ok() && **more) continue;
        if (!more->ok()) buffered = more->status();
      }
    }
    if (buffered.ok() && !*buffered) {
      O().origin_waiting = c;
      O().reading = c;
      // One shared_ptr captured (c is origin_waiting_): stored in the
      // handler itself, no allocation per wait.
      c->WaitReadable([self](std::error_code) {
        OriginConnection* c = self->O().origin_waiting;
        self->O().origin_waiting = nullptr;
        self->O().reading = nullptr;
        if (!self->O().lease || &self->O().lease.As<OriginConnection>() != c) {
          self->MaybeFinishRelease();  // released (closed) while we waited: nothing more to do with it
        } else if (std::optional<absl::StatusOr<bool>> got = c->TryFill(&self->O().origin_read_full); !got->ok()) {
          self->core_->OnOriginLost(got->status());
          self->Execute(/*flush_link=*/true);
        }
        self->PumpOrigin();
      });
      break;
    }
    if (!buffered.ok()) {
      core_->OnOriginLost(buffered.status());
      Execute(/*flush_link=*/true);
      continue;
    }
    if (!core_->OnOriginFrame(**buffered)) {
      Execute(/*flush_link=*/true);  // held for the listener: sends what came before it
      continue;
    }
    // As ReadOrigin: a burst of frames goes to the link in one send.
    Execute(/*flush_link=*/!O().lease || !c->HasBufferedFrame());
  }
  O().pumping_origin = false;
}

asio::awaitable<void> Session::ReadOrigin() {
  for (;;) {
    while (!finished_ && O().lease && !(O().own_query == nullptr && core_->wants_origin())) co_await origin_wake_.Wait();
    if (finished_ || !O().lease) {
      // No connection to read: the reader ends, so an idle session holds
      // no coroutine for it; Execute starts it again with the next lease.
      O().origin_reader = false;
      co_return;
    }
    OriginConnection* c = &O().lease.As<OriginConnection>();
    // A frame already buffered is taken without suspending (most of a
    // unit's answers arrive in one read); only an empty buffer waits.
    absl::StatusOr<std::optional<protocol::Frame>> buffered = c->TakeBufferedFrame();
    absl::StatusOr<protocol::Frame> frame = absl::UnknownError("");
    if (!buffered.ok()) {
      frame = buffered.status();
    } else if (*buffered) {
      frame = **buffered;
    } else {
      O().reading = c;
      frame = co_await c->ReadFrame();
      O().reading = nullptr;
      if (!O().lease || &O().lease.As<OriginConnection>() != c) {
        MaybeFinishRelease();  // released (closed) while we read: nothing more to do with it
        continue;
      }
    }
    if (!frame.ok()) {
      core_->OnOriginLost(frame.status());
      Execute(/*flush_link=*/true);
      continue;
    }
    if (!core_->OnOriginFrame(*frame)) {
      Execute(/*flush_link=*/true);  // held for the listener: sends what came before it
      continue;
    }
    // Batches a burst of frames into one link send (a large result into
    // several): sent when nothing more is buffered, the unit is answered,
    // or the batch is large.
    Execute(/*flush_link=*/!O().lease || !c->HasBufferedFrame());
    // Backpressure: a Client that does not read stops the origin reads.
    while (!finished_ && link_out_.size() > kMaxLinkBatch) co_await sent_.Wait();
  }
}

// ----- Executing the core's decisions

void Session::Execute(bool flush_link) {
  if (!core_ || executing_) return;  // (re-entered from a command run below: the outer call finishes it)
  auto self = shared_from_this();
  endpoint::SessionCore::Outbox& out = core_->outbox();
  executing_ = true;
  for (;;) {
    if (!out.to_origin.empty()) {
      if (O().origin_out.empty()) {
        O().origin_out.swap(out.to_origin);
      } else {
        O().origin_out += out.to_origin;
        out.to_origin.clear();
      }
      ReleaseIfLarge(out.to_origin);
    }
    if (out.commands.empty()) break;
    SessionCommand command = std::move(out.commands.front());
    out.commands.pop_front();
    RunCommand(command);
  }
  if (flush_link || out.flush_client || out.to_client.size() >= kMaxLinkBatch || core_->ending()) {
    out.flush_client = false;
    if (!out.to_client.empty()) {
      if (core_->discard_output() || link_closed_) {
        out.to_client.clear();  // nobody reads it any more
      } else if (link_out_.empty()) {
        link_out_.swap(out.to_client);
      } else {
        link_out_ += out.to_client;
        out.to_client.clear();
      }
      ReleaseIfLarge(out.to_client);
    }
  }
  executing_ = false;
  // (An event that left no origin state, such as an answer from the
  // Endpoint's tier after the sweep, makes none.)
  if (OriginIo* o = origin_io_.get()) {
    if (o->origin_reader) {
      if (core_->wants_origin() || !o->lease) origin_wake_.Notify();  // (without a lease: the reader ends)
    } else if (OriginPumpWanted() && !o->origin_pump_posted) {
      // Posted, as the reader coroutine's wake-up was: not inside this event.
      o->origin_pump_posted = true;
      asio::post(endpoint_->executor, [self] {
        self->O().origin_pump_posted = false;
        self->PumpOrigin();
      });
    }
    // At once when the socket and the link take the bytes (the usual case:
    // no coroutine, no suspension); the rest by a writer of its own.
    if (!o->origin_out.empty() && !o->origin_writer && o->lease && o->own_query == nullptr) StartOriginWrite();
  }
  LinkRoom();  // after the write above: it may have made room
  if (!link_out_.empty() && !link_sending_) {
    if (link_->TrySend(link_out_)) {
      link_out_.clear();
      sent_.Notify();
    } else {
      link_sending_ = true;
      asio::co_spawn(endpoint_->executor, [self]() { return self->SendLink(); }, asio::detached);
    }
  }
  if (core_->ending() && !link_sending_ && link_out_.empty() && core_->outbox().to_client.empty()) Finish();
  if (!idle_queued_ && Idle()) NoteIdle();
}

Session::OriginIo& Session::MakeOriginIo() {
  origin_io_ = std::make_unique<OriginIo>();
  return *origin_io_;
}

bool Session::Idle() const {
  const OriginIo* o = origin_io_.get();
  return core_ && !finished_ && (o == nullptr || (!o->lease && o->releasing.empty() && !o->origin_writer && !o->acquiring)) &&
         !link_sending_ && core_->state() == endpoint::SessionCore::State::kIdle && core_->outbox().commands.empty();
}

void Session::NoteIdle() {
  // Not at once: a session between two transactions would give its
  // buffers back and grow them again for the next (~1k instructions per
  // transaction); one still idle at the next sweep does.
  idle_queued_ = true;
  endpoint_->on_executor.idle_sweep.Note(endpoint_->executor, weak_from_this());
}

void SweepIdleSession(Session& session) {
  session.idle_queued_ = false;
  if (session.Idle()) {
    session.ReleaseIdleBuffers();
    session.MaybeSleep();
  }
}

void Session::ReleaseIdleBuffers() {
  // Idle: no connection, nothing in flight either way. The buffers that
  // carried the last unit go back to the Endpoint's pool (docs/architecture.md,
  // "What an idle session holds").
  BufferPool& pool = endpoint_->on_executor.buffers;
  pool.Give(in_);
  pool.Give(link_out_);
  if (origin_io_) {
    pool.Give(origin_io_->origin_out);
    pool.Give(origin_io_->origin_writing_buf);
    if (origin_io_->Quiet()) origin_io_.reset();
  }
  core_->ReleaseIdleBuffers();
  cache_.ReleaseIdleBuffers();
}

void Session::MaybeSleep() {
  // Only a session parked on its link's callback, with nothing of ours in
  // flight and no timer or waiter that reads the core: the callback (or a
  // signal, a broadcast, a notification, the Endpoint's stop) wakes it.
  // (Idle() covers the lease, releases, link sends, the origin writer and
  // the acquire; ReleaseIdleBuffers gave origin_io_ back if it was Quiet.)
  if (!Idle() || !link_armed_ || link_coroutine_ || link_blocked_ || pumping_link_ || executing_ || link_closed_ ||
      origin_io_ != nullptr || timeout_timer_ || idle_watch_ || !in_.empty() || !link_out_.empty() ||
      !core_->CanSleep()) {
    return;
  }
  // (An Endpoint that closes when no session uses it, the "*" database
  // entry's, counts idle sessions as use: they keep their halves.)
  const bool releasable = endpoint_->options.close_idle_when_unused.count() == 0 && core_->Releasable() &&
                          cache_.Releasable();
  auto dormant = std::make_unique<endpoint::SessionCore::Dormant>(core_->Sleep());
  std::unique_ptr<endpoint::SessionCore> old;
  {
    // FindSignalTarget reads core_ / dormant_ under this lock from any thread
    // (Endpoint::SignalAppSession).
    std::lock_guard<std::mutex> lock(endpoint_->mutex);
    dormant_ = std::move(dormant);
    old = std::move(core_);
  }
  old.reset();
  endpoint_->sleeping_sessions.fetch_add(1, std::memory_order_relaxed);
  if (releasable) {
    // Nothing here a new session from the same hello would not hold: the
    // Client may let this half go while it stays idle (its Terminate wakes
    // and ends it) and open a new one for its next unit
    // (docs/architecture.md, "What an idle session holds"). The Client's
    // callback may run inside this send; it only notes the offer.
    std::string offer;
    cache::AppendControl(offer, cache::ReleaseControl{cache_.wrote()});
    (void)link_->TrySend(offer);
  }
}

endpoint::SessionCore& Session::Core() {
  if (!core_ && dormant_) {
    auto woken = std::make_unique<endpoint::SessionCore>(*endpoint_, cache_, std::move(*dormant_));
    std::unique_ptr<endpoint::SessionCore::Dormant> gone;
    {
      std::lock_guard<std::mutex> lock(endpoint_->mutex);  // (as in MaybeSleep)
      core_ = std::move(woken);
      gone = std::move(dormant_);
    }
    endpoint_->sleeping_sessions.fetch_sub(1, std::memory_order_relaxed);
  }
  return *core_;
}

const std::string& Session::SessionId() const {
  static const std::string kNone;
  if (core_) return core_->session_id();
  return dormant_ ? dormant_->id.session_id : kNone;
}

void Session::StartOriginWrite() {
  OriginConnection* c = &O().lease.As<OriginConnection>();
  const std::size_t n = c->TryWrite(O().origin_out);
  if (n == O().origin_out.size()) {
    O().origin_out.clear();
    ReleaseIfLarge(O().origin_out);
    return;
  }
  if (c->broken()) {
    if (OriginWriteFailed(c)) Execute(/*flush_link=*/true);
    return;
  }
  O().origin_out.erase(0, n);
  O().origin_writer = true;
  asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->WriteOrigin(); }, asio::detached);
}

void Session::RunCommand(SessionCommand& command) {
  switch (command.kind) {
    case SessionCommand::Kind::kAcquire: {
      if (std::optional<Lease> lease = endpoint_->pool->TryAcquire()) {
        O().lease = std::move(*lease);
        core_->OnAcquired(&O().lease.As<OriginConnection>());
        return;
      }
      asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->Acquire(); }, asio::detached);
      return;
    }
    case SessionCommand::Kind::kCancelAcquire:
      if (O().acquiring) (void)O().acquire_cancel.Cancel(command.status);
      return;
    case SessionCommand::Kind::kIntercept:
      asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->FinishIntercept(); },
                     asio::detached);
      return;
    case SessionCommand::Kind::kPrepare:
    case SessionCommand::Kind::kCapture:
    case SessionCommand::Kind::kUnlisten: {
      // Our own query on the lent connection; the unit's bytes, if any, go
      // out first (WriteOrigin is done when the core asks for these).
      OriginConnection* c = O().lease ? &O().lease.As<OriginConnection>() : nullptr;
      O().own_query = c;
      asio::co_spawn(
          endpoint_->executor,
          [self = shared_from_this(), c, kind = command.kind, discard = command.discard_sequences]() {
            return self->OwnQuery(c, kind, discard);
          },
          asio::detached);
      return;
    }
    case SessionCommand::Kind::kMoveOutOfCap:
      if (O().lease) O().lease.MoveOutOfCap();
      return;
    case SessionCommand::Kind::kRelease:
      ReleaseNow(command.decision);
      return;
    case SessionCommand::Kind::kCancelOrigin:
      asio::co_spawn(
          endpoint_->executor,
          [self = shared_from_this(), key = command.key, notify = command.notify]() {
            return self->CancelOrigin(key, notify);
          },
          asio::detached);
      return;
    case SessionCommand::Kind::kListenSet:
      asio::co_spawn(
          endpoint_->executor,
          [self = shared_from_this(), channels = std::move(command.channels)]() mutable {
            return self->ListenSet(std::move(channels));
          },
          asio::detached);
      return;
    case SessionCommand::Kind::kBarrier:
      asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->Barrier(); }, asio::detached);
      return;
    case SessionCommand::Kind::kWatchPinnedIdle:
      asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->WatchPinnedIdle(); },
                     asio::detached);
      return;
    case SessionCommand::Kind::kWaitPin:
      asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->WaitPin(); }, asio::detached);
      return;
    case SessionCommand::Kind::kCancelPinWait:
      if (O().pin_ticket != 0 && !O().pin_granted && endpoint_->on_executor.pin_budget.Leave(O().pin_ticket)) {
        O().pin_ticket = 0;
        if (O().pin_timer) O().pin_timer->cancel();
        core_->OnPinWaitFailed(command.status);
      }
      return;
    case SessionCommand::Kind::kSignalSession:
      core_->OnSignalled(SignalSession(command.signal_pid, command.signal_terminate));
      return;
    case SessionCommand::Kind::kTimeoutsChanged:
      if (!timeout_timer_) {
        timeout_timer_ = std::make_unique<asio::steady_timer>(endpoint_->executor);
        asio::co_spawn(endpoint_->executor, [self = shared_from_this()]() { return self->WatchTimeouts(); },
                       asio::detached);
      } else {
        timeout_timer_->cancel();  // WatchTimeouts re-reads the deadline
      }
      return;
  }
}

asio::awaitable<void> Session::WriteOrigin() {
  OriginConnection* failed = nullptr;
  while (!O().origin_out.empty() && O().lease && O().own_query == nullptr) {
    OriginConnection* c = &O().lease.As<OriginConnection>();
    O().origin_writing_buf.swap(O().origin_out);
    O().origin_out.clear();
    O().writing = c;
    absl::Status written = co_await c->Write(O().origin_writing_buf);
    O().writing = nullptr;
    O().origin_writing_buf.clear();
    ReleaseIfLarge(O().origin_writing_buf);
    LinkRoom();  // room again for the app's bytes
    if (!O().lease || &O().lease.As<OriginConnection>() != c) {
      MaybeFinishRelease();  // released meanwhile: what was for it is moot
      continue;
    }
    if (!written.ok()) {
      failed = c;
      break;
    }
  }
  O().origin_writer = false;
  sent_.Notify();  // an own query may wait for the writer
  ReleaseIfLarge(O().origin_out);
  if (failed != nullptr && O().lease && &O().lease.As<OriginConnection>() == failed) OriginWriteFailed(failed);
  Execute(/*flush_link=*/true);
}

bool Session::OriginWriteFailed(OriginConnection* c) {
  O().origin_out.clear();
  c->CloseNow();
  // A pending read fails too and reports the loss; else it is reported here.
  if (O().reading == c) return false;
  core_->OnOriginLost(absl::UnavailableError("writing to the origin failed"));
  return true;
}

asio::awaitable<void> Session::SendLink() {
  while (!link_out_.empty() && !link_closed_) {
    std::string chunk = std::move(link_out_);
    link_out_.clear();
    absl::Status sent = co_await link_->Send(std::move(chunk));
    sent_.Notify();
    if (!sent.ok()) {
      // The client vanished mid-result (or closed after Terminate: then its
      // units are drained silently and the connection goes back).
      link_out_.clear();
      link_sending_ = false;
      core_->OnClientGone();
      Execute(/*flush_link=*/true);
      co_return;
    }
  }
  link_sending_ = false;
  Execute(/*flush_link=*/true);
}

void Session::ReleaseNow(ReleaseDecision decision) {
  if (!origin_io_ || !origin_io_->lease) return;
  OriginConnection* c = &O().lease.As<OriginConnection>();
  // A connection past its lifetime is closed instead of shared again.
  if (decision != ReleaseDecision::kClose && O().lease.lifetime_exceeded()) {
    decision = ReleaseDecision::kClose;
    endpoint_->discarded++;
  }
  if (decision == ReleaseDecision::kClose) c->CloseNow();  // a pending operation fails promptly
  O().origin_out.clear();  // (anything still unwritten was for this connection)
  // PumpOrigin's wait ends now (its callback gives the lease back); not
  // while a write is pending: cancelling would cut it short.
  if (O().origin_waiting == c && O().writing != c) c->CancelWaitReadable();
  if (Busy(c)) {
    O().releasing.emplace_back(std::move(O().lease), decision);
  } else {
    O().lease.Release(decision);
  }
}

void Session::MaybeFinishRelease() {
  if (!origin_io_) return;
  for (auto it = O().releasing.begin(); it != O().releasing.end();) {
    if (Busy(&it->first.As<OriginConnection>())) {
      ++it;
      continue;
    }
    it->first.Release(it->second);
    it = O().releasing.erase(it);
  }
}

void Session::Finish() {
  if (finished_) return;
  finished_ = true;
  if (origin_io_ && origin_io_->acquiring) (void)origin_io_->acquire_cancel.Cancel(absl::CancelledError("the session ended"));
  LeavePinWait();
  Unregister();
  link_closed_ = true;
  link_->Close();
  core_->OnFlushedForEnd();
  if (timeout_timer_) timeout_timer_->cancel();
  if (idle_watch_) idle_watch_->cancel();
  client_wake_.Notify();
  origin_wake_.Notify();
  sent_.Notify();
}

// ----- Asynchronous commands

asio::awaitable<void> Session::Acquire() {
  O().acquiring = true;
  absl::StatusOr<Lease> lease = co_await endpoint_->pool->Acquire(&O().acquire_cancel);
  O().acquiring = false;
  if (!lease.ok()) {
    core_->OnAcquireFailed(lease.status());
  } else {
    O().lease = std::move(*lease);
    core_->OnAcquired(&O().lease.As<OriginConnection>());
  }
  Execute(/*flush_link=*/true);
}

asio::awaitable<void> Session::WaitPin() {
  if (!O().pin_timer) O().pin_timer = std::make_unique<asio::steady_timer>(endpoint_->executor);
  O().pin_granted = false;
  // The budget calls this inside another session's event: it only notes
  // the grant and wakes this coroutine, which reports it.
  const std::uint64_t ticket = endpoint_->on_executor.pin_budget.Wait([weak = weak_from_this()] {
    if (auto self = weak.lock()) {
      self->O().pin_granted = true;
      if (self->O().pin_timer) self->O().pin_timer->cancel();
    }
  });
  O().pin_ticket = ticket;
  O().pin_timer->expires_after(endpoint_->options.pool.acquire_timeout);
  while (O().pin_ticket == ticket && !O().pin_granted && !finished_) {
    auto [ec] = co_await O().pin_timer->async_wait(kAsTuple);
    if (!ec) break;  // the deadline passed
  }
  if (O().pin_ticket != ticket || finished_) co_return;  // cancelled, or the session ended (LeavePinWait)
  O().pin_ticket = 0;
  if (O().pin_granted) {
    O().pin_granted = false;
    core_->OnPinGranted();
  } else {
    (void)endpoint_->on_executor.pin_budget.Leave(ticket);
    core_->OnPinWaitFailed(absl::ResourceExhaustedError(
        "no pinned slot became free within the acquire timeout"));
  }
  Execute(/*flush_link=*/true);
}

std::shared_ptr<Session> Session::FindSignalTarget(Endpoint::Impl& endpoint, std::int32_t pid, std::int32_t caller,
                                                   endpoint::SessionCore::OriginLease caller_lease) {
  using Lease = endpoint::SessionCore::OriginLease;
  auto newer = [](std::uint32_t a, std::uint32_t b) { return static_cast<std::int32_t>(a - b) > 0; };
  std::lock_guard<std::mutex> lock(endpoint.mutex);
  // An origin pid (pg_backend_pid()): first the other session that was
  // shown it most recently, as directly the session whose backend it is:
  // since then the pool may have lent that backend to others, the caller
  // among them (a reads its pid, b runs a transaction on that backend, then
  // b terminates a's pid: directly a ends, not b). Even when the caller was
  // shown the same pid since: directly two sessions never see one pid, and
  // a session ending itself by a pid it remembered is the rarer intent
  // (its own backend is pg_terminate_backend(pg_backend_pid()), which goes
  // to the origin). Else the session that used that backend most recently.
  // The caller counts with the lend before its current unit's (SignalLease:
  // asyncpg's test_pool_remote_close is lent the very backend it names);
  // when the caller is the newest, the origin ends the caller's own
  // backend, as directly.
  Session* by_origin = nullptr;
  Session* by_shown = nullptr;
  std::uint32_t newest = 0;
  std::uint32_t newest_shown = 0;
  for (Session* s : endpoint.sessions) {
    if ((!s->core_ && !s->dormant_) || s->finished_ || s->watch_ || s->probe_) continue;
    if (s->app_pid_ == pid) return s->weak_from_this().lock();  // the pid it was handed
    if (s->app_pid_ == caller) continue;
    const Lease shown = s->core_ ? s->core_->observed_lease() : s->dormant_->observed_lease;
    if (shown.pid == pid && shown.serial != 0 && (by_shown == nullptr || newer(shown.serial, newest_shown))) {
      by_shown = s;
      newest_shown = shown.serial;
    }
    const Lease lease = s->core_ ? s->core_->origin_lease() : s->dormant_->origin_lease;
    if (lease.pid != pid || lease.serial == 0) continue;
    if (by_origin == nullptr || newer(lease.serial, newest)) {
      by_origin = s;
      newest = lease.serial;
    }
  }
  if (by_shown != nullptr) return by_shown->weak_from_this().lock();
  if (by_origin == nullptr) return nullptr;
  if (caller_lease.pid == pid && caller_lease.serial != 0 &&
      static_cast<std::int32_t>(caller_lease.serial - newest) > 0) {
    return nullptr;
  }
  return by_origin->weak_from_this().lock();
}

void Session::Signal(bool terminate) {
  if (finished_ || (!core_ && !dormant_)) return;
  (void)Core();  // a sleeping session wakes for it
  if (terminate) {
    core_->OnAdminTerminate();
    Execute(/*flush_link=*/true);
  } else {
    (void)Cancel();  // 't' whether or not a query was running, as PostgreSQL answers
  }
}

bool Session::SignalSession(std::int32_t app_pid, bool terminate) {
  std::shared_ptr<Session> target = FindSignalTarget(*endpoint_, app_pid, app_pid_, core_->SignalLease());
  if (!target) {
    // A pid handed out for another database of this process (serve with several).
    const auto& elsewhere = endpoint_->options.signal_elsewhere;
    return elsewhere && elsewhere(app_pid, terminate);
  }
  target->Signal(terminate);
  return true;
}

void Session::Unregister() {
  if (!registered_) return;
  registered_ = false;
  Endpoint::Impl::OnExecutor& x = endpoint_->on_executor;
  x.listen_sessions.erase(listen_id_);
  auto it = x.sessions_by_id.find(SessionId());
  if (it != x.sessions_by_id.end() && it->second == this) x.sessions_by_id.erase(it);
}

void Session::LeavePinWait() {
  if (!origin_io_ || origin_io_->pin_ticket == 0) return;
  endpoint::PinBudget& budget = endpoint_->on_executor.pin_budget;
  if (O().pin_granted || !budget.Leave(O().pin_ticket)) budget.Give();
  O().pin_ticket = 0;
  O().pin_granted = false;
  if (O().pin_timer) O().pin_timer->cancel();
}

asio::awaitable<void> Session::OwnQuery(OriginConnection* conn, SessionCommand::Kind kind, bool discard_sequences) {
  while (O().origin_writer) co_await sent_.Wait();  // the unit's last bytes first: one writer at a time
  const absl::Status none = absl::UnavailableError("no connection");
  switch (kind) {
    case SessionCommand::Kind::kPrepare: {
      // The session's settings (hello and captured SETs) onto the freshly
      // lent connection before its work (settings_replay.h).
      absl::Status status = none;
      if (conn != nullptr) status = co_await endpoint::ApplySettings(*conn, core_->settings().desired(), discard_sequences);
      O().own_query = nullptr;
      MaybeFinishRelease();
      core_->OnPrepared(status);
      break;
    }
    case SessionCommand::Kind::kCapture: {
      absl::StatusOr<endpoint::CaptureOutcome> outcome = none;
      if (conn != nullptr) outcome = co_await endpoint::CaptureSettings(*conn, core_->settings(), endpoint_->config->user);
      O().own_query = nullptr;
      MaybeFinishRelease();
      core_->OnCaptured(outcome);
      break;
    }
    default: {
      // UNLISTEN * on the lent connection before it is shared; notifications
      // that arrive on it first are handed to the core.
      std::vector<std::string> notifications;
      absl::Status status = none;
      if (conn != nullptr) {
        std::string query;
        protocol::Encode(protocol::Query{"UNLISTEN *"}, query);
        status = co_await conn->Write(query);
        while (status.ok()) {
          auto frame = co_await conn->ReadFrame();
          if (!frame.ok()) {
            status = frame.status();
            break;
          }
          if (frame->tag == 'A') notifications.emplace_back(frame->raw);
          if (frame->tag == 'E') status = absl::InternalError("UNLISTEN * failed");
          if (frame->tag == 'Z') break;
        }
      }
      O().own_query = nullptr;
      MaybeFinishRelease();
      core_->OnUnlistened(status.ok(), notifications);
      break;
    }
  }
  Execute(/*flush_link=*/true);
}

asio::awaitable<void> Session::CancelOrigin(endpoint::BackendKey key, bool notify) {
  std::shared_ptr<Endpoint::Impl> ep = endpoint_;
  co_await endpoint::CancelOriginQuery(ep->executor, *ep->config, key);
  {
    std::lock_guard<std::mutex> lock(ep->mutex);
    ep->pending_cancels--;
    ep->sessions_done.notify_all();
  }
  if (notify) {
    core_->OnCancelDelivered();
    Execute(/*flush_link=*/true);
  }
}

asio::awaitable<void> Session::ListenSet(std::set<std::string> channels) {
  std::shared_ptr<endpoint::ListenerConnection> listener = endpoint_->listener;
  co_await listener->Set(listen_id_, std::move(channels));
  core_->OnListenApplied();
  Execute(/*flush_link=*/true);
}

asio::awaitable<void> Session::Barrier() {
  std::shared_ptr<endpoint::ListenerConnection> listener = endpoint_->listener;
  co_await listener->Barrier();
  core_->OnListenApplied();
  Execute(/*flush_link=*/true);
}

asio::awaitable<void> Session::FinishIntercept() {
  std::string answers;
  const endpoint::SessionCache::InterceptResult served = co_await cache_.FinishIntercept(answers);
  core_->OnIntercepted(served, answers);
  Execute(/*flush_link=*/true);
}

asio::awaitable<void> Session::WatchPinnedIdle() {
  idle_watch_ = std::make_unique<asio::steady_timer>(endpoint_->executor);
  std::chrono::steady_clock::time_point next;
  while (!finished_ && core_->CheckPinnedIdle(std::chrono::steady_clock::now(), &next)) {
    idle_watch_->expires_at(next);
    (void)co_await idle_watch_->async_wait(kAsTuple);
  }
  Execute(/*flush_link=*/true);  // a FATAL may be queued
}

asio::awaitable<void> Session::WatchTimeouts() {
  while (!finished_) {
    timeout_timer_->expires_at(core_->timeouts().NextDeadline());
    (void)co_await timeout_timer_->async_wait(kAsTuple);
    if (finished_) break;
    core_->OnTimeout(std::chrono::steady_clock::now());
    Execute(/*flush_link=*/true);
  }
}

}  // namespace hyperpool
