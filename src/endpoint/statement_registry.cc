#include "endpoint/statement_registry.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "cache/sql_analysis.h"
#include "endpoint/statement_session.h"
#include "protocol/wire_writer.h"

namespace hyperpool::endpoint {
namespace {

// Debian's abseil has its own absl::string_view: heterogeneous lookups need one.
absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

void SkipSpace(std::string_view& s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
}

// Consumes `word` (case-insensitive) followed by a non-identifier character or the end.
bool TakeKeyword(std::string_view& s, std::string_view word) {
  if (s.size() < word.size()) return false;
  for (std::size_t i = 0; i < word.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != word[i]) return false;
  }
  if (s.size() > word.size()) {
    const char c = s[word.size()];
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$') return false;
  }
  s.remove_prefix(word.size());
  return true;
}

}  // namespace

std::string_view StatementInfo::query() const {
  // key = Int16 n, n * Int32, query[, NUL, scope] (a query has no NUL).
  if (key.size() < 2) return {};
  const std::size_t n = (static_cast<unsigned char>(key[0]) << 8) | static_cast<unsigned char>(key[1]);
  const std::size_t skip = 2 + 4 * n;
  if (skip > key.size()) return {};
  std::string_view query = std::string_view(key).substr(skip);
  return query.substr(0, query.find('\0'));
}

void BuildStatementKey(std::string_view query, std::string_view types_raw, std::string& key) {
  key.clear();
  key.append(types_raw.data(), types_raw.size());
  key.append(query.data(), query.size());
}

StatementRef StatementCatalog::Intern(std::string_view key, std::string_view query, std::string_view types_raw) {
  auto it = by_key_.find(Absl(key));
  if (it != by_key_.end()) {
    if (StatementRef live = it->second.lock(); live && live->epoch == epoch_) return live;
  }
  StatementRef ref = Make(key, query, types_raw);
  if (it != by_key_.end()) {
    it->second = ref;
  } else {
    by_key_.emplace(std::string(key), ref);
    if (by_key_.size() >= prune_at_) PruneExpired();
  }
  return ref;
}

std::shared_ptr<StatementInfo> StatementCatalog::Make(std::string_view key, std::string_view query,
                                                      std::string_view types_raw) {
  auto info = std::make_shared<StatementInfo>();
  info->key.assign(key.data(), key.size());
  info->epoch = epoch_;
  info->server_name = prefix_ + std::to_string(++counter_);
  info->reads_prepared_view = ReadsPreparedView(query);
  info->drops_statements = DropsStatements(query);
  std::string payload;
  payload.reserve(info->server_name.size() + query.size() + types_raw.size() + 2);
  protocol::AppendCString(payload, info->server_name);
  protocol::AppendCString(payload, query);
  payload.append(types_raw.data(), types_raw.size());
  protocol::AppendFrame(info->parse_frame, 'P', payload);
  return info;
}

StatementRef StatementCatalog::Candidate(const StatementInfo& like) {
  // The types are the Parse frame's tail: 'P', length, name, query, types.
  const std::string_view query = like.query();
  auto info = Make(like.key, query,
                   std::string_view(like.parse_frame).substr(5 + like.server_name.size() + 1 + query.size() + 1));
  info->runs = like.runs;
  return info;
}

void StatementCatalog::Adopt(const StatementRef& statement) {
  auto it = by_key_.find(Absl(statement->key));
  if (it == by_key_.end()) {
    by_key_.emplace(statement->key, statement);
    if (by_key_.size() >= prune_at_) PruneExpired();
    return;
  }
  StatementRef live = it->second.lock();
  if (!live || live->retired || live->epoch != epoch_) it->second = statement;
}

StatementRef StatementCatalog::Find(std::string_view key) const {
  auto it = by_key_.find(Absl(key));
  if (it == by_key_.end()) return nullptr;
  StatementRef live = it->second.lock();
  return live && live->epoch == epoch_ ? live : nullptr;
}

