// ClientCore (client_core.h): the Client's per-message decisions, moved
// out of ClientSession (which drives it) unchanged in substance.
#include "client/client_core.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "cache/tier.h"
#include "client/client_cache.h"
#include "client/client_util.h"
#include "client/extended_session.h"
#include "client/in_buffer.h"
#include "client/statement_metadata.h"
#include "protocol/codec.h"
#include "protocol/frame_reader.h"
#include "protocol/sqlstate.h"

namespace hyperpool::client {
namespace {

namespace pr = ::hyperpool::protocol;

// Longest statement text the Client lexes for the cache (ClassifyStatements);
// a session that sends a longer one bypasses the Client tier from then on.
constexpr size_t kMaxClassifiedSql = 1 << 20;

// True when `bytes` starts with a frame header whose (well-formed) length
// is above `limit`: a size we refuse, not a malformed stream.
bool DeclaresLengthAbove(std::string_view bytes, uint32_t limit) {
  std::optional<pr::FrameHeader> h = pr::PeekTaggedHeader(bytes);
  return h && h->well_formed() && h->length > limit;
}

}  // namespace

void ClientCore::Start(const Config* config, std::string_view database, const ParamList& app_params) {
  config_ = config;
  key_.Start(database, app_params, config_->intern_key);
  cache::ApplyStartupParameters(app_params, cache_settings_);
  database_ = database;
}

ExtendedSession& ClientCore::Ext() {
  if (!ext_) ext_ = std::make_unique<ExtendedSession>(config_->metadata, std::string(database_), key_.fingerprint());
  return *ext_;
}

bool ClientCore::ReleaseIdleState() {
  if (outstanding_ != 0 || txn_status_ != 'I' || capture_ != nullptr) return false;
  bool released = false;
  if (ext_ != nullptr && ext_->Disposable()) {
    ext_.reset();
    released = true;
  }
  if (units_.empty()) units_.release();
  return released;
}

bool ClientCore::LinkReleasable() {
  (void)ReleaseIdleState();
  return outstanding_ == 0 && txn_status_ == 'I' && capture_ == nullptr && passthrough_ == 0 && ext_ == nullptr &&
         units_.empty();
}

bool ClientCore::CacheUsable() const {
  return config_ != nullptr && config_->cache != nullptr && cache_settings_.enabled && key_.keyable() &&
         outstanding_ == 0 && txn_status_ == 'I' && (ext_ == nullptr || (ext_->idle() && !ext_->lost())) &&
         !(cache_settings_.ttl && *cache_settings_.ttl <= std::chrono::milliseconds(0));
}

bool ClientCore::LocalCandidate(std::string_view bytes, cache::CandidateUnit& unit, std::string& key,
                                   bool& plain_select) const {
  plain_select = false;
  const cache::StatementLookup lookup = [this](std::string_view name, std::string_view* sql,
                                               std::vector<uint32_t>* types, uint64_t* result_type) {
    const SessionStatement* st = ext_ != nullptr ? ext_->Find(name) : nullptr;
    if (st == nullptr) return false;
    *sql = st->sql;
    *types = st->param_types;
    *result_type = st->result_type;
    return true;
  };
  if (cache::ParseCandidateUnit(bytes, unit, &lookup) != cache::UnitShape::kCandidate) return false;
  // As on the Endpoint: longer queries are never cached (and a key would
  // copy the whole unit).
  if (unit.sql.size() > config_->max_query_bytes) return false;
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

void ClientCore::NoteForwardedFrame(const pr::Frame& f, std::string_view rest) {
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
  const bool lasts =
      txn_status_ == 'I' && outstanding_ == 0 && (ext_ == nullptr || ext_->idle()) && OwnUnit(f.tag, text, rest);
  // (One made later takes the fingerprint as it is then.)
  if (key_.Note(sql, fx, lasts) && ext_ != nullptr) ext_->set_fingerprint(key_.fingerprint());
}

// ---- From the app

size_t ClientCore::ServeLocalHit(std::string_view in, LocalMiss& miss, std::string& answer) {
  miss.candidate = false;
  if (!CacheUsable()) return 0;
  cache::CandidateUnit& unit = miss.unit;
  std::string& key = miss.key;
  unit = cache::CandidateUnit{};
  key.clear();
  if (!LocalCandidate(in, unit, key, miss.plain_select)) return 0;
  // From here on a 0 leaves the unit at the front of `in` and says so:
  // TakeBatch forwards it as a candidate without parsing it again.
  miss.candidate = true;
  // After an extended message that reached the origin without its Sync
  // (Parse + Describe + Flush), the unit must go there: its Sync ends the
  // implicit transaction the Parse began. It is still a candidate.
  if (ext_ != nullptr && ext_->unsynced()) return 0;
  // A simple Query destroys the driver's unnamed statement, at both halves
  // and at the origin: while one exists, the Query goes to the link (so
  // that a later Bind('') fails as directly), still a candidate.
  if (unit.form == cache::ProtocolForm::kSimple && ext_ != nullptr && ext_->holds_unnamed()) return 0;
  std::shared_ptr<const CacheEntry> entry = config_->cache->GetFresh(key);
  if (!entry) return 0;
  // Rows only for a driver that holds their result type (docs/architecture.md,
  // "Result shapes"): the same text prepared again after DDL made elsewhere
  // stores rows of another shape under this key. A unit that Binds an
  // earlier statement needs the one its driver was shown; a unit whose
  // Parse would be deferred, the one the metadata store promises (a unit
  // whose unnamed Parse has no metadata and that asks a Describe learns the
  // shape from this very answer). Not served: it goes to the origin as a
  // candidate, whose result then replaces the entry.
  ExtendedSession::Promise promise;  // a unit's Parse: looked up once, for this check and its adoption
  if (unit.form == cache::ProtocolForm::kExtended) {
    uint64_t want = 0;
    bool check = true;
    if (unit.replay.parse) {
      promise = Ext().Promised(unit.sql, unit.param_types, key_.keyable());
      want = promise.meta ? ResultTypeOfFrame(promise.meta->row_description) : 0;
      check = want != 0 || unit.named_parse || unit.replay.describe == cache::ReplayRequest::Describe::kNone;
    } else {
      want = unit.result_type;
    }
    if (check && (want == 0 || ResultTypeOfAnswer(entry->messages) != want)) return 0;
  }
  std::string out;
  if (!cache::AppendReplay(entry->messages, unit.replay, out).ok()) return 0;
  if (unit.replay.parse) {
    // The driver's statement now exists for it: its Parse is deferred
    // (extended_session.h), which needs its metadata; the unnamed
    // statement is simply forgotten without it.
    pr::FrameReader reader(pr::FrameReader::Mode::kTagged);
    pr::FrameReader::Result r = reader.Read(unit.frames);
    if (!r.is_frame()) return 0;
    if (!Ext().AdoptServedParse(r.frame(), std::move(promise)) && unit.named_parse) return 0;
  }
  miss.candidate = false;  // served: the unit leaves `in`
  answer = std::move(out);
  return unit.frames.size();
}

ClientCore::AppBatch ClientCore::TakeBatch(std::string_view in, LocalMiss& miss, bool link_open) {
  const uint32_t max_length = config_->max_message_length;
  pr::FrameReader reader(pr::FrameReader::Mode::kTagged, pr::FrameLimits{.max_message_length = max_length});
  std::string_view view = in;
  // The first unit of this batch may become a local-tier entry: the one
  // ServeLocalHit parsed and missed (`in` has not moved since).
  const cache::CandidateUnit& first = miss.unit;
  std::string& first_key = miss.key;
  const bool first_candidate = miss.candidate && CacheUsable();
  size_t units_in_batch = 0;
  size_t batch = 0;
  AppBatch out;
  out.bad_sqlstate = kSqlStateProtocolViolation;
  // What goes on the link (the driver's frames, with deferred Parses
  // and checks added: extended_session.h) and what is answered at once.
  std::string& to_link = out.to_link;
  for (;;) {
    pr::FrameReader::Result r = reader.Read(view.substr(batch));
    if (r.is_need_more()) {
      // bytes_needed() counts from the frame's start; `want` from the end.
      const size_t have = view.size() - batch;
      const size_t want = r.bytes_needed() > have ? r.bytes_needed() - have : 1;
      out.want = std::min<size_t>(want, InBuffer::kMaxReadChunk);
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
    ExtendedContext ctx;
    ctx.keyable = key_.keyable();
    ctx.txn_status = txn_status_;
    ctx.nothing_sent = to_link.empty() && outstanding_ == 0;
    ctx.describe_portal = first_candidate && units_in_batch == 0 && first.form == cache::ProtocolForm::kExtended &&
                          first.replay.describe == cache::ReplayRequest::Describe::kNone;
    ExtendedSession::FrontendResult fr =
        Ext().OnFrontend(r.frame(), view.substr(batch), ctx, to_link, out.local);
    batch += fr.rest_consumed;
    if (!fr.forwarded) continue;  // answered locally (a Sync among them included)
    if (tag == 'Q' || tag == 'S' || tag == 'F') {
      ++outstanding_;
      PendingUnit unit;
      if (first_candidate && units_in_batch == 0 && batch == first.frames.size()) {
        // The digest is of what the Endpoint receives for the unit.
        unit.candidate = true;
        unit.digest = cache::UnitDigest(to_link);
        unit.key = std::move(first_key);
        unit.sent = std::chrono::steady_clock::now();
      }
      ++units_in_batch;
      units_.push_back(std::move(unit));
    }
    if (tag == 'X') {
      out.terminate = true;
      break;
    }
  }
  out.consumed = batch;
  out.send_to_link = !to_link.empty() && !(out.terminate && !link_open && to_link.size() == 5);
  return out;
}

// ---- From the link

void ClientCore::OnControl(std::string_view payload, LinkEvents& events) {
  std::optional<cache::Control> c = cache::DecodeControl(payload);
  if (!c) return;
  if (const auto* r = std::get_if<cache::ReleaseControl>(&*c)) {
    events.release_offered = true;
    events.release_wrote = r->wrote;
    return;
  }
  if (const auto* i = std::get_if<cache::InvalidateControl>(&*c); i && i->drops_metadata()) {
    events.metadata_dropped = true;
    config_->metadata->InvalidateAll();  // DDL (or what may have run it): statement shapes may change
  }
  if (config_->cache == nullptr) return;
  if (const auto* b = std::get_if<cache::BeginControl>(&*c)) {
    capture_.reset();
    if (!units_.empty() && units_.front().candidate && units_.front().digest == b->digest) {
      capture_ = std::make_unique<Capture>(config_->cache->options().max_entry_bytes);
      capture_->key = units_.front().key;
    }
  } else if (auto* s = std::get_if<cache::StoreControl>(&*c)) {
    if (capture_ && !units_.empty() && units_.front().digest == s->digest) capture_->store = std::move(*s);
  } else if (const auto* i = std::get_if<cache::InvalidateControl>(&*c)) {
    config_->cache->Invalidate(*i);
  }
}

bool ClientCore::OnLinkBytes(const std::string& buf, AppBytes& out, size_t& consumed, LinkEvents& events) {
  size_t pos = 0;
  if (passthrough_ > 0) {
    size_t take = std::min(passthrough_, buf.size());
    out.Append(std::string_view(buf).substr(0, take));
    passthrough_ -= take;
    pos = take;
  }
  while (buf.size() - pos >= 5) {
    const char* p = buf.data() + pos;
    const pr::FrameHeader h = *pr::PeekTaggedHeader(std::string_view(buf).substr(pos));
    const char tag = h.tag;
    if (!h.well_formed()) {
      consumed = buf.size();
      return false;
    }
    const size_t total = h.size();
    const size_t have = buf.size() - pos;
    if (have < total) {
      if ((tag == 'D' || tag == 'd') && !capture_ && (ext_ == nullptr || ext_->StreamsRows())) {
        out.Append(std::string_view(p, have));
        passthrough_ = total - have;
        last_tag_ = tag;
        pos = buf.size();
      }
      break;
    }
    std::string_view frame(p, total);
    if (tag == cache::kControlTag) {
      OnControl(frame.substr(5), events);
    } else {
      if (capture_) capture_->result.Feed(tag, frame);
      Ext().OnBackend(tag, frame, out);
      if (tag == 'E') SkipUnits(ext_->TakeSkippedUnits());
      last_tag_ = tag;
      if (tag == 'Z' && total >= 6) OnReadyForQuery(p[5], events);
    }
    pos += total;
  }
  consumed = pos;
  return true;
}

void ClientCore::SkipUnits(size_t units) {
  // The oldest units: the failed message's and those up to the Sync.
  for (; units > 0 && outstanding_ > 0; --units) {
    if (!units_.empty()) units_.pop_front();
    --outstanding_;
  }
}

void ClientCore::OnReadyForQuery(char status, LinkEvents& events) {
  txn_status_ = status;
  if (capture_ && capture_->store && capture_->result.state() == cache::ResultCapture::State::kComplete &&
      config_->cache != nullptr) {
    const auto sent = units_.empty() ? std::chrono::steady_clock::now() : units_.front().sent;
    config_->cache->Store(capture_->key, capture_->result.TakeMessages(), std::move(*capture_->store), sent);
  }
  capture_.reset();
  if (!units_.empty()) units_.pop_front();
  if (outstanding_ > 0) --outstanding_;
  if (outstanding_ == 0 && status == 'I') events.ready_idle = true;
}

}  // namespace hyperpool::client
