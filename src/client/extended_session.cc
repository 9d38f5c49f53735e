#include "client/extended_session.h"

#include <cctype>
#include <utility>

#include "protocol/codec.h"
#include "protocol/sqlstate.h"

namespace hyperpool::client {
namespace {

namespace pr = protocol;

constexpr std::string_view kParseComplete("1\0\0\0\4", 5);

void AppendReady(std::string& out, char status) {
  out.append("Z\0\0\0\5", 5);
  out.push_back(status);
}

// The parameter types a ParameterDescription frame lists.
std::optional<std::vector<uint32_t>> TypesOf(std::string_view param_desc) {
  std::optional<pr::Frame> f = pr::PeekTaggedFrame(param_desc);
  if (!f || f->tag != 't') return std::nullopt;
  auto d = pr::DecodeParameterDescription(f->payload);
  if (!d.ok()) return std::nullopt;
  return std::vector<uint32_t>(d->parameter_types.begin(), d->parameter_types.end());
}

// Whether `sql` starts with the keyword EXECUTE (SQL EXECUTE of a prepared statement).
bool StartsWithExecute(std::string_view sql) {
  constexpr std::string_view kWord = "execute";
  std::size_t i = 0;
  while (i < sql.size() && (sql[i] == ' ' || sql[i] == '\t' || sql[i] == '\n' || sql[i] == '\r')) ++i;
  if (sql.size() - i < kWord.size()) return false;
  for (std::size_t j = 0; j < kWord.size(); ++j) {
    if ((sql[i + j] | 0x20) != kWord[j]) return false;
  }
  if (sql.size() == i + kWord.size()) return true;
  const unsigned char c = static_cast<unsigned char>(sql[i + kWord.size()]);
  return !(std::isalnum(c) || c == '_' || c == '$');
}

}  // namespace

void AppendCachedPlanChanged(std::string& out) {
  std::string p;
  auto field = [&p](char code, std::string_view v) {
    p.push_back(code);
    p.append(v);
    p.push_back('\0');
  };
  field('S', "ERROR");
  field('V', "ERROR");
  field('C', kSqlStateFeatureNotSupported);
  field('M', "cached plan must not change result type");
  field('F', "plancache.c");
  field('R', "RevalidateCachedQuery");
  p.push_back('\0');
  pr::AppendFrame(out, 'E', p);
}

uint64_t ResultTypeOfFrame(std::string_view frame) {
  std::optional<pr::Frame> f = pr::PeekTaggedFrame(frame);
  if (!f) return 0;
  if (f->tag == 'n') return pr::ResultTypeDigest(std::string_view());
  if (f->tag != 'T') return 0;
  return pr::ResultTypeDigest(f->payload);
}

uint64_t ResultTypeOfAnswer(std::string_view frames) {
  while (std::optional<pr::Frame> f = pr::PeekTaggedFrame(frames)) {
    if (f->tag == 'T' || f->tag == 'n') return ResultTypeOfFrame(frames.substr(0, f->size()));
    if (f->tag == 'D' || f->tag == 'C' || f->tag == 'E') return 0;  // rows came first: none
    frames.remove_prefix(f->size());
  }
  return 0;
}

bool SameRowShape(std::string_view a, std::string_view b) {
  std::optional<pr::Frame> fa = pr::PeekTaggedFrame(a);
  std::optional<pr::Frame> fb = pr::PeekTaggedFrame(b);
  if (!fa || !fb || fa->tag != fb->tag) return false;
  if (fa->tag == 'n') return true;
  if (fa->tag != 'T') return false;
  return pr::SameResultType(fa->payload, fb->payload);
}

ExtendedSession::ExtendedSession(StatementMetadataStore* store, std::string database, std::string hello_fingerprint)
    : store_(store), database_(std::move(database)), hello_fp_(std::move(hello_fingerprint)) {}

std::string ExtendedSession::KeyFor(std::string_view sql, const std::vector<uint32_t>& types, bool keyable) const {
  if (!keyable || store_ == nullptr) return {};
  return StatementMetadataKey(database_, hello_fp_, types, sql);
}

bool ExtendedSession::CanAnswer(const ExtendedContext& ctx) const {
  // Outside a transaction only: a mismatch found at execution must be
  // reportable as PostgreSQL would (an implicit transaction ends at Sync).
  return store_ != nullptr && ctx.keyable && ctx.txn_status == 'I' && ctx.nothing_sent && !lost_ && idle() &&
         !unsynced_;
}

void ExtendedSession::Push(Pending&& p) { pending_.push_back(std::move(p)); }

SessionStatement& ExtendedSession::Define(const std::string& name, SessionStatement st) {
  st.serial = ++next_serial_;
  SessionStatement& slot = statements_[name];
  slot = std::move(st);
  return slot;
}

void ExtendedSession::Learn(const Pending& p, std::string_view frame, bool overwrite) {
  if (!p.learn) return;
  auto it = statements_.find(p.name);
  if (it == statements_.end() || it->second.serial != p.serial) return;  // closed or parsed again since
  if (it->second.result_type != 0 && !overwrite) return;
  it->second.result_type = ResultTypeOfFrame(frame);
}

void ExtendedSession::Materialize(SessionStatement& st, std::string& to_link) {
  // While the origin skips to a Sync it would discard the Parse: the
  // statement stays deferred (it exists for the driver) until a message
  // that is not skipped needs it.
  if (st.deferred_parse.empty() || skipping_) return;
  to_link += st.deferred_parse;
  Pending p;
  p.kind = Expect::kParse;
  p.swallow = true;
  p.key = st.metadata_key;
  p.parse = std::move(st.deferred_parse);
  st.deferred_parse.clear();
  for (const auto& [name, s] : statements_) {
    if (&s == &st) p.name = name;
  }
  Push(std::move(p));
}

void ExtendedSession::MaterializeForExecute(std::string_view sql, std::string& to_link) {
  // SQL EXECUTE names a statement by the driver's name: the Endpoint must
  // know every statement answered here before the text reaches the origin.
  if (!StartsWithExecute(sql)) return;
  for (auto& [name, st] : statements_) {
    if (!name.empty()) Materialize(st, to_link);
  }
}

const SessionStatement* ExtendedSession::Find(std::string_view name) const {
  auto it = statements_.find(std::string(name));
  return it == statements_.end() ? nullptr : &it->second;
}

ExtendedSession::Promise ExtendedSession::Promised(std::string_view sql, const std::vector<uint32_t>& types,
                                                   bool keyable) const {
  Promise promise;
  promise.key = KeyFor(sql, types, keyable);
  if (!promise.key.empty()) promise.meta = store_->Get(promise.key);
  return promise;
}

bool ExtendedSession::AdoptServedParse(const protocol::Frame& frame, Promise promise) {
  auto p = pr::DecodeParse(frame.payload);
  if (!p.ok() || lost_) return false;
  if (p->statement.empty()) statements_.erase(std::string());  // replaced, whatever follows
  std::vector<uint32_t> types(p->parameter_types.begin(), p->parameter_types.end());
  std::string key = std::move(promise.key);
  std::shared_ptr<const StatementMetadata> meta = std::move(promise.meta);
  if (!meta || !meta->deferrable) return false;
  std::optional<std::vector<uint32_t>> declared = TypesOf(meta->parameter_description);
  if (!declared) return false;
  auto existing = statements_.find(std::string(p->statement));
  if (existing != statements_.end() && !p->statement.empty()) return false;  // the origin would say 42P05
  SessionStatement st;
  st.sql = std::string(p->query);
  st.param_types = std::move(types);
  st.metadata_key = std::move(key);
  pr::Parse rewritten{p->statement, p->query, *declared};
  pr::Encode(rewritten, st.deferred_parse);
  st.result_type = ResultTypeOfFrame(meta->row_description);
  st.promised = std::move(meta);
  st.shown = true;
  Define(std::string(p->statement), std::move(st));
  return true;
}

bool ExtendedSession::OnParse(const protocol::Frame& frame, std::string_view rest, const ExtendedContext& ctx,
                                std::string& to_link, std::string& local, FrontendResult& result) {
  auto p = pr::DecodeParse(frame.payload);
  if (!p.ok()) return false;  // the origin reports it
  std::string name(p->statement);
  MaterializeForExecute(p->query, to_link);
  auto old = statements_.find(name);
  if (old != statements_.end() && !old->second.deferred_parse.empty()) {
    if (name.empty()) {
      statements_.erase(old);  // the unnamed statement is simply replaced
      old = statements_.end();
    } else {
      Materialize(old->second, to_link);  // so that the origin reports 42P05 as it would
    }
  }
  std::vector<uint32_t> types(p->parameter_types.begin(), p->parameter_types.end());
  std::string key = KeyFor(p->query, types, ctx.keyable);
  // Local answer: Parse [Describe(statement) of it] then Flush or Sync.
  if (!key.empty() && CanAnswer(ctx) && (old == statements_.end() || name.empty())) {
    std::optional<pr::Frame> f1 = pr::PeekTaggedFrame(rest);
    bool describe = false;
    size_t used = 0;
    if (f1 && f1->tag == 'D') {
      auto d = pr::DecodeDescribe(f1->payload);
      if (d.ok() && d->kind == pr::ObjectKind::kStatement && d->name == p->statement) {
        describe = true;
        used = f1->size();
        f1 = pr::PeekTaggedFrame(rest.substr(used));
      } else {
        f1.reset();
      }
    }
    if (f1 && (f1->tag == 'H' || f1->tag == 'S')) {
      std::shared_ptr<const StatementMetadata> meta = store_->Get(key);
      std::optional<std::vector<uint32_t>> declared;
      if (meta && meta->deferrable) declared = TypesOf(meta->parameter_description);
      if (declared) {
        SessionStatement st;
        st.sql = std::string(p->query);
        st.param_types = std::move(types);
        st.metadata_key = std::move(key);
        pr::Parse rewritten{p->statement, p->query, *declared};
        pr::Encode(rewritten, st.deferred_parse);
        // (Unknown until the driver is shown a shape: its answer here, or
        // the origin's to a Describe.)
        if (describe) st.result_type = ResultTypeOfFrame(meta->row_description);
        st.shown = describe;
        st.promised = meta;
        Define(name, std::move(st));
        local += kParseComplete;
        if (describe) {
          local += meta->parameter_description;
          local += meta->row_description;
        }
        if (f1->tag == 'S') AppendReady(local, ctx.txn_status);
        store_->NoteLocalAnswer();
        result.rest_consumed = used + f1->size();
        result.forwarded = false;
        return true;
      }
    }
  }
  SessionStatement st;
  st.sql = std::string(p->query);
  st.param_types = std::move(types);
  st.metadata_key = std::move(key);
  if (old == statements_.end() || name.empty()) Define(name, std::move(st));
  to_link += frame.raw;
  if (!skipping_) Push(Expect::kParse);
  return true;
}

bool ExtendedSession::OnDescribe(const protocol::Frame& frame, std::string_view rest, const ExtendedContext& ctx,
                                std::string& to_link, std::string& local, FrontendResult& result) {
  auto d = pr::DecodeDescribe(frame.payload);
  if (!d.ok()) return false;
  Pending p;
  if (d->kind == pr::ObjectKind::kStatement) {
    p.kind = Expect::kDescribeStatement;
    auto it = statements_.find(std::string(d->name));
    if (it != statements_.end()) {
      SessionStatement& st = it->second;
      if (!st.deferred_parse.empty() && st.promised && CanAnswer(ctx)) {
        std::optional<pr::Frame> f1 = pr::PeekTaggedFrame(rest);
        if (f1 && (f1->tag == 'H' || f1->tag == 'S')) {
          local += st.promised->parameter_description;
          local += st.promised->row_description;
          st.shown = true;
          st.result_type = ResultTypeOfFrame(st.promised->row_description);
          if (f1->tag == 'S') AppendReady(local, ctx.txn_status);
          store_->NoteLocalAnswer();
          result.rest_consumed = f1->size();
          result.forwarded = false;
          return true;
        }
      }
      Materialize(st, to_link);
      if (!st.shown) st.promised.reset();  // the driver holds what the origin answers: nothing to check
      p.learn = true;  // the driver holds what the origin answers
      p.name = std::string(d->name);
      p.serial = st.serial;
      if (!st.promised) {  // learn what the origin answers
        p.key = st.metadata_key;
        p.sql = st.sql;
        if (store_ != nullptr) p.generation = store_->generation();
      }
    }
  } else {
    p.kind = Expect::kDescribePortal;
    if (!check_portal_.empty() || check_promise_ || describe_learns_) {
      if (check_portal_ == d->name && (check_promise_ || describe_learns_)) {
        p.check = std::move(check_promise_);
        p.key = std::move(check_key_);
        p.name = std::move(check_statement_);
        auto it = statements_.find(p.name);
        if (it != statements_.end()) {
          p.learn = true;
          p.serial = it->second.serial;
        }
      }
      check_portal_.clear();
      check_promise_.reset();
      check_key_.clear();
      check_statement_.clear();
      describe_learns_ = false;
    }
  }
  to_link += frame.raw;
  if (!skipping_) Push(std::move(p));
  return true;
}

bool ExtendedSession::OnBind(const protocol::Frame& frame, std::string_view rest, const ExtendedContext& ctx,
                                std::string& to_link, std::string& local, FrontendResult& result) {
  auto b = pr::DecodeBind(frame.payload);
  if (!b.ok()) return false;
  auto it = statements_.find(std::string(b->statement));
  std::shared_ptr<const StatementMetadata> promise;
  std::string key;
  if (it != statements_.end()) {
    Materialize(it->second, to_link);
    promise = std::move(it->second.promised);  // checked once, at this first Bind
    it->second.promised.reset();
    if (!it->second.shown) promise.reset();  // the driver was told no shape: nothing to check
    key = it->second.metadata_key;
  }
  to_link += frame.raw;
  if (skipping_) return true;
  if (!promise) {
    Push(Expect::kBind);
    std::optional<pr::Frame> f1 = pr::PeekTaggedFrame(rest);
    bool driver_describes = false;
    if (f1 && f1->tag == 'D') {
      auto d = pr::DecodeDescribe(f1->payload);
      driver_describes = d.ok() && d->kind == pr::ObjectKind::kPortal && d->name == b->portal;
    }
    if (it != statements_.end() && driver_describes) {
      // Its answer tells the statement's result type, if not yet known.
      check_portal_ = std::string(b->portal);
      check_statement_ = std::string(b->statement);
      describe_learns_ = true;
    }
    if (ctx.describe_portal && !driver_describes) {
      pr::Describe describe{pr::ObjectKind::kPortal, b->portal};
      pr::Encode(describe, to_link);
      Pending p{Expect::kDescribePortal};
      p.swallow = true;
      if (it != statements_.end()) {
        p.learn = true;
        p.name = std::string(b->statement);
        p.serial = it->second.serial;
      }
      Push(std::move(p));
    }
    return true;
  }
  Pending bind{Expect::kBind};
  bind.hold = true;
  Push(std::move(bind));
  std::optional<pr::Frame> f1 = pr::PeekTaggedFrame(rest);
  if (f1 && f1->tag == 'D') {
    auto d = pr::DecodeDescribe(f1->payload);
    if (d.ok() && d->kind == pr::ObjectKind::kPortal && d->name == b->portal) {
      check_portal_ = std::string(b->portal);  // the driver's own Describe is the check
      check_promise_ = std::move(promise);
      check_key_ = std::move(key);
      check_statement_ = std::string(b->statement);
      return true;
    }
  }
  pr::Describe describe{pr::ObjectKind::kPortal, b->portal};
  pr::Encode(describe, to_link);
  Pending p{Expect::kDescribePortal};
  p.swallow = true;
  p.check = std::move(promise);
  p.key = std::move(key);
  p.name = std::string(b->statement);
  p.learn = true;
  p.serial = it->second.serial;
  Push(std::move(p));
  return true;
}

ExtendedSession::FrontendResult ExtendedSession::OnFrontend(const protocol::Frame& frame, std::string_view rest,
                                                            const ExtendedContext& ctx, std::string& to_link,
                                                            std::string& local) {
  if (skipping_ && !lost_ && (frame.tag == 'Q' || frame.tag == 'F')) {
    // The origin skips it (an extended message failed, and no Sync went
    // since): not sent, no ReadyForQuery to wait for, nothing of it ran.
    FrontendResult skipped;
    skipped.forwarded = false;
    return skipped;
  }
  FrontendResult result = Dispatch(frame, rest, ctx, to_link, local);
  // An extended-protocol message that reaches the origin begins (or goes on
  // with) an implicit transaction that only a Sync, or a simple Query, ends:
  // until then nothing is answered locally (asyncpg's prepare() sends Parse +
  // Describe + Flush; a Bind + Execute + Sync after it answered from the
  // Client tier left the origin connection inside that transaction, holding
  // its locks, for good).
  switch (frame.tag) {
    case 'S':
    case 'Q':
      unsynced_ = false;
      break;
    case 'P':
    case 'B':
    case 'D':
    case 'E':
    case 'C':
      if (result.forwarded) unsynced_ = true;
      break;
    default:
      break;
  }
  return result;
}

ExtendedSession::FrontendResult ExtendedSession::Dispatch(const protocol::Frame& frame, std::string_view rest,
                                                          const ExtendedContext& ctx, std::string& to_link,
                                                          std::string& local) {
  FrontendResult result;
  if (lost_) {
    to_link += frame.raw;
    return result;
  }
  switch (frame.tag) {
    case 'P': {
      if (OnParse(frame, rest, ctx, to_link, local, result)) return result;
      break;
    }
    case 'D': {
      if (OnDescribe(frame, rest, ctx, to_link, local, result)) return result;
      break;
    }
    case 'B': {
      if (OnBind(frame, rest, ctx, to_link, local, result)) return result;
      break;
    }
    case 'E':
      to_link += frame.raw;
      if (!skipping_) Push(Expect::kExecute);
      return result;
    case 'C': {
      auto c = pr::DecodeClose(frame.payload);
      if (c.ok() && c->kind == pr::ObjectKind::kStatement) statements_.erase(std::string(c->name));
      to_link += frame.raw;
      if (!skipping_) Push(Expect::kClose);
      return result;
    }
    case 'S':
      to_link += frame.raw;
      skipping_ = false;  // the origin resumes after this Sync
      Push(Expect::kSync);
      return result;
    case 'Q':
      statements_.erase(std::string());  // a simple Query replaces the unnamed statement
      if (!frame.payload.empty()) MaterializeForExecute(frame.payload.substr(0, frame.payload.size() - 1), to_link);
      to_link += frame.raw;
      Push(Expect::kQuery);
      return result;
    case 'F':
      to_link += frame.raw;
      Push(Expect::kQuery);
      return result;
    default:
      to_link += frame.raw;  // Flush, CopyData/CopyDone/CopyFail, Terminate
      return result;
  }
  // Undecodable: forwarded; the origin's ErrorResponse answers it.
  to_link += frame.raw;
  if (frame.tag == 'P') {
    if (!skipping_) Push(Expect::kParse);
  } else if (frame.tag == 'B') {
    if (!skipping_) Push(Expect::kBind);
  } else if (frame.tag == 'D') {
    if (!skipping_) Push(Expect::kDescribePortal);
  } else if (frame.tag == 'C') {
    if (!skipping_) Push(Expect::kClose);
  }
  return result;
}

bool ExtendedSession::StreamsRows() const { return lost_ || !swallow_to_ready_; }

void ExtendedSession::Lose(std::string_view raw, AppBytes& out) {
  lost_ = true;
  out += held_;
  held_.clear();
  out += raw;
  pending_.clear();
}

void ExtendedSession::OnError(std::string_view raw, AppBytes& out) {
  Pending& front = pending_.front();
  if (store_ != nullptr && raw.size() > 5) {
    // The origin's own "cached plan must not change result type": DDL this
    // Client did not hear of changed some statement's shape, so none of
    // the shapes it knows can be promised any more (the driver re-prepares
    // next, and must get the origin's answer).
    auto e = pr::DecodeErrorResponse(raw.substr(5));
    if (e.ok() && e->sqlstate() == kSqlStateFeatureNotSupported) store_->InvalidateAll();
  }
  if (front.kind == Expect::kParse && front.swallow && store_ != nullptr) {
    // A deferred Parse failed: its error is the driver's answer at this Bind.
    if (!front.key.empty()) store_->Drop(front.key);
    store_->NoteDeferredFailure();
  }
  out += held_;
  held_.clear();
  out += raw;
  // PostgreSQL skips everything up to the next Sync, deferred Parses of
  // ours included: those statements are deferred again (they exist for
  // the driver).
  bool first = true;
  while (!pending_.empty() && pending_.front().kind != Expect::kSync) {
    Pending& p = pending_.front();
    if (!first && p.kind == Expect::kParse && p.swallow && !p.parse.empty()) {
      auto it = statements_.find(p.name);
      if (it != statements_.end() && it->second.deferred_parse.empty()) it->second.deferred_parse = std::move(p.parse);
    }
    if (!first && p.kind == Expect::kDescribePortal && p.check) {
      // Its check never ran: the next Bind checks instead.
      auto it = statements_.find(p.name);
      if (it != statements_.end() && !it->second.promised) it->second.promised = std::move(p.check);
    }
    if (p.kind == Expect::kQuery) ++skipped_units_;  // it gets no ReadyForQuery
    first = false;
    pending_.pop_front();
  }
  skipping_ = pending_.empty();
}

void ExtendedSession::OnBackend(char tag, std::string_view raw, AppBytes& out) {
  if (lost_) {
    out += raw;
    return;
  }
  // Asynchronous messages may come at any time.
  if (tag == 'N' || tag == 'A' || tag == 'S') {
    out += raw;
    return;
  }
  if (swallow_to_ready_) {
    if (tag != 'Z') return;
    swallow_to_ready_ = false;
    while (!pending_.empty() && pending_.front().kind != Expect::kSync) pending_.pop_front();
    if (!pending_.empty()) pending_.pop_front();
    out += raw;
    return;
  }
  if (pending_.empty()) {
    Lose(raw, out);
    return;
  }
  Pending& front = pending_.front();
  if (tag == 'Z' && front.kind != Expect::kSync && front.kind != Expect::kQuery) {
    // A ReadyForQuery ends a unit whatever was skipped in it: the Endpoint
    // answers a pipeline it could not start (53300, 08006) with one error
    // and a ReadyForQuery per Sync.
    out += held_;
    held_.clear();
    while (!pending_.empty() && pending_.front().kind != Expect::kSync && pending_.front().kind != Expect::kQuery) {
      pending_.pop_front();
    }
    if (!pending_.empty()) pending_.pop_front();
    skipping_ = false;
    out += raw;
    return;
  }
  if (tag == 'E' && front.kind == Expect::kSync) {
    out += raw;  // an error the Endpoint reports for the unit as a whole (e.g. 53300)
    return;
  }
  if (tag == 'E' && front.kind != Expect::kQuery) {
    OnError(raw, out);
    return;
  }
  switch (front.kind) {
    case Expect::kParse:
      if (tag != '1') break;
      if (!front.swallow) out += raw;
      pending_.pop_front();
      return;
    case Expect::kBind:
      if (tag != '2') break;
      if (front.hold) {
        held_.assign(raw);
      } else {
        out += raw;
      }
      pending_.pop_front();
      return;
    case Expect::kDescribeStatement:
      if (tag == 't' && front.param_desc.empty()) {
        front.param_desc.assign(raw);
        out += raw;
        return;
      }
      if (tag != 'T' && tag != 'n') break;
      out += raw;
      Learn(front, raw, /*overwrite=*/true);
      if (!front.key.empty() && !front.param_desc.empty() && store_ != nullptr) {
        StatementMetadata m;
        m.parameter_description = std::move(front.param_desc);
        m.row_description.assign(raw);
        m.deferrable = IsDeferrable(front.sql, raw);
        store_->Put(front.key, std::move(m), front.generation);
      }
      pending_.pop_front();
      return;
    case Expect::kDescribePortal:
      if (tag != 'T' && tag != 'n') break;
      if (front.check && !SameRowShape(raw, front.check->row_description)) {
        // DDL the Endpoint did not see changed the result type.
        held_.clear();
        AppendCachedPlanChanged(out.owned());
        if (store_ != nullptr) {
          if (!front.key.empty()) store_->Drop(front.key);
          store_->NoteMismatch();
        }
        pending_.pop_front();
        swallow_to_ready_ = true;
        return;
      }
      out += held_;
      held_.clear();
      if (!front.swallow) out += raw;
      Learn(front, raw, /*overwrite=*/false);
      pending_.pop_front();
      return;
    case Expect::kExecute:
      if (tag == 'C' || tag == 'I' || tag == 's') {
        out += raw;
        pending_.pop_front();
        return;
      }
      // DataRow, COPY responses and data: part of the result.
      if (tag == 'D' || tag == 'G' || tag == 'H' || tag == 'W' || tag == 'd' || tag == 'c') {
        out += raw;
        return;
      }
      break;
    case Expect::kClose:
      if (tag != '3') break;
      out += raw;
      pending_.pop_front();
      return;
    case Expect::kSync:
      if (tag != 'Z') break;
      out += raw;
      pending_.pop_front();
      return;
    case Expect::kQuery:
      out += raw;
      if (tag == 'Z') pending_.pop_front();
      return;
  }
  Lose(raw, out);
}

bool ExtendedSession::Disposable() const {
  return statements_.empty() && pending_.empty() && held_.empty() && !skipping_ && !swallow_to_ready_ && !lost_ &&
         !unsynced_ && check_portal_.empty() && check_promise_ == nullptr && check_key_.empty() &&
         check_statement_.empty() && !describe_learns_;
}

}  // namespace hyperpool::client