void StatementCatalog::Retire(const StatementInfo* statement, std::string_view error_payload) {
  statement->retired = true;
  statement->stale_error.assign(error_payload.data(), error_payload.size());
  auto it = by_key_.find(Absl(statement->key));
  if (it == by_key_.end()) return;
  if (StatementRef live = it->second.lock(); live.get() == statement) by_key_.erase(it);
}

void StatementCatalog::PruneExpired() {
  absl::erase_if(by_key_, [](const auto& entry) { return entry.second.expired(); });
  prune_at_ = std::max<std::size_t>(64, 2 * by_key_.size());
}

std::uint64_t ClientStatements::Set(std::string_view name, StatementRef statement) {
  auto it = named_.find(Absl(name));
  if (it != named_.end()) {
    if (it->second.statement != statement) it->second.order = ++next_order_;
    it->second.statement = std::move(statement);
    it->second.unconfirmed = false;
    return it->second.order;
  }
  named_.emplace(std::string(name), Named{std::move(statement), ++next_order_});
  return next_order_;
}

void ClientStatements::Fold(std::uint64_t order, const StatementInfo* from, const StatementRef& to) {
  for (auto& [name, named] : named_) {
    if (named.order == order && named.statement.get() == from) {
      named.statement = to;
      return;
    }
  }
}

void ClientStatements::MarkUnconfirmed(std::string_view name) {
  auto it = named_.find(Absl(name));
  if (it != named_.end()) it->second.unconfirmed = true;
}

const StatementRef* ClientStatements::FindForUse(std::string_view name, bool* unconfirmed, std::uint64_t* order) {
  auto it = named_.find(Absl(name));
  if (it == named_.end()) return nullptr;
  *unconfirmed = std::exchange(it->second.unconfirmed, false);
  *order = it->second.order;
  return &it->second.statement;
}

std::string_view ClientStatements::NameAt(std::uint64_t order) const {
  for (const auto& [name, named] : named_) {
    if (named.order == order) return name;
  }
  return {};
}

std::uint64_t ClientStatements::Repoint(std::string_view name, StatementRef statement) {
  auto it = named_.find(Absl(name));
  if (it == named_.end()) return 0;
  it->second.statement = std::move(statement);
  return it->second.order;
}

void ClientStatements::EraseSetAt(std::uint64_t order) {
  absl::erase_if(named_, [order](const auto& entry) { return entry.second.order == order; });
}

const StatementRef* ClientStatements::Find(std::string_view name) const {
  auto it = named_.find(Absl(name));
  return it == named_.end() ? nullptr : &it->second.statement;
}

void ClientStatements::InOrder(std::vector<StatementRef>& out) const {
  std::vector<const Named*> all;
  all.reserve(named_.size());
  for (const auto& [name, named] : named_) all.push_back(&named);
  std::sort(all.begin(), all.end(), [](const Named* a, const Named* b) { return a->order < b->order; });
  out.clear();
  for (const Named* n : all) {
    if (std::find(out.begin(), out.end(), n->statement) == out.end()) out.push_back(n->statement);
  }
}

bool ReadsPreparedView(std::string_view sql) { return cache::ContainsCaseless(sql, "pg_prepared_statement"); }

bool DropsStatements(std::string_view sql) {
  // One pass (every simple Query is tested): each 'd' is compared with both words.
  auto lowered_at = [&](std::size_t at, std::string_view word) {
    if (sql.size() - at < word.size()) return false;
    for (std::size_t i = 0; i < word.size(); ++i) {
      if ((sql[at + i] | 0x20) != word[i]) return false;
    }
    return true;
  };
  for (std::size_t at = 0; at < sql.size(); ++at) {
    if ((sql[at] | 0x20) != 'd') continue;
    if (lowered_at(at, "deallocate") || lowered_at(at, "discard")) return true;
  }
  return false;
}

