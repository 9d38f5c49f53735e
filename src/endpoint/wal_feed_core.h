// The change feed's logic, sans I/O (docs/architecture.md, "Query cache" >
// "Invalidation from the origin's WAL"): what the replication stream's
// messages mean for the cache, how fresh the feed is, and when to
// acknowledge. The Asio driver (wal_feed.h) owns the connections and calls
// in; this class sees only bytes, WAL positions and times.
//
// Freshness. A logical walsender does not report the server's WAL end (its
// keepalives carry how far it has decoded), so the feed measures itself: a
// probe started at time t0 reads the origin's WAL insert position F (a
// plain SELECT on a connection of its own). Every commit acknowledged to
// its writer before t0 ends at or before F. Decoding is in WAL order and
// output in commit order, so once the stream has shown a position >= F
// (an XLogData's start or a keepalive's end) and everything before it has
// been applied, every such commit has been applied: the tiers are "fresh
// as of t0". The gate serves cached rows only while now - fresh_as_of is
// under the bound.
#ifndef HYPERPOOL_ENDPOINT_WAL_FEED_CORE_H_
#define HYPERPOOL_ENDPOINT_WAL_FEED_CORE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "hyperpool/options.h"
#include "protocol/logical_replication.h"

namespace hyperpool::endpoint {

enum class WalFeedState : uint8_t {
  kOff,          // wal_invalidation off: nothing runs
  kConnecting,   // logging in, creating the slot, starting replication, or waiting to retry
  kStreaming,    // START_REPLICATION answered: committed changes arrive
  kUnavailable,  // the origin refuses (no REPLICATION, wal_level, no test_decoding): retried slowly
};
std::string_view WalFeedStateName(WalFeedState state);

// What committed transactions changed, merged.
struct FeedChanges {
  // Unknown extent: a transaction that changed only the catalog (DDL, GRANT,
  // ANALYZE: test_decoding shows it as an empty BEGIN/COMMIT), or a line
  // whose relation names could not be read.
  bool all = false;
  bool catalog = false;  // the catalog may have changed (re-read it)
  std::vector<protocol::RelationName> relations;
  uint64_t transactions = 0;  // commits merged here
  bool any() const { return all || !relations.empty(); }
};

class WalFeedCore {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    WalInvalidation mode = WalInvalidation::kOff;
    std::chrono::milliseconds bound{100};        // serve while the lag is under this
    std::chrono::milliseconds hard_limit{10000}; // drop the slot past this lag
    std::chrono::milliseconds ack_every{10};     // acknowledge at most this often unasked
  };
  explicit WalFeedCore(Options options);

  const Options& options() const { return options_; }
  WalFeedState state() const { return state_; }
  // A stream has started at least once (the origin allows the feed).
  bool EverStreamed() const { return streaming_since_ != Clock::time_point{}; }

  // --- connection lifecycle (the one transition function) ---
  // Each returns nothing; the driver logs. kStreaming resets positions and
  // probes (a new slot starts where the origin is now).
  void Transition(WalFeedState next, Clock::time_point now);

  // --- the stream ---
  // One CopyData payload read from the replication connection. An error is
  // the peer's (the driver closes the connection).
  absl::Status OnCopyData(std::string_view payload, Clock::time_point now);
  // The changes of the transactions committed in what OnCopyData saw since
  // the last call; the caller applies them, then calls MarkApplied.
  FeedChanges TakeCommitted();
  // Everything seen so far is applied: resolves probes, advances the
  // position to acknowledge.
  void MarkApplied(Clock::time_point now);

  // A standby status update due now (the server asked, or the position
  // advanced and ack_every passed, or `force`); appends it to `out`.
  // `request_reply` asks the walsender for a keepalive (a probe waits).
  bool AppendAck(std::string& out, Clock::time_point now, int64_t pg_now_micros, bool force, bool request_reply);

  // --- freshness ---
  // A probe started at `started` read the origin's insert position.
  // True when it is already resolved (no reply needs requesting).
  bool AddProbe(Clock::time_point started, protocol::Lsn insert_position);
  bool probe_pending() const { return !probes_.empty(); }
  // Time of the newest probe resolved since streaming started; epoch if none.
  Clock::time_point fresh_as_of() const { return fresh_as_of_; }
  // The lag as measured: now - fresh_as_of (since streaming started if no
  // probe has resolved yet); zero when not streaming.
  std::chrono::milliseconds Lag(Clock::time_point now) const;
  // Whether the tiers may serve cached rows now (off: always; unavailable
  // under auto: always, by max age; otherwise streaming and lag < bound).
  bool ServeCached(Clock::time_point now) const;
  // ServeCached as it will be `ahead` from now if nothing arrives: the
  // driver drops the Client tiers that early (they serve without asking).
  bool WillServe(Clock::time_point now, std::chrono::milliseconds ahead) const;
  // How long ServeCached stays true if nothing arrives: max when the feed
  // does not limit serving (off, auto while unavailable), else what is left
  // of the bound (0 when shut).
  std::chrono::milliseconds Budget(Clock::time_point now) const;
  // Streaming and the lag is past the hard limit.
  bool OverHardLimit(Clock::time_point now) const;

  // --- counters (the driver publishes them) ---
  struct Counters {
    uint64_t transactions = 0;    // commits decoded
    uint64_t invalidations = 0;   // batches applied that invalidated something
    uint64_t messages = 0;        // CopyData messages read
    uint64_t bytes = 0;           // their payload bytes
    protocol::Lsn applied = 0;    // position applied (and acknowledged next)
    protocol::Lsn acked = 0;
    Clock::time_point last_message{};
  };
  const Counters& counters() const { return counters_; }
  void NoteInvalidation() { ++counters_.invalidations; }

 private:
  void OnLine(std::string_view line);
  // The cache works by max age, as without the feed (WillServe, Budget).
  bool ByMaxAge() const;

  Options options_;
  WalFeedState state_ = WalFeedState::kOff;
  Clock::time_point streaming_since_{};
  Clock::time_point fresh_as_of_{};
  Clock::time_point last_ack_{};
  bool reply_due_ = false;           // the server asked for a status update
  protocol::Lsn seen_ = 0;           // the highest position the stream has shown
  // The open transaction (BEGIN seen, COMMIT not yet).
  bool in_transaction_ = false;
  bool txn_changed_ = false;         // a table line or a message in it
  FeedChanges txn_;                  // its changes
  FeedChanges committed_;            // committed, not yet taken
  struct Probe {
    Clock::time_point started;
    protocol::Lsn position;
  };
  std::deque<Probe> probes_;  // in start order, positions non-decreasing
  Counters counters_;
};

}  // namespace hyperpool::endpoint

#endif  // HYPERPOOL_ENDPOINT_WAL_FEED_CORE_H_
