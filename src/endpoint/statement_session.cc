#include "endpoint/statement_session.h"

#include <cctype>
#include <cstring>
#include <utility>

#include "protocol/backend_messages.h"
#include "protocol/wire_reader.h"
#include "protocol/wire_writer.h"
#include "protocol/sqlstate.h"

namespace hyperpool::endpoint {
namespace {

// A no-op: closing a statement that does not exist is not an error
// ("Message Flow" > "Extended Query": "It is not an error to issue Close
// against a nonexistent statement or portal name"). Server names are
// "hp_<digits>", so this one never exists.
constexpr std::string_view kNoopStatement = "hp_noop";
// Sent instead of a retired statement the connection lacks; the origin's
// "does not exist" is answered as PostgreSQL answers the stale statement.
constexpr std::string_view kStaleStatement = "hp_stale";
// A Parse the connection holds already, sent when the transaction may be
// failed: PostgreSQL answers it 25P02 there (unless it is COMMIT/ROLLBACK),
// as it would the client's own; a ParseComplete is closed at once.
constexpr std::string_view kProbeStatement = "hp_probe";
constexpr std::string_view kStalePlanMessage = "cached plan must not change result type";

using protocol::TakeCString;

void AppendHeader(std::string& out, char tag, std::size_t payload_size) {
  protocol::AppendByte(out, static_cast<uint8_t>(tag));
  protocol::AppendInt32(out, static_cast<int32_t>(payload_size + 4));
}

void AppendClose(std::string& out, std::string_view name) {
  AppendHeader(out, 'C', 1 + name.size() + 1);
  protocol::AppendByte(out, 'S');
  protocol::AppendCString(out, name);
}

// Bind with its statement name replaced: portal, name, then the rest as received.
void AppendBind(std::string& out, std::string_view portal, std::string_view statement, std::string_view rest) {
  AppendHeader(out, 'B', portal.size() + 1 + statement.size() + 1 + rest.size());
  protocol::AppendCString(out, portal);
  protocol::AppendCString(out, statement);
  protocol::AppendBytes(out, rest);
}

void AppendDescribeStatement(std::string& out, std::string_view name) {
  AppendHeader(out, 'D', 1 + name.size() + 1);
  protocol::AppendByte(out, 'S');
  protocol::AppendCString(out, name);
}

// The SQLSTATE ('C' field) of an ErrorResponse payload, or "".
std::string_view SqlStateOf(std::string_view payload) {
  while (!payload.empty() && payload[0] != '\0') {
    const char code = payload[0];
    payload.remove_prefix(1);
    std::string_view value;
    if (!TakeCString(payload, value)) return {};
    if (code == 'C') return value;
  }
  return {};
}

}  // namespace

// The ErrorResponse payload PostgreSQL sends when a statement's result type
// changed (plancache.c, RevalidateCachedQuery): drivers recognise it by the
// routine field (asyncpg, postgres.js) or the SQLSTATE (PgJDBC).
std::string StalePlanError() {
  std::string payload;
  auto field = [&](char code, std::string_view value) {
    payload.push_back(code);
    protocol::AppendCString(payload, value);
  };
  field('S', "ERROR");
  field('V', "ERROR");
  field('C', kSqlStateFeatureNotSupported);
  field('M', kStalePlanMessage);
  field('F', "plancache.c");
  field('R', "RevalidateCachedQuery");
  payload.push_back('\0');
  return payload;
}


// ---------------------------------------------------------------------------
// Queue
// ---------------------------------------------------------------------------

void StatementSession::Push(Kind kind, Mode mode, StatementRef statement) {
  if (head_ == ops_.size()) {
    ops_.clear();
    head_ = 0;
  }
  Op& op = ops_.emplace_back();
  op.kind = kind;
  op.mode = mode;
  op.statement = std::move(statement);
  if (kind == Kind::kSync || kind == Kind::kQuery || kind == Kind::kFunctionCall) {
    last_boundary_ = LastSeq();
    if (kind == Kind::kSync) last_sync_ = last_boundary_;
    if (group_drops_) {
      all_set_ = last_boundary_;
      group_drops_ = false;
    }
  }
}

void StatementSession::Pop() {
  Op& op = ops_[head_];
  op.statement.reset();
  op.close_name.clear();
  ++popped_;
  if (++head_ == ops_.size()) {
    ops_.clear();
    head_ = 0;
    if (!name_set_.empty()) name_set_.clear();
    if (!member_set_.empty()) member_set_.clear();
  }
}

void StatementSession::AppendScope() const {
  if (scope_.empty()) return;
  catalog_.scratch().key.push_back('\0');
  catalog_.scratch().key.append(scope_);
}

void StatementSession::Reset() {
  popped_ += ops_.size() - head_;  // (nothing pending is waited for any more)
  name_set_.clear();
  member_set_.clear();
  group_drops_ = false;
  status_ = 'I';  // (a connection is lent idle)
  ops_.clear();
  head_ = 0;
  skipping_ = false;
  skip_started_ = false;
  discarding_ = false;
  shape_check_pending_ = false;
}

void StatementSession::ReleaseBuffers() {
  if (head_ != ops_.size()) return;
  std::vector<Op>().swap(ops_);
  head_ = 0;
}

void StatementSession::EmitLeadingSynthetic(std::string& out) {
  while (head_ < ops_.size() && ops_[head_].mode == Mode::kSynthetic) {
    // Only Parse and Close are ever synthetic.
    protocol::AppendFrame(out, ops_[head_].kind == Kind::kParse ? '1' : '3', {});
    Pop();
  }
}

// ---------------------------------------------------------------------------
// Frontend
// ---------------------------------------------------------------------------

void StatementSession::EmitPendingCloses(ConnectionStatements& conn, std::string& out) {
  if (conn.pending_close.empty()) return;
  for (std::string& name : conn.pending_close) {
    AppendClose(out, name);
    Push(Kind::kClose, Mode::kHidden);
    // A later group's Parse of the name (the 42P05 path's hidden empty
    // Parse) waits for it: skipped, the statement still exists there.
    NoteSet(name);
    ops_.back().close_name = std::move(name);
  }
  conn.pending_close.clear();
}

void StatementSession::AddToConnection(const StatementRef& statement, ConnectionStatements& conn, std::string& out) {
  catalog_.scratch().evicted.clear();
  conn.Add(statement, &catalog_.scratch().evicted);
  for (StatementRef& victim : catalog_.scratch().evicted) {
    AppendClose(out, victim->server_name);
    const StatementInfo* closed = victim.get();
    Push(Kind::kClose, Mode::kHidden, std::move(victim));
    ops_.back().eviction = true;
    NoteMember(closed);
  }
  catalog_.scratch().evicted.clear();
}

void StatementSession::Replay(const StatementRef& statement, ConnectionStatements& conn, std::string& out) {
  if (statement->runs != nullptr && !conn.Touch(statement->runs.get())) Replay(statement->runs, conn, out);
  AddToConnection(statement, conn, out);
  protocol::AppendRawFrame(out, statement->parse_frame);
  Push(Kind::kParse, Mode::kHidden, statement);
  NoteMember(statement.get());
  AppendDescribeStatement(out, statement->server_name);
  Push(Kind::kDescribeStatement, Mode::kHidden, statement);
  ops_.back().verify = statement->shape_known;
}

bool StatementSession::AtUnitStart() const {
  if (head_ == ops_.size()) return true;
  const Kind last = ops_.back().kind;
  return last == Kind::kSync || last == Kind::kQuery || last == Kind::kFunctionCall;
}

void StatementSession::ShowOwnStatements(ConnectionStatements& conn, std::string& out, bool sync) {
  const std::size_t first = ops_.size() - head_;
  // Statements of other sessions go; each is known again on this connection
  // if its Close is skipped after an error.
  for (const StatementRef& statement : conn.members()) {
    AppendClose(out, statement->server_name);
    Push(Kind::kClose, Mode::kHidden, statement);
    ops_.back().eviction = true;
    NoteMember(statement.get());
  }
  conn.Clear();
  client_.InOrder(catalog_.scratch().own);
  for (const StatementRef& statement : catalog_.scratch().own) {
    Replay(statement, conn, out);
    ops_.back().view_only = true;
  }
  catalog_.scratch().own.clear();
  if (sync) EndOwnSyncGroup(first, out);
}

bool StatementSession::OwnsReady() const {
  return head_ < ops_.size() && ops_[head_].kind == Kind::kSync && ops_[head_].mode == Mode::kHidden;
}

bool StatementSession::StartShapeCheck(const protocol::Frame& frame, ConnectionStatements& conn, std::string& out) {
  if (skipping_ || shape_check_pending_) return false;
  std::string_view rest = frame.payload;
  std::string_view name;
  if (frame.tag == 'B') {
    std::string_view portal;
    if (!TakeCString(rest, portal) || !TakeCString(rest, name)) return false;
  } else if (frame.tag == 'D' && !rest.empty() && rest[0] == 'S') {
    rest.remove_prefix(1);
    if (!TakeCString(rest, name)) return false;
  } else {
    return false;
  }
  if (name.empty()) return false;
  const StatementRef* ref = client_.Find(name);
  if (ref == nullptr) return false;
  const StatementRef& statement = *ref;
  if (!statement->shape_known || conn.Has(statement.get())) return false;
  // A retired statement is checked at every use where it is missing: as a
  // PostgreSQL statement whose result type changed, it works again once its
  // query has its original result type again (the table re-created as it was).
  if (!statement->retired && statement->shape_epoch == catalog_.epoch()) return false;
  EmitPendingCloses(conn, out);  // a retired statement's own name may still exist there
  Replay(statement, conn, out);
  ops_.back().shape_check = true;
  protocol::AppendFrame(out, 'H', {});  // the origin answers a Flush at once; no Sync (the unit goes on)
  shape_check_pending_ = true;
  return true;
}

StatementRef StatementSession::ParseCandidate(std::string_view name, StatementRef shared, Mode mode,
                                              ConnectionStatements& conn, std::string& out) {
  if (shared->runs != nullptr && !conn.Touch(shared->runs.get())) Replay(shared->runs, conn, out);
  StatementRef fresh = catalog_.Candidate(*shared);
  const std::uint64_t order = mode == Mode::kForwarded ? client_.Set(name, fresh) : client_.Repoint(name, fresh);
  AddToConnection(fresh, conn, out);
  protocol::AppendRawFrame(out, fresh->parse_frame);
  Push(Kind::kParse, mode, fresh);
  if (mode == Mode::kForwarded) {
    ops_.back().client_order = order;
    NoteSet(name, /*native=*/true);
  }
  NoteMember(fresh.get());
  AppendDescribeStatement(out, fresh->server_name);
  Push(Kind::kDescribeStatement, Mode::kHidden, fresh);
  ops_.back().fold_into = std::move(shared);
  ops_.back().client_order = order;
  return fresh;
}

std::string_view StatementSession::Resolve(std::string_view name, ConnectionStatements& conn, std::string& out,
                                           StatementRef* statement, bool* stale, std::uint64_t* order) {
  if (name.empty()) {
    if (client_.unnamed_id() == 0) {
      // The client has none (never parsed, or a simple Query dropped it):
      // the connection's own (another session's, perhaps) is closed first,
      // so that the origin answers "unnamed prepared statement does not
      // exist" as it would directly, rather than binding that one.
      AppendClose(out, "");
      Push(Kind::kClose, Mode::kHidden);
      conn.unnamed_id = 0;
      return name;
    }
    if (conn.unnamed_id != client_.unnamed_id()) {
      protocol::AppendRawFrame(out, client_.unnamed_parse());
      Push(Kind::kParse, Mode::kHidden);
      ops_.back().unnamed = true;
      conn.unnamed_id = client_.unnamed_id();
    }
    return name;
  }
  bool unconfirmed = false;
  const StatementRef* ref = client_.FindForUse(name, &unconfirmed, order);
  if (ref == nullptr) return name;  // not one of the client's Parses (SQL-level PREPARE, or missing)
  if (unconfirmed && (*ref)->shape_known && !(*ref)->retired) {
    // Answered without the origin (AnswerParseOnly): parsed now, as the
    // client's own statement, before its first use.
    StatementRef fresh = ParseCandidate(name, *ref, Mode::kHidden, conn, out);
    *statement = fresh;
    return fresh->server_name;
  }
  if (!conn.Touch(ref->get())) {
    if ((*ref)->retired) {
      *stale = true;
      *statement = *ref;
      return kStaleStatement;
    }
    Replay(*ref, conn, out);
  } else if ((*ref)->runs != nullptr && !conn.Touch((*ref)->runs.get())) {
    Replay((*ref)->runs, conn, out);
  }
  *statement = *ref;
  return (*ref)->server_name;
}

void StatementSession::OnParse(const protocol::Frame& frame, ConnectionStatements& conn, std::string& out) {
  std::string_view rest = frame.payload;
  std::string_view name;
  std::string_view query;
  if (!TakeCString(rest, name) || !TakeCString(rest, query)) {
    // Malformed: the origin reports it.
    protocol::AppendRawFrame(out, frame.raw);
    Push(Kind::kParse, Mode::kForwarded);
    return;
  }
  const std::string_view types_raw = rest;
  if (DropsStatements(query)) group_drops_ = true;  // (MustWait)
  // SQL EXECUTE of a name the client Parsed: the origin knows it as hp_<n>.
  StatementRef runs;
  query = RewriteExecute(query, conn, out, ReplayMode::kInline, &runs);
  if (name.empty()) {
    // The statement it replaces is gone if it fails (OnError); if the
    // origin may skip it (messages of its Sync group before it, a Query
    // included), that one is kept in the op and put back then (UndoSkipped).
    const bool may_be_skipped = LastSeq() != last_sync_;
    Push(Kind::kParse, Mode::kForwarded);
    Op& op = ops_.back();
    op.unnamed = true;
    if (may_be_skipped) KeepUnnamed(op);
    op.unnamed_id = catalog_.NextUnnamedId();
    std::string& name_scratch = catalog_.scratch().name;
    if (runs != nullptr) {
      const std::size_t start = out.size();
      AppendHeader(out, 'P', 1 + query.size() + 1 + types_raw.size());
      protocol::AppendByte(out, 0);
      protocol::AppendCString(out, query);
      out.append(types_raw);
      client_.SetUnnamed(std::string_view(out).substr(start), op.unnamed_id);
      unnamed_is_dealloc_ = false;
    } else if (StatusKnown() && status_ != 'E' && ParseDeallocate(query, name_scratch) &&
               client_.Find(name_scratch) != nullptr) {
      // psycopg's "DEALLOCATE _pg3_N" (sent as an unnamed Parse): forget the
      // mapping; an empty statement stands in for it. (In a failed
      // transaction it goes as sent: 25P02, the mapping stays.)
      op.put_back_order = client_.Take(name_scratch, &op.statement);
      op.close_name = name_scratch;
      NoteSet(name_scratch);
      const std::size_t start = out.size();
      AppendHeader(out, 'P', 1 + 1 + 2);
      protocol::AppendByte(out, 0);
      protocol::AppendByte(out, 0);
      protocol::AppendInt16(out, 0);
      client_.SetUnnamed(std::string_view(out).substr(start), op.unnamed_id);
      unnamed_is_dealloc_ = true;
    } else {
      protocol::AppendRawFrame(out, frame.raw);
      client_.SetUnnamed(frame.raw, op.unnamed_id);
      unnamed_is_dealloc_ = false;
    }
    conn.unnamed_id = client_.unnamed_id();
    NoteSet({});
    return;
  }
  if (client_.Find(name) != nullptr) {
    // The name is taken: PostgreSQL answers 42P05 "prepared statement ...
    // already exists" and skips to Sync. The origin says it itself: an
    // empty statement of that name first (hidden, closed later), then this
    // Parse as sent. The client's statement stays as it was.
    AppendHeader(out, 'P', name.size() + 1 + 1 + 2);
    protocol::AppendCString(out, name);
    protocol::AppendByte(out, 0);
    protocol::AppendInt16(out, 0);
    Push(Kind::kParse, Mode::kHidden);
    protocol::AppendRawFrame(out, frame.raw);
    Push(Kind::kParse, Mode::kForwarded);
    conn.pending_close.emplace_back(name);
    // The empty statement exists on the origin or not by the answer: a
    // later group's Parse of the name waits for it (MustWait).
    NoteSet(name);
    return;
  }
  BuildStatementKey(query, types_raw, catalog_.scratch().key);
  AppendScope();
  StatementRef statement = catalog_.Intern(catalog_.scratch().key, query, types_raw);
  if (runs != nullptr) statement->runs = std::move(runs);
  if (statement->shape_known) {
    // Another client's (or an earlier) Parse made it: the origin parses the
    // client's own now, in case DDL it never told the Endpoint about
    // changed its result type since (FoldCandidate).
    ParseCandidate(name, std::move(statement), Mode::kForwarded, conn, out);
    return;
  }
  const std::uint64_t order = client_.Set(name, statement);
  if (conn.Touch(statement.get())) {
    if (StatusKnown() && status_ != 'E') {
      Push(Kind::kParse, Mode::kSynthetic);
      ops_.back().client_order = order;
      NoteSet(name);
      return;
    }
    // The transaction may be failed (the latest ReadyForQuery said so, or
    // an earlier Sync group is unanswered): PostgreSQL would answer 25P02
    // unless the text ends a transaction. The origin says which, parsing
    // it under a name closed at once; the connection's statement stays.
    AppendHeader(out, 'P', kProbeStatement.size() + 1 + query.size() + 1 + types_raw.size());
    protocol::AppendCString(out, kProbeStatement);
    protocol::AppendCString(out, query);
    out.append(types_raw);
    Push(Kind::kParse, Mode::kForwarded);
    ops_.back().client_order = order;
    NoteSet(name);
    AppendClose(out, kProbeStatement);
    Push(Kind::kClose, Mode::kHidden);
    return;
  }
  AddToConnection(statement, conn, out);
  protocol::AppendRawFrame(out, statement->parse_frame);
  const bool record = !statement->shape_known;
  Push(Kind::kParse, Mode::kForwarded, statement);
  ops_.back().client_order = order;
  NoteSet(name, /*native=*/true);
  NoteMember(statement.get());
  if (record) {
    // Remember the shape it is made with (the client may never Describe
    // it); later replays elsewhere are compared with it.
    AppendDescribeStatement(out, statement->server_name);
    Push(Kind::kDescribeStatement, Mode::kHidden, std::move(statement));
  }
}

void StatementSession::OnQuery(const protocol::Frame& frame, ConnectionStatements& conn, std::string& out) {
  const bool at_start = AtUnitStart();  // (before the hidden Closes)
  EmitPendingCloses(conn, out);
  conn.unnamed_id = 0;  // a simple Query drops the unnamed statement
  // ...the client's too (and the session may sleep: Empty): a Bind('')
  // after it fails as directly; kept in the op, put back if the origin
  // skips the Query (UndoSkipped), after which it still exists directly.
  // (While skipping after an error the origin skips the Query too.)
  const bool dropped = !skipping_ && (client_.unnamed_id() != 0 || !client_.unnamed_parse().empty());
  const std::uint64_t dropped_id = client_.unnamed_id();
  std::string dropped_parse = dropped ? client_.DropUnnamed() : std::string();
  std::string_view rest = frame.payload;
  std::string_view sql;
  bool dealloc = false;
  const bool read = TakeCString(rest, sql);
  // (Only in a Sync group of its own: an error in it would make the origin
  // skip this Query until a Sync that never comes.)
  if (read && ReadsPreparedView(sql) && at_start) ShowOwnStatements(conn, out, /*sync=*/true);
  StatementRef runs;
  if (read) sql = RewriteExecute(sql, conn, out, at_start ? ReplayMode::kOwnSync : ReplayMode::kNone, &runs);
  if (runs != nullptr) {
    AppendHeader(out, 'Q', sql.size() + 1);
    protocol::AppendCString(out, sql);
  } else if (read && StatusKnown() && status_ != 'E' && ParseDeallocate(sql, catalog_.scratch().name) &&
             client_.Find(catalog_.scratch().name) != nullptr) {
    // psql's or psycopg's DEALLOCATE of a protocol-level name: forget the
    // mapping; an empty query stands in for it. (In a failed transaction
    // it goes as sent: 25P02, and the mapping stays.)
    AppendHeader(out, 'Q', 1);
    protocol::AppendByte(out, 0);
    dealloc = true;
  } else {
    protocol::AppendRawFrame(out, frame.raw);
  }
  Push(Kind::kQuery, Mode::kForwarded);
  ops_.back().translate_dealloc = dealloc;
  if (dealloc) {
    // (Kept in the op: the origin may skip the Query.)
    Op& op = ops_.back();
    op.put_back_order = client_.Take(catalog_.scratch().name, &op.statement);
    op.close_name = catalog_.scratch().name;
    NoteSet(op.close_name);
  }
  NoteSet({});  // (it drops the unnamed statement)
  if (read && DropsStatements(sql)) all_set_ = LastSeq();
  if (dropped) {
    ops_.back().dropped_unnamed = true;
    ops_.back().dropped_unnamed_id = dropped_id;
    ops_.back().dropped_unnamed_parse = std::move(dropped_parse);
  }
}

void StatementSession::OnFrontend(const protocol::Frame& frame, ConnectionStatements& conn, std::string& out) {
  const char tag = frame.tag;
  if (skipping_) {
    // The origin skips everything until Sync after an error: so do we,
    // without the side effects PostgreSQL would not have had either.
    switch (tag) {
      case 'P':
      case 'B':
      case 'D':
      case 'E':
      case 'C':
        return;
      case 'S':
        skipping_ = false;
        break;
      default:
        break;
    }
  }
  switch (tag) {
    case 'P': {
      EmitPendingCloses(conn, out);
      std::string_view rest = frame.payload;
      std::string_view name;
      std::string_view query;
      if (TakeCString(rest, name) && TakeCString(rest, query) && ReadsPreparedView(query)) {
        ShowOwnStatements(conn, out, AtUnitStart());
      }
      OnParse(frame, conn, out);
      return;
    }
    case 'B': {
      EmitPendingCloses(conn, out);
      std::string_view rest = frame.payload;
      std::string_view portal;
      std::string_view name;
      if (!TakeCString(rest, portal) || !TakeCString(rest, name)) break;
      if (const StatementRef* own = name.empty() ? nullptr : client_.Find(name);
          own != nullptr && (*own)->reads_prepared_view) {
        ShowOwnStatements(conn, out, AtUnitStart());
      }
      StatementRef statement;
      bool stale = false;
      std::uint64_t order = 0;
      const std::string_view target = Resolve(name, conn, out, &statement, &stale, &order);
      if (target.data() == name.data() && target.size() == name.size()) {
        protocol::AppendRawFrame(out, frame.raw);
      } else {
        AppendBind(out, portal, target, rest);
      }
      if (portal.empty()) portal_is_dealloc_ = name.empty() && unnamed_is_dealloc_;
      if (statement != nullptr && statement->drops_statements) group_drops_ = true;  // (MustWait)
      Push(Kind::kBind, Mode::kForwarded, std::move(statement));
      ops_.back().unnamed = name.empty();
      ops_.back().stale = stale;
      ops_.back().client_order = order;  // (error texts: NameClientsStatement)
      KeepNameForErrors(name);
      return;
    }
    case 'D': {
      if (frame.payload.empty() || frame.payload[0] != 'S') {
        protocol::AppendRawFrame(out, frame.raw);
        Push(Kind::kDescribePortal, Mode::kForwarded);
        return;
      }
      EmitPendingCloses(conn, out);
      std::string_view rest = frame.payload.substr(1);
      std::string_view name;
      if (!TakeCString(rest, name)) break;
      StatementRef statement;
      bool stale = false;
      std::uint64_t order = 0;
      const std::string_view target = Resolve(name, conn, out, &statement, &stale, &order);
      if (target.data() == name.data() && target.size() == name.size()) {
        protocol::AppendRawFrame(out, frame.raw);
      } else {
        AppendDescribeStatement(out, target);
      }
      Push(Kind::kDescribeStatement, Mode::kForwarded, std::move(statement));
      ops_.back().stale = stale;
      ops_.back().client_order = order;  // (error texts: NameClientsStatement)
      KeepNameForErrors(name);
      return;
    }
    case 'E': {
      protocol::AppendRawFrame(out, frame.raw);
      Push(Kind::kExecute, Mode::kForwarded);
      // Execute of the unnamed portal bound to an intercepted DEALLOCATE.
      ops_.back().translate_dealloc = portal_is_dealloc_ && !frame.payload.empty() && frame.payload[0] == '\0';
      return;
    }
    case 'C': {
      if (!frame.payload.empty() && frame.payload[0] == 'S') {
        std::string_view rest = frame.payload.substr(1);
        std::string_view name;
        if (!TakeCString(rest, name)) break;
        StatementRef statement;
        if (const std::uint64_t order = name.empty() ? 0 : client_.Take(name, &statement); order != 0) {
          // The shared server statement stays for other clients (and the
          // LRU bound); only the client's name goes (back if the origin
          // skips the Close: UndoSkipped).
          Push(Kind::kClose, Mode::kSynthetic, std::move(statement));
          ops_.back().close_name.assign(name.data(), name.size());
          ops_.back().put_back_order = order;
          NoteSet(name);
          return;
        }
        if (name.empty()) {
          protocol::AppendRawFrame(out, frame.raw);
          Push(Kind::kClose, Mode::kForwarded);
          Op& op = ops_.back();
          op.unnamed = true;
          KeepUnnamed(op);
          conn.unnamed_id = 0;
          NoteSet(name);
          return;
        }
      }
      protocol::AppendRawFrame(out, frame.raw);
      Push(Kind::kClose, Mode::kForwarded);
      return;
    }
    case 'S':
      protocol::AppendRawFrame(out, frame.raw);
      Push(Kind::kSync, Mode::kForwarded);
      return;
    case 'H':
      if (pending() > 0 && ops_.back().mode == Mode::kSynthetic) {
        // Nothing would come back to carry the synthetic answers out.
        AppendClose(out, kNoopStatement);
        Push(Kind::kClose, Mode::kHidden);
      }
      protocol::AppendRawFrame(out, frame.raw);
      return;
    case 'Q':
      OnQuery(frame, conn, out);
      return;
    case 'F':
      protocol::AppendRawFrame(out, frame.raw);
      Push(Kind::kFunctionCall, Mode::kForwarded);
      return;
    default:
      // CopyData / CopyDone / CopyFail: part of their COPY, no answer of their own.
      protocol::AppendRawFrame(out, frame.raw);
      return;
  }
  // A malformed Bind / Describe / Close: forwarded as is; the origin reports it.
  protocol::AppendRawFrame(out, frame.raw);
  Push(tag == 'B' ? Kind::kBind : tag == 'D' ? Kind::kDescribeStatement : Kind::kClose, Mode::kForwarded);
}

// ---------------------------------------------------------------------------
// Backend
// ---------------------------------------------------------------------------

void StatementSession::OnError(Op& op, std::string_view payload, ConnectionStatements& conn) {
  switch (op.kind) {
    case Kind::kParse:
      if (op.unnamed && op.mode == Mode::kForwarded) {
        // PostgreSQL drops the unnamed statement before it parses the new one.
        if (client_.unnamed_id() == op.unnamed_id) (void)client_.DropUnnamed();
        UnnamedNeverMade(op.unnamed_id, {}, 0);
        conn.unnamed_id = 0;
        break;
      }
      UndoSkipped(op, conn);  // the statement was not created
      break;
    case Kind::kBind:
    case Kind::kDescribeStatement:
      if (SqlStateOf(payload) == kSqlStateFeatureNotSupported) {
        // "cached plan must not change result type" after DDL: this server
        // statement is stale; close it so the next use re-prepares, and
        // give the text a new server statement for later Parses (a driver
        // that re-prepares once, as asyncpg and PgJDBC do outside a
        // transaction, must not meet the stale one on another connection).
        if (op.statement) {
          catalog_.Retire(op.statement.get(), payload);
          conn.Remove(op.statement.get());
          conn.pending_close.push_back(op.statement->server_name);
        } else if (op.unnamed) {
          conn.unnamed_id = 0;
        }
      }
      break;
    default:
      break;
  }
}

bool StatementSession::Hides(char tag) const {
  if ((tag == 'Z' || tag == 'E') && head_ < ops_.size() && ops_[head_].view_prep) return true;
  if (tag == 'N' || tag == 'A' || tag == 'S' || tag == 'Z' || tag == 'E') return false;
  if (discarding_) return true;
  std::size_t at = head_;
  while (at < ops_.size() && ops_[at].mode == Mode::kSynthetic) ++at;
  return at < ops_.size() && ops_[at].mode == Mode::kHidden;
}

StatementSession::Verdict StatementSession::OnBackend(const protocol::Frame& frame, ConnectionStatements& conn,
                                                      std::string& out) {
  const char tag = frame.tag;
  if (tag == 'Z' && !frame.payload.empty()) status_ = frame.payload[0];
  if (discarding_) {
    if (tag == 'N' || tag == 'A' || tag == 'S') return Verdict::kForward;
    if (tag != 'Z') {
      // Answers of a unit whose replayed statement changed shape: the
      // client already has its 0A000; only the ReadyForQuery goes on.
      if (tag == 'C') {
        std::string_view rest = frame.payload;
        std::string_view command;
        if (TakeCString(rest, command)) OnCommandComplete(command, conn);
      }
      return Verdict::kDrop;
    }
    discarding_ = false;
  }
  if (head_ == ops_.size()) {
    if (tag == 'C') {
      std::string_view rest = frame.payload;
      std::string_view command;
      if (TakeCString(rest, command)) OnCommandComplete(command, conn);
    }
    return Verdict::kForward;
  }
  EmitLeadingSynthetic(out);
  if (head_ == ops_.size()) return Verdict::kForward;
  switch (tag) {
    case 'N':  // NoticeResponse, NotificationResponse, ParameterStatus: asynchronous
    case 'A':
    case 'S':
      return Verdict::kForward;
    case 'Z':
      // Ends the head Sync / Query / FunctionCall (and, should the model
      // have drifted, anything still queued before it).
      if (OwnsReady()) {
        Pop();
        return Verdict::kDrop;
      }
      while (head_ < ops_.size()) {
        const Kind kind = ops_[head_].kind;
        Pop();
        if (kind == Kind::kSync || kind == Kind::kQuery || kind == Kind::kFunctionCall) break;
      }
      // Between our units others may use the connection (health check,
      // settings capture and replay: simple Queries, which drop the unnamed
      // statement), so it is re-Parsed if used again after this point.
      if (head_ == ops_.size()) conn.unnamed_id = 0;
      return Verdict::kForward;
    case 'E': {
      Op& op = ops_[head_];
      if (op.stale) {
        if (op.statement && !op.statement->stale_error.empty()) {
          protocol::AppendFrame(out, 'E', op.statement->stale_error);
        } else {
          protocol::EncodeErrorResponse(out, "ERROR", kSqlStateFeatureNotSupported, kStalePlanMessage);
        }
      } else {
        OnError(op, frame.payload, conn);
      }
      bool forward = !op.stale && !op.view_prep;  // an error of our own Sync group is ours
      if (op.kind == Kind::kQuery || op.kind == Kind::kFunctionCall) return Verdict::kForward;
      // Named after the skipped messages are undone (below): a DEALLOCATE
      // or Close of the name behind it has taken the name meanwhile.
      Op failed;
      const bool rename = forward && op.mode == Mode::kForwarded && op.statement != nullptr &&
                          (op.kind == Kind::kBind || op.kind == Kind::kDescribeStatement);
      if (rename) failed = std::move(op);
      Pop();
      // PostgreSQL skips everything until Sync. What the skipped messages
      // assumed is undone latest first: each put back what it replaced.
      skip_started_ = true;
      std::size_t sync_at = head_;
      while (sync_at < ops_.size() && ops_[sync_at].kind != Kind::kSync) ++sync_at;
      for (std::size_t i = sync_at; i-- > head_;) UndoSkipped(ops_[i], conn);
      if (sync_at == ops_.size()) skipping_ = true;
      for (std::size_t n = sync_at - head_; n > 0; --n) Pop();
      if (rename && NameClientsStatement(failed, frame.payload, out)) forward = false;  // (sent as rewritten)
      return forward ? Verdict::kForward : Verdict::kDrop;
    }
    default:
      break;
  }
  Op& op = ops_[head_];
  bool complete = false;
  bool forward = op.mode != Mode::kHidden;
  switch (op.kind) {
    case Kind::kParse:
      complete = tag == '1';
      break;
    case Kind::kBind:
      complete = tag == '2';
      break;
    case Kind::kDescribeStatement:
      complete = tag == 'T' || tag == 'n';
      if (complete && op.statement && !OnShape(op, tag, frame.payload, conn) && !op.shape_check && !op.view_only) {
        // Found in flight: the client's messages behind it already went
        // out; their answers are replaced by the error.
        protocol::AppendFrame(out, 'E', op.statement->stale_error);
        Pop();
        bool found_sync = false;
        while (head_ < ops_.size()) {
          if (ops_[head_].kind == Kind::kSync) {
            found_sync = true;
            break;
          }
          Pop();
        }
        if (!found_sync) skipping_ = true;
        discarding_ = true;
        return Verdict::kDrop;
      }
      break;
    case Kind::kDescribePortal:
      complete = tag == 'T' || tag == 'n';
      break;
    case Kind::kClose:
      complete = tag == '3';
      break;
    case Kind::kExecute:
      complete = tag == 'C' || tag == 'I' || tag == 's';
      [[fallthrough]];
    case Kind::kQuery:
    case Kind::kFunctionCall:
      if (tag == 'C') {
        std::string_view rest = frame.payload;
        std::string_view command;
        if (TakeCString(rest, command)) OnCommandComplete(command, conn);
      } else if (tag == 'I' && op.translate_dealloc) {
        std::string payload = "DEALLOCATE";
        payload.push_back('\0');
        protocol::AppendFrame(out, 'C', payload);
        forward = false;
      }
      break;
    case Kind::kSync:
      break;
  }
  if (complete) Pop();
  return forward ? Verdict::kForward : Verdict::kDrop;
}

}  // namespace hyperpool::endpoint
