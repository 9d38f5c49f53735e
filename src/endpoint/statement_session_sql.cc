// StatementSession's side of SQL-level statements that name protocol-level
// ones (statement_session.h): SQL EXECUTE of a name the client Parsed.
#include <cstddef>
#include <string>
#include <string_view>

#include "endpoint/statement_session.h"
#include "protocol/wire_writer.h"

namespace hyperpool::endpoint {

void StatementSession::EndOwnSyncGroup(std::size_t first, std::string& out) {
  protocol::AppendFrame(out, 'S', {});
  Push(Kind::kSync, Mode::kHidden);
  for (std::size_t i = head_ + first; i < ops_.size(); ++i) ops_[i].view_prep = true;
}

std::string_view StatementSession::RewriteExecute(std::string_view sql, ConnectionStatements& conn, std::string& out,
                                                  ReplayMode mode, StatementRef* runs) {
  std::size_t pos = 0;
  std::size_t len = 0;
  if (!ParseExecute(sql, catalog_.scratch().name, pos, len)) return sql;
  const StatementRef* ref = client_.Find(catalog_.scratch().name);
  if (ref == nullptr || (*ref)->retired) return sql;  // SQL-level PREPARE (pinned), or missing: as sent
  const StatementRef target = *ref;
  if (!conn.Touch(target.get())) {
    // A replay before a simple Query goes in a Sync group of its own: an
    // error in it would make the origin skip the Query.
    if (mode == ReplayMode::kNone) return sql;
    const std::size_t first = ops_.size() - head_;
    Replay(target, conn, out);
    if (mode == ReplayMode::kOwnSync) {
      for (std::size_t i = head_ + first; i < ops_.size(); ++i) ops_[i].view_only = true;
      EndOwnSyncGroup(first, out);
    }
  } else if (target->runs != nullptr && !conn.Touch(target->runs.get())) {
    return sql;  // (a statement that EXECUTEs another: not followed further)
  }
  catalog_.scratch().exec_text.assign(sql.substr(0, pos));
  catalog_.scratch().exec_text.append(target->server_name);
  catalog_.scratch().exec_text.append(sql.substr(pos + len));
  *runs = target;
  return catalog_.scratch().exec_text;
}

}  // namespace hyperpool::endpoint
