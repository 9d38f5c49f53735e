#include "endpoint/pin_budget.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "protocol/wire_reader.h"
#include "protocol/wire_writer.h"

namespace hyperpool::endpoint {
namespace {

constexpr std::uint32_t kTextOid = 25;
constexpr std::size_t kMaxParameters = 65535;

using protocol::TakeCString;

bool IsIdentChar(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') || c == '_' || u >= 0x80;
}

// The highest $n a statement text refers to (0 if none). A plain scan: a
// "$2" inside a string literal counts too, which at worst makes the
// rewritten statement expect a parameter more than the client binds (the
// Bind then fails instead of the Execute; still an error, nothing runs).
std::size_t HighestParameter(std::string_view sql) {
  std::size_t highest = 0;
  for (std::size_t i = 0; i < sql.size(); ++i) {
    if (sql[i] != '$' || (i > 0 && IsIdentChar(sql[i - 1]))) continue;
    std::size_t n = 0;
    std::size_t j = i + 1;
    while (j < sql.size() && sql[j] >= '0' && sql[j] <= '9' && n <= kMaxParameters) {
      n = n * 10 + static_cast<std::size_t>(sql[j] - '0');
      ++j;
    }
    if (j == i + 1 || (j < sql.size() && IsIdentChar(sql[j]))) continue;  // not $n ($tag$, $1abc)
    highest = std::max(highest, std::min(n, kMaxParameters));
  }
  return highest;
}

std::uint32_t ReadUint32(std::string_view s) { return protocol::LoadUint32(s.data()); }

}  // namespace

std::size_t EffectivePinnedBudget(std::size_t configured, std::size_t pool_size) {
  return configured > 0 ? configured : std::max<std::size_t>(1, pool_size);
}

void PinBudget::Give() {
  if (!waiters_.empty()) {
    Wake wake = std::move(waiters_.front().second);
    waiters_.pop_front();
    wake();  // the unit passes on: in_use_ stays
    return;
  }
  if (in_use_ > 0) --in_use_;
}

std::uint64_t PinBudget::Wait(Wake wake) {
  waiters_.emplace_back(++last_ticket_, std::move(wake));
  return last_ticket_;
}

bool PinBudget::Leave(std::uint64_t ticket) {
  for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
    if (it->first == ticket) {
      waiters_.erase(it);
      return true;
    }
  }
  return false;
}

namespace {

// A PL/pgSQL string literal's body: quotes doubled, and nothing that could
// end the DO block's dollar quote.
std::string Literal(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\'') out += '\'';
    if (c == '$') {
      out += "(dollar)";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string ErrorStatement(std::string_view sqlstate, std::string_view message, std::string_view hint) {
  std::string sql = fmt::format("DO $hyperpool$BEGIN RAISE EXCEPTION USING ERRCODE = '{}', MESSAGE = '{}'",
                                Literal(sqlstate), Literal(message));
  if (!hint.empty()) sql += fmt::format(", HINT = '{}'", Literal(hint));
  sql += "; END$hyperpool$";
  return sql;
}

std::string PinBudgetHint(std::size_t limit) {
  return fmt::format(
      "No pinned slot (max_pinned = {}) became free in time. Temporary tables, session advisory locks, WITH HOLD "
      "cursors, SET ROLE, SQL PREPARE and LISTEN pin a session to its own origin connection until it ends. End "
      "other pinned sessions, use the transaction-scoped form (e.g. pg_advisory_xact_lock), or raise max_pinned "
      "(hyperpool --max-pinned).",
      limit);
}

bool RewritePinningMessage(char tag, std::string_view payload, std::string_view statement, std::string& out) {
  std::string_view rest = payload;
  if (tag == 'Q') {
    std::string_view sql;
    if (!TakeCString(rest, sql)) return false;
    std::string body;
    protocol::AppendCString(body, statement);
    protocol::AppendFrame(out, 'Q', body);
    return true;
  }
  if (tag != 'P') return false;
  std::string_view name;
  std::string_view sql;
  if (!TakeCString(rest, name) || !TakeCString(rest, sql) || rest.size() < 2) return false;
  const std::size_t declared = (static_cast<unsigned char>(rest[0]) << 8) | static_cast<unsigned char>(rest[1]);
  rest.remove_prefix(2);
  if (rest.size() < 4 * declared) return false;
  const std::size_t count = std::max(declared, HighestParameter(sql));
  std::string body;
  protocol::AppendCString(body, name);
  protocol::AppendCString(body, statement);
  protocol::AppendInt16(body, static_cast<std::int16_t>(static_cast<std::uint16_t>(count)));
  for (std::size_t i = 0; i < count; ++i) {
    std::uint32_t oid = i < declared ? ReadUint32(rest.substr(4 * i, 4)) : 0;
    if (oid == 0) oid = kTextOid;  // a DO block infers nothing
    protocol::AppendInt32(body, static_cast<std::int32_t>(oid));
  }
  protocol::AppendFrame(out, 'P', body);
  return true;
}

}  // namespace hyperpool::endpoint
