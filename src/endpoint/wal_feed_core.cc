#include "endpoint/wal_feed_core.h"

#include <algorithm>
#include <variant>

namespace hyperpool::endpoint {
namespace {

// WAL page and segment headers (PostgreSQL's defaults: 8 kB pages, 16 MB
// segments). pg_current_wal_insert_lsn() right after a page boundary points
// past the next page's header, where no record ends; the walsender's
// position is then the boundary itself. Only records shorter than a header
// (never a commit) could hide in that gap.
constexpr protocol::Lsn kPageSize = 8192;
constexpr protocol::Lsn kSegmentSize = 16u << 20;
constexpr protocol::Lsn kShortPageHeader = 24;
constexpr protocol::Lsn kLongPageHeader = 40;

protocol::Lsn RecordEndAtOrBefore(protocol::Lsn insert) {
  if (insert % kSegmentSize == kLongPageHeader) return insert - kLongPageHeader;
  if (insert % kPageSize == kShortPageHeader) return insert - kShortPageHeader;
  return insert;
}

}  // namespace

std::string_view WalFeedStateName(WalFeedState state) {
  switch (state) {
    case WalFeedState::kOff: return "off";
    case WalFeedState::kConnecting: return "connecting";
    case WalFeedState::kStreaming: return "streaming";
    case WalFeedState::kUnavailable: return "unavailable";
  }
  return "unknown";
}

WalFeedCore::WalFeedCore(Options options) : options_(options) {
  if (options_.mode != WalInvalidation::kOff) state_ = WalFeedState::kConnecting;
}

void WalFeedCore::Transition(WalFeedState next, Clock::time_point now) {
  if (options_.mode == WalInvalidation::kOff) return;  // stays kOff
  if (next == WalFeedState::kStreaming) {
    // A new slot: nothing before it is known (the driver invalidates all).
    streaming_since_ = now;
    fresh_as_of_ = {};
    probes_.clear();
    seen_ = 0;
    counters_.applied = counters_.acked = 0;
    in_transaction_ = false;
    txn_ = FeedChanges{};
    committed_ = FeedChanges{};
    reply_due_ = false;
    last_ack_ = {};
  }
  if (next != WalFeedState::kStreaming) {
    probes_.clear();
    fresh_as_of_ = {};
  }
  state_ = next;
}

absl::Status WalFeedCore::OnCopyData(std::string_view payload, Clock::time_point now) {
  absl::StatusOr<protocol::ReplicationMessage> m = protocol::DecodeReplicationMessage(payload);
  if (!m.ok()) return m.status();
  ++counters_.messages;
  counters_.bytes += payload.size();
  counters_.last_message = now;
  if (const auto* k = std::get_if<protocol::PrimaryKeepalive>(&*m)) {
    seen_ = std::max(seen_, k->wal_end);
    if (k->reply_requested) reply_due_ = true;
    return absl::OkStatus();
  }
  const auto& x = std::get<protocol::XLogData>(*m);
  OnLine(x.data);
  // For a logical walsender the start is the change's LSN (a COMMIT's: the
  // end of its record): every commit before it has been sent already.
  seen_ = std::max(seen_, x.wal_start);
  return absl::OkStatus();
}

void WalFeedCore::OnLine(std::string_view line) {
  using Kind = protocol::TestDecodingLine::Kind;
  absl::StatusOr<protocol::TestDecodingLine> l = protocol::ParseTestDecodingLine(line);
  if (!l.ok()) {
    // Some table changed and its name cannot be read: everything.
    txn_.all = true;
    txn_changed_ = true;
    return;
  }
  switch (l->kind) {
    case Kind::kBegin:
      in_transaction_ = true;
      txn_changed_ = false;
      txn_ = FeedChanges{};
      break;
    case Kind::kChange:
    case Kind::kTruncate:
      txn_changed_ = true;
      for (protocol::RelationName& r : l->relations) {
        if (std::find(txn_.relations.begin(), txn_.relations.end(), r) == txn_.relations.end()) {
          txn_.relations.push_back(std::move(r));
        }
      }
      break;
    case Kind::kMessage:
      txn_changed_ = true;  // a logical message alone changes no table
      break;
    case Kind::kCommit: {
      if (!txn_changed_) {
        // Decoded but nothing shown: only catalog rows changed (DDL, GRANT,
        // ANALYZE, a temporary table's creation).
        txn_.all = true;
        txn_.catalog = true;
      }
      committed_.all = committed_.all || txn_.all;
      committed_.catalog = committed_.catalog || txn_.catalog;
      for (protocol::RelationName& r : txn_.relations) {
        if (std::find(committed_.relations.begin(), committed_.relations.end(), r) == committed_.relations.end()) {
          committed_.relations.push_back(std::move(r));
        }
      }
      ++committed_.transactions;
      ++counters_.transactions;
      txn_ = FeedChanges{};
      in_transaction_ = false;
      txn_changed_ = false;
      break;
    }
    case Kind::kOther:
      break;
  }
}

FeedChanges WalFeedCore::TakeCommitted() {
  FeedChanges out = std::move(committed_);
  committed_ = FeedChanges{};
  return out;
}

void WalFeedCore::MarkApplied(Clock::time_point now) {
  (void)now;
  counters_.applied = std::max(counters_.applied, seen_);
  while (!probes_.empty() && probes_.front().position <= counters_.applied) {
    fresh_as_of_ = std::max(fresh_as_of_, probes_.front().started);
    probes_.pop_front();
  }
}

bool WalFeedCore::AppendAck(std::string& out, Clock::time_point now, int64_t pg_now_micros, bool force,
                            bool request_reply) {
  if (state_ != WalFeedState::kStreaming) return false;
  const bool advanced = counters_.applied > counters_.acked;
  const bool due = reply_due_ || force || request_reply || (advanced && now - last_ack_ >= options_.ack_every);
  if (!due) return false;
  protocol::AppendStandbyStatusUpdate(out, counters_.applied, pg_now_micros, request_reply);
  counters_.acked = counters_.applied;
  last_ack_ = now;
  reply_due_ = false;
  return true;
}

bool WalFeedCore::AddProbe(Clock::time_point started, protocol::Lsn insert_position) {
  if (state_ != WalFeedState::kStreaming || started < streaming_since_) return false;
  const protocol::Lsn position = RecordEndAtOrBefore(insert_position);
  if (position <= counters_.applied) {
    fresh_as_of_ = std::max(fresh_as_of_, started);
    return true;
  }
  if (!probes_.empty() && probes_.back().position > position) return false;  // out of order: ignore
  probes_.push_back(Probe{started, position});
  if (probes_.size() > 64) probes_.pop_front();  // the oldest cannot make us fresher than a newer one
  return false;
}

std::chrono::milliseconds WalFeedCore::Lag(Clock::time_point now) const {
  if (state_ != WalFeedState::kStreaming) return std::chrono::milliseconds(0);
  const Clock::time_point since = fresh_as_of_ == Clock::time_point{} ? streaming_since_ : fresh_as_of_;
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - since);
}

