#pragma once
// LISTEN/NOTIFY in transaction mode without pinning: the bookkeeping that
// needs no I/O (unit-tested in tests/unit/endpoint/listen_state_test.cc;
// docs/architecture.md, "Session state").
//
// A session's LISTEN / UNLISTEN run on its lent connection (so errors and
// transaction semantics stay PostgreSQL's), but the Endpoint keeps the
// session's channel set itself and one listener connection per Endpoint
// (listener.h) LISTENs on the union of all sessions' channels:
//  - ParseListenOps reads the channel operations of a statement text;
//  - ListenTracker (one per session) attributes them to the unit of work
//    that ran them and hands them out only once that unit's transaction
//    committed (ReadyForQuery 'I' with no error and no ROLLBACK since the
//    transaction began), as PostgreSQL applies LISTEN at commit;
//  - ListenRegistry (one per Endpoint) maps channels to subscribers and says
//    when the listener connection must LISTEN or UNLISTEN a channel.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/sql_analysis.h"
#include "common/small_fifo.h"

namespace hyperpool::endpoint {

// One channel operation of a statement.
struct ListenOp {
  enum class Kind {
    kListen,       // LISTEN channel
    kUnlisten,     // UNLISTEN channel
    kUnlistenAll,  // UNLISTEN *
  };
  Kind kind = Kind::kListen;
  std::string channel;  // as PostgreSQL names it (see ParseListenOps); empty for kUnlistenAll
  bool operator==(const ListenOp&) const = default;
};

// The LISTEN / UNLISTEN statements of `sql` (one Query text or one Parse's
// text, possibly several statements), in order, lexed with the cache's
// PostgreSQL lexer: an unquoted channel name is lower-cased, a quoted one
// keeps its case, and both are truncated to 63 bytes (NAMEDATALEN - 1, at a
// UTF-8 character boundary) as PostgreSQL truncates identifiers. Text that
// does not lex, or a LISTEN without a channel, yields nothing (PostgreSQL
// rejects it).
std::vector<ListenOp> ParseListenOps(std::string_view sql);
std::vector<ListenOp> ParseListenOps(const cache::SqlText& text);

// True if `sql` may make a connection LISTEN by any route, including ones
// the parser cannot see (a DO block or function running EXECUTE 'LISTEN
// ...'): it contains the word "listen" anywhere, case-insensitively. Such a
// connection runs UNLISTEN * before it goes back to the pool.
bool MayListen(std::string_view sql);

// A session's channel set after applying `ops` in order.
void ApplyListenOps(const std::vector<ListenOp>& ops, std::set<std::string>& channels);

// Per session: which channel operations have been committed. Frontend
// messages are reported as they are forwarded to the origin, backend ones as
// they come back; each Query, Sync or FunctionCall forwarded ends a unit,
// each ReadyForQuery from the origin completes the oldest open unit.
class ListenTracker {
 public:
  // Reports a frontend message forwarded to the origin: 'Q' (its text's
  // operations join the current unit), 'P' (remembered by statement name),
  // 'B' (the bound statement's operations join the current unit), and 'Q',
  // 'S', 'F' end the unit. Others are ignored.
  // `text`: the Query's / Parse's text as the session decoded it (its
  // analysis shared), or null to decode it here.
  void OnFrontend(char tag, std::string_view payload, const cache::SqlText* text = nullptr);
  // Reports a backend message from the origin. An ErrorResponse or a
  // CommandComplete "ROLLBACK" dooms the current transaction's operations
  // (PostgreSQL discards pending LISTENs on abort; a ROLLBACK TO SAVEPOINT is
  // treated as a rollback of the whole transaction's operations, erring on
  // the side of not subscribing). At ReadyForQuery 'I' the committed
  // operations of the completed units are returned (and forgotten); at 'T'
  // they wait for the transaction's end; at 'E' they are doomed.
  std::vector<ListenOp> OnBackend(char tag, std::string_view payload);
  // The origin skipped the `units` oldest units not yet completed (an
  // extended message before their Query failed): they complete with no
  // ReadyForQuery, and their operations never ran.
  void OnSkipped(std::size_t units);
  // The origin connection was lost: whatever was not yet committed is
  // forgotten (its outcome is unknown; PostgreSQL rolls it back).
  void OnConnectionLost();
  // True if a message forwarded on the current connection may have made it
  // LISTEN (MayListen); cleared by ClearConnectionListened.
  bool connection_listened() const { return connection_listened_; }
  // Nothing open, pending or noted: as a new session's (SessionCore::CanSleep).
  bool Idle() const {
    return open_.empty() && pending_.empty() && !doomed_ && !connection_listened_ && (!statements_ || statements_->empty());
  }
  void ClearConnectionListened() { connection_listened_ = false; }

 private:
  struct Unit {
    std::uint64_t index = 0;
    std::vector<ListenOp> ops;
  };
  void AddToCurrentUnit(const std::vector<ListenOp>& ops);
  // A simple Query's text: whether it may LISTEN, and the ops it does.
  void NoteQuery(const cache::SqlText& text);

  std::uint64_t forwarded_units_ = 0;  // Query/Sync/FunctionCall forwarded
  std::uint64_t completed_units_ = 0;  // ReadyForQuery seen
  SmallFifo<Unit> open_;               // units not yet completed, with operations
  std::vector<ListenOp> pending_;      // completed, waiting for the transaction's end
  bool doomed_ = false;                // the current transaction will not commit
  bool connection_listened_ = false;
  // By client statement name; made by the first Parse that LISTENs (most
  // sessions never do, and an empty map is 56 bytes).
  std::unique_ptr<std::unordered_map<std::string, std::vector<ListenOp>>> statements_;
};

// Per Endpoint: channel -> subscribers. Pure bookkeeping; the listener
// connection acts on what it returns.
class ListenRegistry {
 public:
  using Subscriber = std::uint64_t;

  // `subscriber`'s channel set becomes `channels`. Returns the channels the
  // listener connection must newly LISTEN on (`to_listen`) and those no one
  // listens on any more (`to_unlisten`).
  struct Change {
    std::vector<std::string> to_listen;
    std::vector<std::string> to_unlisten;
    bool empty() const { return to_listen.empty() && to_unlisten.empty(); }
  };
  Change Set(Subscriber subscriber, const std::set<std::string>& channels);
  // The subscriber is gone (session end): same as Set(subscriber, {}).
  Change Remove(Subscriber subscriber) { return Set(subscriber, {}); }

  // Everyone listening on `channel`, in subscription order; empty if none.
  const std::vector<Subscriber>& SubscribersOf(std::string_view channel) const;
  // `subscriber`'s channel set.
  const std::set<std::string>& ChannelsOf(Subscriber subscriber) const;
  bool Listens(Subscriber subscriber, std::string_view channel) const;
  // Every channel someone listens on (what a new listener connection LISTENs).
  std::vector<std::string> Channels() const;
  std::size_t channel_count() const { return by_channel_.size(); }

 private:
  std::map<std::string, std::vector<Subscriber>, std::less<>> by_channel_;
  std::unordered_map<Subscriber, std::set<std::string>> by_subscriber_;
};

// The SQL for the listener connection: LISTEN / UNLISTEN of each channel as
// a quoted identifier, one simple Query text ("" if `change` is empty).
std::string BuildListenerQuery(const ListenRegistry::Change& change);

}  // namespace hyperpool::endpoint
