#include "endpoint/listen_state.h"

#include <algorithm>
#include <optional>
#include <string>

#include "cache/sql_analysis.h"
#include "protocol/codec.h"

namespace hyperpool::endpoint {
namespace {

void AppendQuotedIdentifier(std::string& out, std::string_view name) {
  out += '"';
  for (char c : name) {
    if (c == '"') out += c;
    out += c;
  }
  out += '"';
}

}  // namespace

bool MayListen(std::string_view sql) { return cache::ContainsCaseless(sql, "listen"); }

std::vector<ListenOp> ParseListenOps(std::string_view sql) {
  cache::SqlText text(sql);
  return ParseListenOps(text);
}

std::vector<ListenOp> ParseListenOps(const cache::SqlText& text) {
  std::vector<ListenOp> out;
  if (text.simple_read()) return out;  // cheap: most texts never reach the lexer
  // One plain statement that begins with another keyword (an UPDATE, a
  // BEGIN): no LISTEN or UNLISTEN can be inside it.
  if (const std::optional<std::string>& kw = text.leading_keyword(); kw && *kw != "listen" && *kw != "unlisten") {
    return out;
  }
  if (!MayListen(text.sql())) return out;
  // The parser's statements (already run for this text by the write pass):
  // channel names as the server's scanner makes them.
  const absl::StatusOr<cache::StatementAnalysis>& a = text.analysis();
  if (!a.ok()) return out;  // PostgreSQL rejects it too
  for (const auto& [kind, channel] : a->listens) {
    switch (kind) {
      case 'L':
        out.push_back({ListenOp::Kind::kListen, channel});
        break;
      case 'U':
        out.push_back({ListenOp::Kind::kUnlisten, channel});
        break;
      default:
        out.push_back({ListenOp::Kind::kUnlistenAll, {}});
        break;
    }
  }
  return out;
}

void ApplyListenOps(const std::vector<ListenOp>& ops, std::set<std::string>& channels) {
  for (const ListenOp& op : ops) {
    switch (op.kind) {
      case ListenOp::Kind::kListen:
        channels.insert(op.channel);
        break;
      case ListenOp::Kind::kUnlisten:
        channels.erase(op.channel);
        break;
      case ListenOp::Kind::kUnlistenAll:
        channels.clear();
        break;
    }
  }
}

// ----- ListenTracker ---------------------------------------------------------

void ListenTracker::AddToCurrentUnit(const std::vector<ListenOp>& ops) {
  if (ops.empty()) return;
  const std::uint64_t index = forwarded_units_ + 1;
  if (open_.empty() || open_.back().index != index) open_.push_back({index, {}});
  open_.back().ops.insert(open_.back().ops.end(), ops.begin(), ops.end());
}

void ListenTracker::NoteQuery(const cache::SqlText& text) {
  if (text.simple_read()) return;  // calls nothing, so listens on nothing
  // A text that never spells "listen" holds no LISTEN or UNLISTEN (nor a
  // pg_listening_channels call): ParseListenOps' own last check, made
  // first, so most texts never ask for their leading keyword here.
  if (!MayListen(text.sql())) return;
  connection_listened_ = true;
  AddToCurrentUnit(ParseListenOps(text));
}

void ListenTracker::OnFrontend(char tag, std::string_view payload, const cache::SqlText* text) {
  switch (tag) {
    case 'Q': {
      if (text != nullptr) {  // decoded once by the session
        NoteQuery(*text);
      } else if (auto q = protocol::DecodeQuery(payload); q.ok()) {
        NoteQuery(cache::SqlText(q->query));
      }
      ++forwarded_units_;
      break;
    }
    case 'P': {
      auto p = protocol::DecodeParse(payload);
      if (!p.ok()) break;
      cache::SqlText own(text != nullptr ? std::string_view() : p->query);
      const cache::SqlText& t = text != nullptr ? *text : own;
      if (!t.simple_read() && MayListen(t.sql())) connection_listened_ = true;
      std::vector<ListenOp> ops = ParseListenOps(t);
      if (ops.empty()) {
        if (statements_) statements_->erase(std::string(p->statement));
      } else {
        if (!statements_) statements_ = std::make_unique<std::unordered_map<std::string, std::vector<ListenOp>>>();
        (*statements_)[std::string(p->statement)] = std::move(ops);
      }
      break;
    }
    case 'B': {
      std::string_view rest = payload;
      std::string_view portal;
      std::string_view statement;
      if (!protocol::TakeCString(rest, portal) || !protocol::TakeCString(rest, statement)) break;
      if (!statements_) break;
      auto it = statements_->find(std::string(statement));
      if (it != statements_->end()) {
        connection_listened_ = true;
        AddToCurrentUnit(it->second);
      }
      break;
    }
    case 'S':
    case 'F':
      ++forwarded_units_;
      break;
    default:
      break;
  }
}

std::vector<ListenOp> ListenTracker::OnBackend(char tag, std::string_view payload) {
  if (tag == 'E') {
    doomed_ = true;
    return {};
  }
  if (tag == 'C') {
    auto c = protocol::DecodeCommandComplete(payload);
    if (c.ok() && c->tag == "ROLLBACK") doomed_ = true;
    return {};
  }
  if (tag != 'Z' || payload.empty()) return {};
  ++completed_units_;
  while (!open_.empty() && open_.front().index <= completed_units_) {
    pending_.insert(pending_.end(), open_.front().ops.begin(), open_.front().ops.end());
    open_.pop_front();
  }
  const char status = payload[0];
  if (status == 'E') doomed_ = true;
  if (status != 'I') return {};
  std::vector<ListenOp> committed;
  if (!doomed_) committed.swap(pending_);
  pending_.clear();
  doomed_ = false;
  return committed;
}

void ListenTracker::OnSkipped(std::size_t units) {
  completed_units_ = std::min(completed_units_ + units, forwarded_units_);
  while (!open_.empty() && open_.front().index <= completed_units_) open_.pop_front();
}

void ListenTracker::OnConnectionLost() {
  open_.clear();
  pending_.clear();
  doomed_ = false;
  completed_units_ = forwarded_units_;
  connection_listened_ = false;  // the connection is gone, and its LISTENs with it
}

// ----- ListenRegistry --------------------------------------------------------

ListenRegistry::Change ListenRegistry::Set(Subscriber subscriber, const std::set<std::string>& channels) {
  Change change;
  std::set<std::string> empty;
  auto it = by_subscriber_.find(subscriber);
  const std::set<std::string>& before = it == by_subscriber_.end() ? empty : it->second;
  for (const std::string& ch : before) {
    if (channels.count(ch) != 0) continue;
    auto c = by_channel_.find(ch);
    if (c == by_channel_.end()) continue;
    auto& subs = c->second;
    subs.erase(std::remove(subs.begin(), subs.end(), subscriber), subs.end());
    if (subs.empty()) {
      by_channel_.erase(c);
      change.to_unlisten.push_back(ch);
    }
  }
  for (const std::string& ch : channels) {
    if (before.count(ch) != 0) continue;
    auto& subs = by_channel_[ch];
    if (subs.empty()) change.to_listen.push_back(ch);
    subs.push_back(subscriber);
  }
  if (channels.empty()) {
    if (it != by_subscriber_.end()) by_subscriber_.erase(it);
  } else {
    by_subscriber_[subscriber] = channels;
  }
  return change;
}

const std::vector<ListenRegistry::Subscriber>& ListenRegistry::SubscribersOf(std::string_view channel) const {
  static const std::vector<Subscriber> kNone;
  auto it = by_channel_.find(channel);
  return it == by_channel_.end() ? kNone : it->second;
}

const std::set<std::string>& ListenRegistry::ChannelsOf(Subscriber subscriber) const {
  static const std::set<std::string> kNone;
  auto it = by_subscriber_.find(subscriber);
  return it == by_subscriber_.end() ? kNone : it->second;
}

bool ListenRegistry::Listens(Subscriber subscriber, std::string_view channel) const {
  const std::set<std::string>& mine = ChannelsOf(subscriber);
  return mine.find(std::string(channel)) != mine.end();
}

std::vector<std::string> ListenRegistry::Channels() const {
  std::vector<std::string> out;
  out.reserve(by_channel_.size());
  for (const auto& [ch, subs] : by_channel_) out.push_back(ch);
  return out;
}

std::string BuildListenerQuery(const ListenRegistry::Change& change) {
  std::string sql;
  for (const std::string& ch : change.to_unlisten) {
    sql += "UNLISTEN ";
    AppendQuotedIdentifier(sql, ch);
    sql += ';';
  }
  for (const std::string& ch : change.to_listen) {
    sql += "LISTEN ";
    AppendQuotedIdentifier(sql, ch);
    sql += ';';
  }
  return sql;
}

}  // namespace hyperpool::endpoint
