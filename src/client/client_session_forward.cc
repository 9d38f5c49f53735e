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
namespace {

// Longest statement text the Client lexes for the cache (ClassifyStatements);
// a session that sends a longer one bypasses the Client tier from then on.
constexpr size_t kMaxClassifiedSql = 1 << 20;

// True when `bytes` starts with a frame header whose (well-formed) length
// is above `limit`: a size we refuse, not a malformed stream.
bool DeclaresLengthAbove(std::string_view bytes, uint32_t limit) {
  if (bytes.size() < 5) return false;
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data() + 1);
  const uint32_t len = (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | u[3];
  return len < 0x80000000u && len > limit;
}

}  // namespace

// ---- Forwarding

asio::awaitable<bool> ClientSession::OpenLink(std::string first_frames) {
  if (impl_->stopping) co_return false;
  absl::StatusOr<std::string> id = client::NewSessionId();
  if (!id.ok()) {
    SendAppThenClose(ErrorFrame(pr::PoolerError{std::string(kSqlStateConnectionFailure), "could not generate a session id"}));
    co_return false;
  }
  session_id_ = *id;
  client::ParamList hello_params = app_params_;
  if (!impl_->client_id.empty()) hello_params.emplace_back(link::kClientIdParam, impl_->client_id);
  hello_params.emplace_back(client::kDatabaseParam, database_);  // for a router of several databases
  // The pid of our BackendKeyData: the Endpoint shows it as the sender of
  // this session's notifications (src/endpoint/notification_pid.h).
  if (cancel_pid_ != 0) hello_params.emplace_back(link::kBackendPidParam, std::to_string(cancel_pid_));
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
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->cancel_keys.find(cancel_pid_);
    if (it != impl_->cancel_keys.end() && it->second.session == this) it->second.session_id = session_id_;
  }
  asio::co_spawn(executor(), LinkToApp(shared_from_this()), asio::detached);
  co_return true;
}

// ---- The Client cache tier (client_cache.h, docs/architecture.md "Query cache")

bool ClientSession::CacheUsable() const {
  return impl_->cache && cache_settings_.enabled && key_.keyable() &&
         outstanding_ == 0 && txn_status_ == 'I' && state_ == State::kIdle && ext_->idle() && !ext_->lost() &&
         !(cache_settings_.ttl && *cache_settings_.ttl <= std::chrono::milliseconds(0));
}

bool ClientSession::LocalCandidate(std::string_view bytes, cache::CandidateUnit& unit, std::string& key,
                                   bool& plain_select) const {
  plain_select = false;
  const cache::StatementLookup lookup = [this](std::string_view name, std::string_view* sql,
                                               std::vector<uint32_t>* types) {
    const client::SessionStatement* st = ext_->Find(name);
    if (st == nullptr) return false;
    *sql = st->sql;
    *types = st->param_types;
    return true;
  };
  if (cache::ParseCandidateUnit(bytes, unit, &lookup) != cache::UnitShape::kCandidate) return false;
  // As on the Endpoint: longer queries are never cached (and a key would
  // copy the whole unit).
  if (unit.sql.size() > impl_->options.cache.max_query_bytes) return false;
  const cache::SqlText text(unit.sql);
  cache::StatementEffects fx = cache::ClassifyStatements(text, nullptr);
  if (fx.nocache_hint || fx.changes_session_state || fx.only_cache_settings) return false;
  plain_select = text.plain_select();
  // Extended units always travel with a Describe(portal) (see
  // ExtendedContext::describe_portal): one key with or without the
  // driver's own.
  if (unit.form == cache::ProtocolForm::kExtended && unit.describe == 0) unit.describe = 'P';
  key = unit.form == cache::ProtocolForm::kSimple
            ? cache::ClientLocalKey(key_.fingerprint(), cache_settings_, unit.frames)
            : cache::ClientExtendedKey(key_.fingerprint(), cache_settings_, unit);
  return true;
}

