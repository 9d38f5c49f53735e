#include "endpoint/pin_budget.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "protocol/frontend_messages.h"

namespace hyperpool::endpoint {
namespace {

constexpr std::uint32_t kTextOid = 25;
constexpr std::size_t kMaxParameters = 65535;

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
  if (tag == 'Q') {
    if (!protocol::DecodeQuery(payload).ok()) return false;
    protocol::Encode(protocol::Query{statement}, out);
    return true;
  }
  if (tag != 'P') return false;
  absl::StatusOr<protocol::Parse> parse = protocol::DecodeParse(payload);
  if (!parse.ok()) return false;
  const std::size_t declared = parse->parameter_types.size();
  const std::size_t count = std::max(declared, HighestParameter(parse->query));
  protocol::Parse rewritten{parse->statement, statement, {}};
  rewritten.parameter_types.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    protocol::Oid oid = i < declared ? parse->parameter_types[i] : 0;
    if (oid == 0) oid = kTextOid;  // a DO block infers nothing
    rewritten.parameter_types.push_back(oid);
  }
  protocol::Encode(rewritten, out);
  return true;
}

}  // namespace hyperpool::endpoint