std::uint64_t ClientStatements::Take(std::string_view name, StatementRef* statement) {
  auto it = named_.find(Absl(name));
  if (it == named_.end()) return 0;
  const std::uint64_t order = it->second.order;
  *statement = std::move(it->second.statement);
  named_.erase(it);
  return order;
}

std::string_view ClientStatements::NameOf(const StatementInfo* statement) const {
  for (const auto& [name, named] : named_) {
    if (named.statement.get() == statement) return name;
  }
  return {};
}

bool ClientStatements::Erase(std::string_view name) {
  auto it = named_.find(Absl(name));
  if (it == named_.end()) return false;
  named_.erase(it);
  return true;
}

bool ConnectionStatements::Touch(const StatementInfo* statement) {
  auto it = index_.find(statement);
  if (it == index_.end()) return false;
  if (it->second != lru_.begin()) lru_.splice(lru_.begin(), lru_, it->second);
  return true;
}

void ConnectionStatements::Add(StatementRef statement, std::vector<StatementRef>* evicted) {
  const StatementInfo* key = statement.get();
  if (Touch(key)) return;
  lru_.push_front(std::move(statement));
  index_.emplace(key, lru_.begin());
  while (index_.size() > capacity_ && lru_.size() > 1) {
    StatementRef victim = std::move(lru_.back());
    lru_.pop_back();
    index_.erase(victim.get());
    if (evicted != nullptr) evicted->push_back(std::move(victim));
  }
}

void ConnectionStatements::Remove(const StatementInfo* statement) {
  auto it = index_.find(statement);
  if (it == index_.end()) return;
  lru_.erase(it->second);
  index_.erase(it);
}

namespace {

// A statement name as PostgreSQL reads it at the front of `s` (a quoted
// identifier, or an unquoted one folded to lower case), taken off `s`.
bool TakeStatementName(std::string_view& s, std::string& name) {
  name.clear();
  if (s.empty()) return false;
  if (s.front() == '"') {
    s.remove_prefix(1);
    for (;;) {
      if (s.empty()) return false;
      const char c = s.front();
      s.remove_prefix(1);
      if (c == '"') {
        if (!s.empty() && s.front() == '"') {
          name.push_back('"');
          s.remove_prefix(1);
          continue;
        }
        break;
      }
      name.push_back(c);
    }
    return !name.empty();
  }
  while (!s.empty()) {
    const unsigned char c = static_cast<unsigned char>(s.front());
    if (!(std::isalnum(c) || c == '_' || c == '$' || c >= 0x80)) break;
    name.push_back(c < 0x80 ? static_cast<char>(std::tolower(c)) : static_cast<char>(c));
    s.remove_prefix(1);
  }
  return !name.empty() && !std::isdigit(static_cast<unsigned char>(name.front()));
}

}  // namespace

bool ParseDeallocate(std::string_view sql, std::string& name) {
  std::string_view s = sql;
  SkipSpace(s);
  if (!TakeKeyword(s, "deallocate")) return false;
  SkipSpace(s);
  std::string_view after_prepare = s;
  if (TakeKeyword(after_prepare, "prepare")) {
    SkipSpace(after_prepare);
    // "DEALLOCATE prepare" alone deallocates a statement called prepare.
    if (!after_prepare.empty() && after_prepare.front() != ';') s = after_prepare;
  }
  std::string_view word = s;
  if (TakeKeyword(word, "all")) return false;
  if (!TakeStatementName(s, name)) return false;
  SkipSpace(s);
  if (!s.empty() && s.front() == ';') {
    s.remove_prefix(1);
    SkipSpace(s);
  }
  return s.empty();
}

bool ParseExecute(std::string_view sql, std::string& name, std::size_t& name_pos, std::size_t& name_len) {
  std::string_view s = sql;
  SkipSpace(s);
  if (!TakeKeyword(s, "execute")) return false;
  SkipSpace(s);
  name_pos = sql.size() - s.size();
  if (!TakeStatementName(s, name)) return false;
  name_len = sql.size() - s.size() - name_pos;
  return true;
}

}  // namespace hyperpool::endpoint