void ClientSession::NoteForwardedFrame(const pr::Frame& f, std::string_view rest) {
  std::string_view sql;
  if (f.tag == 'Q') {
    auto q = pr::DecodeQuery(f.payload);
    if (!q.ok()) return;
    sql = q->query;
  } else if (f.tag == 'P') {
    auto p = pr::DecodeParse(f.payload);
    if (!p.ok()) return;
    sql = p->query;
  } else if (f.tag == 'F') {
    key_.Invalidate();
    return;
  } else {
    return;
  }
  if (sql.size() > kMaxClassifiedSql) {
    // Lexing it would cost several times its size; assume the worst.
    key_.Invalidate();
    return;
  }
  const cache::SqlText text(sql);
  cache::StatementEffects fx = cache::ClassifyStatements(text, &cache_settings_);
  if (!fx.changes_session_state) return;
  const bool lasts = txn_status_ == 'I' && outstanding_ == 0 && ext_->idle() && client::OwnUnit(f.tag, text, rest);
  if (key_.Note(sql, fx, lasts)) ext_->set_fingerprint(key_.fingerprint());
}

void ClientSession::TraceFlight(std::string_view to_link, std::string_view local) const {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count() % 1000000;
  Log(fmt::format("trace {} t={}ms {}{}{}", cancel_pid_, ms,
                  to_link.empty() ? std::string("local only")
                                  : fmt::format("{} link: {}", link_ ? "to" : "opening", client::SummarizeFlight(to_link)),
                  local.empty() ? "" : " | answered locally: ", client::SummarizeFlight(local, false)));
}

bool ClientSession::ServeLocalHits(LocalMiss& miss) {
  miss.candidate = false;
  while (CacheUsable()) {
    cache::CandidateUnit& unit = miss.unit;
    std::string& key = miss.key;
    unit = cache::CandidateUnit{};
    key.clear();
    if (!LocalCandidate(in_.view(), unit, key, miss.plain_select)) return true;
    // From here on a return leaves the unit at the front of in_ and says so:
    // the caller forwards it as a candidate without parsing it again.
    miss.candidate = true;
    // After an extended message that reached the origin without its Sync
    // (Parse + Describe + Flush), the unit must go there: its Sync ends the
    // implicit transaction the Parse began. It is still a candidate.
    if (ext_->unsynced()) return true;
    std::shared_ptr<const CacheEntry> entry = impl_->cache->GetFresh(key);
    if (!entry) return true;
    std::string out;
    if (!cache::AppendReplay(entry->messages, unit.replay, out).ok()) return true;
    if (unit.replay.parse) {
      // The driver's statement now exists for it: its Parse is deferred
      // (extended_session.h), which needs its metadata; the unnamed
      // statement is simply forgotten without it.
      pr::FrameReader reader(pr::FrameReader::Mode::kTagged);
      pr::FrameReader::Result r = reader.Read(unit.frames);
      if (!r.is_frame()) return true;
      if (!ext_->AdoptServedParse(r.frame(), MetadataKeyable()) && unit.named_parse) return true;
    }
    miss.candidate = false;  // served: the unit leaves in_
    in_.Consume(unit.frames.size());
    if (impl_->trace_link) TraceFlight({}, out);
    // Queued after the link's bytes of earlier units (the outbox is one
    // queue): they reach the app first.
    SendApp(std::move(out));
    if (state_ == State::kClosed) return false;
    ArmIdleTimer();  // a ReadyForQuery 'I' went out
    if (!app_out_.empty()) {
      app_waits_out_ = true;  // the app is slow to read: read no more until it has
      return false;
    }
  }
  return true;
}

void ClientSession::OnControl(std::string_view payload) {
  std::optional<cache::Control> c = cache::DecodeControl(payload);
  if (!c) return;
  if (const auto* i = std::get_if<cache::InvalidateControl>(&*c); i && i->drops_metadata()) {
    if (impl_->trace_link) Log(fmt::format("trace {} invalidate all (statement metadata dropped)", cancel_pid_));
    impl_->metadata->InvalidateAll();  // DDL (or what may have run it): statement shapes may change
  }
  if (!impl_->cache) return;
  if (const auto* b = std::get_if<cache::BeginControl>(&*c)) {
    capture_.reset();
    capture_store_.reset();
    if (!units_.empty() && units_.front().candidate && units_.front().digest == b->digest) {
      capture_ = std::make_unique<cache::ResultCapture>(impl_->cache->options().max_entry_bytes);
      capture_key_ = units_.front().key;
    }
  } else if (auto* s = std::get_if<cache::StoreControl>(&*c)) {
    if (capture_ && !units_.empty() && units_.front().digest == s->digest) capture_store_ = std::move(*s);
  } else if (const auto* i = std::get_if<cache::InvalidateControl>(&*c)) {
    impl_->cache->Invalidate(*i);
  }
}