bool WalFeedCore::ServeCached(Clock::time_point now) const { return WillServe(now, std::chrono::milliseconds(0)); }

bool WalFeedCore::ByMaxAge() const {
  if (state_ == WalFeedState::kOff) return true;
  if (options_.mode != WalInvalidation::kAuto) return false;  // on: the feed is required
  // auto: the origin does not allow the feed (kUnavailable), or no stream
  // has started yet, so it is not known whether it does (or the origin is
  // down): max age as without the feed; whatever is cached then is dropped
  // when the first stream starts. After one, a break (kConnecting) serves
  // nothing until the feed is back and fresh.
  return state_ == WalFeedState::kUnavailable || (state_ == WalFeedState::kConnecting && !EverStreamed());
}

bool WalFeedCore::WillServe(Clock::time_point now, std::chrono::milliseconds ahead) const {
  if (ByMaxAge()) return true;
  return state_ == WalFeedState::kStreaming && fresh_as_of_ != Clock::time_point{} &&
         now + ahead - fresh_as_of_ < options_.bound;
}

std::chrono::milliseconds WalFeedCore::Budget(Clock::time_point now) const {
  if (ByMaxAge()) return std::chrono::milliseconds::max();
  if (!ServeCached(now)) return std::chrono::milliseconds(0);
  return std::chrono::duration_cast<std::chrono::milliseconds>(fresh_as_of_ + options_.bound - now);
}

bool WalFeedCore::OverHardLimit(Clock::time_point now) const {
  return state_ == WalFeedState::kStreaming && Lag(now) > options_.hard_limit;
}

}  // namespace hyperpool::endpoint
