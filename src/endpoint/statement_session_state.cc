// What StatementSession believes about the client's statements while
// answers are pending (statement_session.h): the bookkeeping for pipelined
// Sync groups (MustWait: which pending message last set each client name
// and each statement on the connection), what a skipped message undoes,
// what a CommandComplete changes, error texts that name the client's
// statement rather than hp_<n>, Parse-only units, and candidates (a
// client's Parse of a text another Parse made, checked against DDL the
// Endpoint did not see).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "endpoint/statement_session.h"
#include "protocol/backend_messages.h"
#include "protocol/frame_reader.h"
#include "protocol/wire_reader.h"
#include "protocol/wire_writer.h"

namespace hyperpool::endpoint {

using protocol::TakeCString;

void StatementSession::NoteSet(std::string_view name, bool native) {
  if (name.empty()) {
    unnamed_set_ = LastSeq();
  } else {
    auto [it, made] = name_set_.try_emplace(std::string(name));
    it->second = NameSet{LastSeq(), made ? 0 : it->second.seq, native};
  }
}

void StatementSession::NoteMember(const StatementInfo* statement) { member_set_.insert_or_assign(statement, LastSeq()); }

std::uint64_t StatementSession::MemberSeq(const StatementInfo* statement) const {
  if (member_set_.empty()) return 0;
  auto it = member_set_.find(statement);
  return it == member_set_.end() ? 0 : it->second;
}

void StatementSession::KeepNameForErrors(std::string_view name) {
  if (name.empty() || name_set_.empty() || !name_set_.contains(absl::string_view(name.data(), name.size()))) return;
  ops_.back().close_name.assign(name.data(), name.size());
}

bool StatementSession::NameClientsStatement(const Op& op, std::string_view payload, std::string& out) {
  const std::string& server = op.statement->server_name;
  std::string& quoted = catalog_.scratch().exec_text;
  quoted.assign("\"").append(server).append("\"");
  if (payload.find(quoted) == std::string_view::npos) return false;
  std::string_view client = op.close_name;
  if (client.empty() && op.client_order != 0) client = client_.NameAt(op.client_order);
  if (client.empty()) client = client_.NameOf(op.statement.get());
  if (client.empty()) return false;
  std::string rewritten;
  for (std::size_t at = 0;;) {
    const std::size_t hit = payload.find(quoted, at);
    if (hit == std::string_view::npos) {
      rewritten.append(payload.substr(at));
      break;
    }
    rewritten.append(payload.substr(at, hit - at)).append("\"").append(client).append("\"");
    at = hit + quoted.size();
  }
  protocol::AppendFrame(out, 'E', rewritten);
  return true;
}

const StatementSession::NameSet* StatementSession::PendingSet(std::string_view name) const {
  if (name_set_.empty()) return nullptr;
  auto it = name_set_.find(absl::string_view(name.data(), name.size()));
  if (it == name_set_.end()) return nullptr;
  return EarlierUnanswered(it->second.seq) || EarlierUnanswered(it->second.prev) ? &it->second : nullptr;
}

bool StatementSession::MustWait(const protocol::Frame& frame, const ConnectionStatements& conn) const {
  if (StatusKnown()) return false;  // nothing of an earlier Sync group is pending
  std::string_view rest = frame.payload;
  std::string_view name;
  switch (frame.tag) {
    case 'B': {
      std::string_view portal;
      return TakeCString(rest, portal) && TakeCString(rest, name) && UseMustWait(name, conn);
    }
    case 'D':
      // (A Close needs no wait: it is answered CloseComplete either way.)
      if (rest.empty() || rest[0] != 'S') return false;
      rest.remove_prefix(1);
      return TakeCString(rest, name) && UseMustWait(name, conn);
    case 'P': {
      std::string_view query;
      if (!TakeCString(rest, name) || !TakeCString(rest, query)) return false;
      if (!name.empty()) {
        if (EarlierUnanswered(all_set_)) return true;
        if (PendingSet(name) != nullptr) return true;  // taken (42P05) or free depends on it
        // Answered here or sent depends on whether the connection holds it.
        BuildStatementKey(query, rest, catalog_.scratch().key);
        AppendScope();
        const StatementRef known = catalog_.Find(catalog_.scratch().key);
        if (known != nullptr && EarlierUnanswered(MemberSeq(known.get()))) return true;
      }
      return SqlMustWait(query, conn);
    }
    case 'Q': {
      std::string_view sql;
      return TakeCString(rest, sql) && SqlMustWait(sql, conn);
    }
    default:
      return false;
  }
}

bool StatementSession::UseMustWait(std::string_view name, const ConnectionStatements& conn) const {
  if (name.empty()) {
    // The connection's unnamed statement is the client's: the origin
    // answers the Bind as it would directly, whatever came of the earlier group.
    if (client_.unnamed_id() != 0 && conn.unnamed_id == client_.unnamed_id()) return false;
    return EarlierUnanswered(std::max(all_set_, unnamed_set_));
  }
  if (EarlierUnanswered(all_set_)) return true;
  const StatementRef* own = client_.Find(name);
  const std::uint64_t member = own != nullptr ? MemberSeq(own->get()) : 0;
  if (const NameSet* set = PendingSet(name); set != nullptr) {
    // Made by the client's own Parse, sent: its server statement exists
    // exactly when the name would directly (an error names hp_<n>, though).
    return !(set->native && own != nullptr && member == set->seq);
  }
  return EarlierUnanswered(member);
}

bool StatementSession::SqlMustWait(std::string_view sql, const ConnectionStatements& conn) const {
  std::string& name = catalog_.scratch().name;
  std::size_t pos = 0;
  std::size_t len = 0;
  if (ParseExecute(sql, name, pos, len)) return UseMustWait(name, conn);
  // A DEALLOCATE of a client name is answered here only outside a failed
  // transaction (OnQuery), and the status is not known yet.
  if (ParseDeallocate(sql, name)) {
    return client_.Find(name) != nullptr || PendingSet(name) != nullptr;
  }
  return false;
}

bool StatementSession::OnCommandComplete(std::string_view tag, ConnectionStatements& conn) {
  const bool was = pinned();
  if (tag.starts_with("ALTER ") || tag.starts_with("DROP ") || tag.starts_with("CREATE ")) {
    catalog_.SchemaChanged();
  }
  if (tag == "PREPARE") {
    ++sql_prepared_;
  } else if (tag == "DEALLOCATE") {
    if (sql_prepared_ > 0) --sql_prepared_;
  } else if (tag == "DEALLOCATE ALL" || tag == "DISCARD ALL") {
    // Every prepared statement on the connection is gone: the client's
    // SQL-level ones, its protocol-level names, and the shared server
    // statements other clients left there.
    sql_prepared_ = 0;
    client_.Clear();
    conn.Clear();
    conn.unnamed_id = 0;
  }
  return was != pinned();
}

void StatementSession::PutBackUnnamed(Op& op) {
  // Later messages (of later groups) that dropped or replaced this one kept
  // it to put back: they keep what it replaced instead.
  if (op.dropped_unnamed) {
    UnnamedNeverMade(op.unnamed_id, op.dropped_unnamed_parse, op.dropped_unnamed_id);
  } else {
    UnnamedNeverMade(op.unnamed_id, {}, 0);
  }
  if (!op.dropped_unnamed || client_.unnamed_id() != op.unnamed_id) return;  // (replaced since)
  client_.SwapUnnamed(op.dropped_unnamed_parse, op.dropped_unnamed_id);
  op.dropped_unnamed = false;
}

void StatementSession::UnnamedNeverMade(std::uint64_t id, std::string_view instead, std::uint64_t instead_id) {
  if (id == 0) return;
  for (std::size_t i = head_; i < ops_.size(); ++i) {
    Op& later = ops_[i];
    if (!later.dropped_unnamed || later.dropped_unnamed_id != id) continue;
    later.dropped_unnamed_parse.assign(instead.data(), instead.size());
    later.dropped_unnamed_id = instead_id;
  }
}

void StatementSession::UndoSkipped(Op& op, ConnectionStatements& conn) {
  if (op.put_back_order != 0 && op.statement && !op.close_name.empty() && client_.Find(op.close_name) == nullptr) {
    // A Close or DEALLOCATE answered here that the origin skipped: the
    // client's name was not closed.
    client_.PutBack(op.close_name, op.statement, op.put_back_order);
  }
  switch (op.kind) {
    case Kind::kParse:
      if (op.client_order != 0) client_.EraseSetAt(op.client_order);  // skipped: never made
      if (op.mode == Mode::kSynthetic) break;
      if (op.unnamed) {
        conn.unnamed_id = 0;
        if (op.mode == Mode::kForwarded) PutBackUnnamed(op);  // the client's: the one before it stays
      }
      if (op.statement && op.put_back_order == 0) conn.Remove(op.statement.get());  // (else a DEALLOCATE's)
      break;
    case Kind::kDescribeStatement:
      if (op.shape_check) shape_check_pending_ = false;
      break;
    case Kind::kQuery:
      // Skipped: the unnamed statement it would have destroyed still exists.
      if (op.dropped_unnamed && op.dropped_unnamed_id != 0 && client_.unnamed_id() == 0 &&
          client_.unnamed_parse().empty()) {
        client_.SetUnnamed(op.dropped_unnamed_parse, op.dropped_unnamed_id);
      }
      break;
    case Kind::kClose:
      if (op.mode == Mode::kForwarded && op.unnamed) {
        PutBackUnnamed(op);  // Close(''): its statement stays
        break;
      }
      if (op.mode != Mode::kHidden) break;
      if (op.eviction && op.statement) {
        // Still exists there: keep knowing it (the bound is soft).
        conn.Add(op.statement, nullptr);
      } else if (!op.close_name.empty()) {
        conn.pending_close.push_back(op.close_name);
      }
      break;
    default:
      break;
  }
}

bool StatementSession::IsParseOnlyUnit(std::string_view frames, bool known_only) const {
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  for (int n = 0; n < 1000; ++n) {
    auto r = reader.Read(frames);
    if (!r.is_frame()) return false;
    const protocol::Frame f = r.frame();
    if (f.tag == 'S') return n > 0;
    if (f.tag != 'P' || f.payload.empty() || f.payload[0] == '\0') return false;  // named Parses only
    std::string_view rest = f.payload;
    std::string_view name;
    std::string_view query;
    if (!TakeCString(rest, name) || !TakeCString(rest, query)) return false;
    // A name the client holds already: the origin answers 42P05 (OnParse).
    if (client_.Find(name) != nullptr) return false;
    frames.remove_prefix(f.size());
    if (!known_only) continue;
    // Only a statement the origin has parsed (and described) since the last
    // schema change it heard of: any other may fail, and its error belongs
    // at this Parse, as directly (libpq's PQprepare reports it).
    BuildStatementKey(query, rest, catalog_.scratch().key);
    AppendScope();
    const StatementRef known = catalog_.Find(catalog_.scratch().key);
    if (known == nullptr || !known->shape_known || known->retired) return false;
  }
  return false;
}

bool StatementSession::AnswerParseOnly(const protocol::Frame& frame, std::string& out) {
  if (frame.tag == 'S') {
    protocol::AppendFrame(out, 'Z', "I");
    return false;
  }
  std::string_view rest = frame.payload;
  std::string_view name;
  std::string_view query;
  if (frame.tag == 'P' && TakeCString(rest, name) && TakeCString(rest, query) && !name.empty()) {
    BuildStatementKey(query, rest, catalog_.scratch().key);
    AppendScope();
    StatementRef statement = catalog_.Intern(catalog_.scratch().key, query, rest);
    const bool reads_view = statement->reads_prepared_view;
    client_.Set(name, std::move(statement));
    // Parsed on the origin at its first use (Resolve), as a candidate; not
    // a text that reads pg_prepared_statements, which shows the client's
    // statements as they are before that use (ShowOwnStatements).
    if (!reads_view) client_.MarkUnconfirmed(name);
  }
  protocol::AppendFrame(out, '1', {});
  return true;
}

bool SameShape(std::string_view a, std::string_view b) {
  return a.empty() || b.empty() ? a == b : protocol::SameResultType(a, b);
}

bool StatementSession::OnShape(const Op& op, char tag, std::string_view payload, ConnectionStatements& conn) {
  const StatementInfo& statement = *op.statement;
  const std::string_view shape = tag == 'T' ? payload : std::string_view();
  if (op.shape_check) shape_check_pending_ = false;
  if (!statement.shape_known) {
    statement.shape.assign(shape.data(), shape.size());
    statement.shape_known = true;
    statement.shape_digest = protocol::ResultTypeDigest(shape);
    statement.shape_epoch = catalog_.epoch();
    if (op.fold_into != nullptr) FoldCandidate(op, conn);
    return true;
  }
  const bool same = SameShape(statement.shape, shape);
  if (same) {
    statement.shape_epoch = catalog_.epoch();
    if (op.verify && statement.retired) statement.retired = false;  // its original result type again
    return true;
  }
  if (!op.verify) return true;  // the client's own Describe: it now holds this shape itself
  // Its result type changed: fail it as PostgreSQL fails a cached plan
  // whose result type changed, for every client that holds its old shape.
  catalog_.Retire(op.statement.get(), StalePlanError());
  conn.Remove(op.statement.get());
  conn.pending_close.push_back(statement.server_name);
  return false;
}

void StatementSession::FoldCandidate(const Op& op, ConnectionStatements& conn) {
  const StatementRef& shared = op.fold_into;
  const StatementInfo& fresh = *op.statement;
  if (!shared->retired && shared->shape_known && SameShape(shared->shape, fresh.shape)) {
    // The shared statement describes what the client's own would: the
    // name uses it (it is where replays already are); the candidate goes.
    // Not where the connection lacks it: a replay there inside a failed
    // transaction block would fail (25P02) where the client's own
    // statement exists, so the client keeps its candidate.
    shared->shape_epoch = catalog_.epoch();
    if (!conn.Has(shared.get())) return;
    client_.Fold(op.client_order, op.statement.get(), shared);
    if (conn.Has(op.statement.get())) {
      conn.Remove(op.statement.get());
      conn.pending_close.push_back(fresh.server_name);
    }
    return;
  }
  // DDL the Endpoint did not see changed the text's result type after the
  // shared statement was made: it fails for the clients that hold it (as
  // their statements would directly), and the candidate, parsed after the
  // DDL as the client's statement was, becomes the text's statement.
  if (!shared->retired) catalog_.Retire(shared.get(), StalePlanError());
  if (conn.Has(shared.get())) {
    conn.Remove(shared.get());
    conn.pending_close.push_back(shared->server_name);
  }
  catalog_.Adopt(op.statement);
}

}  // namespace hyperpool::endpoint