bool ClientSession::ProcessLinkBytes(const std::string& buf, client::AppBytes& out, size_t& consumed) {
  size_t pos = 0;
  if (passthrough_ > 0) {
    size_t take = std::min(passthrough_, buf.size());
    out.Append(std::string_view(buf).substr(0, take));
    passthrough_ -= take;
    pos = take;
  }
  while (buf.size() - pos >= 5) {
    const char* p = buf.data() + pos;
    const char tag = p[0];
    const auto* u = reinterpret_cast<const unsigned char*>(p + 1);
    uint32_t len = (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | u[3];
    if (len < 4 || len >= 0x80000000u) {
      consumed = buf.size();
      return false;
    }
    const size_t total = size_t{len} + 1;
    const size_t have = buf.size() - pos;
    if (have < total) {
      if ((tag == 'D' || tag == 'd') && !capture_ && ext_->StreamsRows()) {
        out.Append(std::string_view(p, have));
        passthrough_ = total - have;
        last_tag_ = tag;
        pos = buf.size();
      }
      break;
    }
    std::string_view frame(p, total);
    if (tag == cache::kControlTag) {
      OnControl(frame.substr(5));
    } else {
      if (capture_) capture_->Feed(tag, frame);
      ext_->OnBackend(tag, frame, out);
      last_tag_ = tag;
      if (tag == 'Z' && total >= 6) OnReadyForQuery(p[5]);
    }
    pos += total;
  }
  consumed = pos;
  return true;
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
  app_out_.Push(std::move(bytes));
  if (!app_write_waiting_) FlushApp();
}

void ClientSession::SendAppThenClose(std::string bytes) {
  close_when_drained_ = true;
  SendApp(std::move(bytes));
  if (app_out_.empty() && !app_write_waiting_ && state_ != State::kClosed) {
    CloseLink();
    CloseSocket();
    SetState(State::kClosed);
  }
}

void ClientSession::FlushApp() {
  asio::error_code ec;
  if (!socket_.non_blocking()) socket_.non_blocking(true, ec);
  client::AppOutbox::Buffers buffers;
  while (!ec && !app_out_.empty()) {
    const size_t count = app_out_.Gather(buffers);
    const size_t n = socket_.write_some(std::span<const asio::const_buffer>(buffers.data(), count), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      // The socket is full: one wait, then the rest (what is queued
      // meanwhile joins it; the buffers are gathered again then).
      app_write_waiting_ = true;
      socket_.async_wait(tcp::socket::wait_write, [self = shared_from_this()](asio::error_code wait_ec) {
        self->app_write_waiting_ = false;
        if (wait_ec) {
          self->app_out_.Clear();
          self->AppWriteFailed();
          return;
        }
        self->FlushApp();
        if (self->app_out_.empty() && !self->app_write_waiting_) self->OnAppDrained();
      });
      return;
    }
    if (ec) break;
    app_out_.Consume(n);
    CountSent(n);
  }
  if (ec) {
    app_out_.Clear();
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

ClientSession::AppBatch ClientSession::TakeBatch(LocalMiss& miss) {
  const uint32_t max_length = static_cast<uint32_t>(
      std::min<size_t>(impl_->options.max_message_size, pr::kDefaultMaxMessageLength));
  pr::FrameReader reader(pr::FrameReader::Mode::kTagged, pr::FrameLimits{.max_message_length = max_length});
  std::string_view view = in_.view();
  // The first unit of this batch may become a local-tier entry: the one
  // ServeLocalHits parsed and missed (in_ has not moved since).
  const cache::CandidateUnit& first = miss.unit;
  std::string& first_key = miss.key;
  const bool first_candidate = miss.candidate && CacheUsable();
  size_t units_in_batch = 0;
  size_t batch = 0;
  AppBatch out;
  out.bad_sqlstate = kSqlStateProtocolViolation;
  app_want_ = 1;
  // What goes on the link (the driver's frames, with deferred Parses
  // and checks added: extended_session.h) and what is answered at once.
  std::string& to_link = out.to_link;
  for (;;) {
    pr::FrameReader::Result r = reader.Read(view.substr(batch));
    if (r.is_need_more()) {
      // bytes_needed() counts from the frame's start; `want` from the end.
      const size_t have = view.size() - batch;
      const size_t want = r.bytes_needed() > have ? r.bytes_needed() - have : 1;
      app_want_ = static_cast<uint32_t>(std::min<size_t>(want, client::InBuffer::kMaxReadChunk));
      break;
    }
    if (r.is_error()) {
      out.bad = r.status();
      if (DeclaresLengthAbove(view.substr(batch), max_length)) out.bad_sqlstate = kSqlStateProgramLimitExceeded;
      break;
    }
    const char tag = r.frame().tag;
    if (!pr::IsFrontendTag(tag) || tag == 'p') {
      out.bad = pr::ProtocolError(fmt::format("invalid frontend message type {}", int(static_cast<unsigned char>(tag))));
      break;
    }
    batch += r.frame().size();
    // The candidate ServeLocalHits classified, when it is one plain
    // SELECT in a Query: NoteForwardedFrame would decode and scan the same
    // text again to find that it changes nothing.
    const bool classified = first_candidate && miss.plain_select && units_in_batch == 0 && tag == 'Q' &&
                            batch == first.frames.size();
    if (!classified) NoteForwardedFrame(r.frame(), view.substr(batch));
    client::ExtendedContext ctx;
    ctx.keyable = MetadataKeyable();
    ctx.txn_status = txn_status_;
    ctx.nothing_sent = to_link.empty() && outstanding_ == 0;
    ctx.describe_portal = first_candidate && units_in_batch == 0 && first.form == cache::ProtocolForm::kExtended &&
                          first.replay.describe == cache::ReplayRequest::Describe::kNone;
    client::ExtendedSession::FrontendResult fr =
        ext_->OnFrontend(r.frame(), view.substr(batch), ctx, to_link, out.local);
    batch += fr.rest_consumed;
    if (!fr.forwarded) continue;  // answered locally (a Sync among them included)
    if (tag == 'Q' || tag == 'S' || tag == 'F') {
      ++outstanding_;
      PendingUnit unit;
      if (first_candidate && units_in_batch == 0 && batch == first.frames.size()) {
        // The digest is of what the Endpoint receives for the unit.
        unit.candidate = true;
        unit.digest = cache::Fnv1a64(to_link);
        unit.key = std::move(first_key);
      }
      ++units_in_batch;
      units_.push_back(std::move(unit));
    }
    if (tag == 'X') {
      out.terminate = true;
      break;
    }
  }
  // Set before the Terminate goes out: the Endpoint may close the link
  // before Send() returns, and the link reader must not call that a failure.
  if (out.terminate && reason_ == EndReason::kNone) reason_ = EndReason::kTerminate;
  if (batch > 0) DisarmIdleTimer();  // a message arrived: not idle until the next ReadyForQuery
  in_.Consume(batch);
  out.send_to_link = !to_link.empty() && !(out.terminate && !link_ && to_link.size() == 5);
  if (impl_->trace_link && (out.send_to_link || !out.local.empty())) {
    TraceFlight(out.send_to_link ? to_link : "", out.local);
  }
  if (out.send_to_link && client::ExpectsAnswer(to_link)) impl_->link_flights.fetch_add(1, std::memory_order_relaxed);
  return out;
}

void ClientSession::PumpApp() {
  for (;;) {
    // The idle timeout or a Kill ended the session while we waited for the
    // app (EndSession): nothing more may be sent on the link.
    if (reason_ == EndReason::kIdleTimeout || reason_ == EndReason::kKilled) return;
    if (state_ == State::kClosed) return;
    LocalMiss miss;
    if (!ServeLocalHits(miss)) return;
    AppBatch batch = TakeBatch(miss);
    if (!batch.local.empty()) {
      // Before anything this batch sends: their answers come later.
      SendApp(std::move(batch.local));
      batch.local.clear();
      if (state_ == State::kClosed) return;
      batch.sent_local = true;
    }
    if (batch.send_to_link) {
      if (!link_) {
        asio::co_spawn(executor(), OpenLinkThen(shared_from_this(), std::move(batch)), asio::detached);
        return;
      }
      if (!link_->TrySend(batch.to_link)) {
        asio::co_spawn(executor(), SendThen(shared_from_this(), std::move(batch)), asio::detached);
        return;
      }
    }
    if (!AfterBatch(batch)) return;
  }
}

asio::awaitable<void> ClientSession::OpenLinkThen(std::shared_ptr<ClientSession> self, AppBatch batch) {
  // Not `if (!co_await ...)`: GCC 12 miscompiles that in this coroutine
  // (a by-value aggregate parameter): SIGILL on resumption.
  const bool opened = co_await OpenLink(std::move(batch.to_link));
  if (!opened) {
    // OpenLink told the app why (and closes once that is written), or the
    // session was stopped meanwhile.
    if (!close_when_drained_) CloseSocket();
    co_return;
  }
  if (self->AfterBatch(batch)) PumpApp();
}

asio::awaitable<void> ClientSession::SendThen(std::shared_ptr<ClientSession> self, AppBatch batch) {
  absl::Status sent = co_await link_->Send(std::move(batch.to_link));
  if (!sent.ok()) co_return;  // the link reader reports the broken link
  if (self->AfterBatch(batch)) PumpApp();
}

bool ClientSession::AfterBatch(AppBatch& batch) {
  if (batch.send_to_link && outstanding_ > 0 && state_ == State::kIdle) SetState(State::kBusy);
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
  if (batch.sent_local && app_write_waiting_) {
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
  if (!link_in_.empty()) {
    std::string copy;
    size_t consumed = 0;
    client::AppBytes out(link_in_, copy);
    malformed = !ProcessLinkBytes(link_in_, out, consumed);
    if (!out.verbatim()) {
      link_in_.erase(0, consumed);
      SendApp(std::move(copy));
    } else if (const size_t verbatim = out.verbatim_size(); verbatim == 0) {
      link_in_.erase(0, consumed);
    } else if (link_in_.size() - consumed <= verbatim) {
      // The usual case: the received chunk itself goes to the app (a
      // partial frame after it is copied out first).
      std::string rest = link_in_.substr(consumed);
      std::string chunk = std::move(link_in_);
      chunk.resize(verbatim);
      link_in_ = std::move(rest);
      SendApp(std::move(chunk));
    } else {
      SendApp(link_in_.substr(0, verbatim));
      link_in_.erase(0, consumed);
    }
    if (state_ == State::kClosed) return LinkStep::kEnded;  // the app is gone (AppWriteFailed)
  }
  if (malformed) {
    Log("malformed backend stream from the endpoint");
    LinkEnded();
    return LinkStep::kEnded;
  }
  if (!app_out_.empty()) {
    link_waits_out_ = true;  // read the link again once the app has read these
    return LinkStep::kWait;
  }
  return LinkStep::kMore;
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
  if (!link_->WhenReadable(executor(), [self] { self->OnLinkReadable(); })) return false;
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

void ClientSession::OnReadyForQuery(char status) {
  txn_status_ = status;
  if (capture_ && capture_store_ && capture_->state() == cache::ResultCapture::State::kComplete && impl_->cache) {
    impl_->cache->Store(capture_key_, capture_->TakeMessages(), std::move(*capture_store_));
  }
  capture_.reset();
  capture_store_.reset();
  if (!units_.empty()) units_.pop_front();
  if (outstanding_ > 0) --outstanding_;
  if (outstanding_ == 0 && state_ == State::kBusy) SetState(State::kIdle);
  if (outstanding_ == 0 && status == 'I') ArmIdleTimer();
}

void ClientSession::LinkEnded() {
  std::string error;
  switch (reason_) {
    case EndReason::kNone: {
      reason_ = EndReason::kLinkFailed;
      bool endpoint_said_why = farewell_sent_ || (passthrough_ == 0 && last_tag_ == 'E');
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
