#pragma once
// The prepared-statement half of an Endpoint session, with no I/O: it
// rewrites the frontend messages a session sends to its lent origin
// connection and matches the origin's answers to them (unit-tested in
// tests/unit/endpoint/statement_registry_test.cc; the session in
// endpoint.cc calls OnFrontend from its link reader and OnBackend from its
// link writer).
//
// Frontend side (PostgreSQL docs, "Message Flow" > "Extended Query"):
//  - Parse "name": the client's name is mapped to the statement's server
//    name (statement_registry.h), sent as Parse "hp_<n>" (after Close of
//    any statement the LRU bound evicts). A text the catalog holds with a
//    described shape is Parsed as a candidate of its own and folded into
//    the shared statement once described the same (ParseCandidate); one
//    whose shared statement is on the connection, not described yet, is
//    dropped and its ParseComplete synthesised.
//  - Bind / Describe('S') of a mapped name: the name is rewritten to the
//    server name; if the connection lacks the statement, its Parse is sent
//    first in the same flight and that ParseComplete is swallowed. The same
//    for the unnamed statement (""), which does not survive onto another
//    connection.
//  - Close('S', mapped name): the mapping is forgotten (the shared server
//    statement stays) and CloseComplete is synthesised.
//  - DEALLOCATE <mapped name> in SQL (psycopg evicts its statements so):
//    the mapping is forgotten; the origin runs an empty query whose
//    EmptyQueryResponse is answered as CommandComplete "DEALLOCATE".
//  - Portals, COPY data and everything else pass unchanged.
// Backend side: every message forwarded or dropped has an entry in an
// ordered queue (kind + forwarded / synthetic / hidden); answers are matched
// to entries in order. Synthetic answers are emitted just before the first
// answer of a later message; hidden messages' answers are swallowed; after
// an ErrorResponse PostgreSQL skips everything until Sync, so the entries up
// to that Sync are dropped (and their effects on the connection's statement
// set undone). A Flush behind synthetic entries gets a hidden no-op Close
// ahead of it, whose answer carries the synthetic ones out.
//
// After DDL (statement_registry.h, SchemaChanged / Retire) a client's
// later Parse of a known text gets a new server statement; a name it mapped
// before keeps its statement and, once the origin has reported that
// statement's result type changed, gets 0A000 on every connection, as on a
// direct one -- drivers that re-prepare then (asyncpg, PgJDBC) recover.
//
// Every re-Parse of a statement on a connection that lacks it (a replay)
// carries a hidden Describe('S'); the first shape the origin describes for
// a statement is remembered and later replays must match it. After DDL
// seen by the Endpoint the replay is checked in its own round trip before
// the client's Bind is sent (StartShapeCheck), so a changed shape fails
// that Bind with 0A000 before it runs; otherwise (DDL that bypassed the
// Endpoint) a mismatch found in flight replaces the unit's answers up to
// its ReadyForQuery with that error (the unit did run on the origin).
//
// SQL-level PREPARE cannot be renamed: while the client has such statements
// (tracked from the CommandComplete tags PREPARE / DEALLOCATE / DEALLOCATE
// ALL / DISCARD ALL) pinned() is true and the session keeps its connection
// (PinReason::kPreparedSql).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "endpoint/statement_registry.h"
#include "protocol/frame_reader.h"
#include "protocol/sqlstate.h"

namespace hyperpool::endpoint {

// "cached plan must not change result type" is kSqlStateFeatureNotSupported
// (protocol/sqlstate.h).

// If `sql` is exactly one "DEALLOCATE [PREPARE] name" (not ALL), the name as
// PostgreSQL resolves it (unquoted: folded to lower case), written to
// `name`; else false.
bool ParseDeallocate(std::string_view sql, std::string& name);
// If `sql` starts with "EXECUTE name", that name as PostgreSQL resolves it,
// and where it is spelled in `sql` ([name_pos, name_pos + name_len)); else false.
bool ParseExecute(std::string_view sql, std::string& name, std::size_t& name_pos, std::size_t& name_len);

// Two RowDescription payloads (or "" for NoData) define the same result
// type (protocol::SameResultType), not the same bytes: a table dropped and
// re-created with the same columns has new table OIDs in its
// RowDescription, and PostgreSQL runs a statement of it as before.
bool SameShape(std::string_view a, std::string_view b);
// The ErrorResponse payload PostgreSQL sends when a statement's result type
// changed ("cached plan must not change result type", SQLSTATE 0A000,
// routine RevalidateCachedQuery).
std::string StalePlanError();

class StatementSession {
 public:
  explicit StatementSession(StatementCatalog& catalog) : catalog_(catalog) {}

  // A frontend frame (tagged) to send on the lent connection whose
  // statement set is `conn`: appends what to send instead (possibly the
  // frame unchanged, rewritten, preceded by injected messages, or nothing)
  // to `out`.
  void OnFrontend(const protocol::Frame& frame, ConnectionStatements& conn, std::string& out);

  enum class Verdict {
    kForward,  // forward the frame as received
    kDrop,     // swallowed (or replaced by what was appended to `out`)
  };
  // The session's name-resolution scope, part of every statement identity it
  // makes from now on: PostgreSQL re-plans a prepared statement whose
  // search_path (or role, through "$user" and row security) differs from
  // the one it was prepared under, so a statement another session prepared
  // under other names can change its result type here (0A000) where a
  // direct session would prepare its own. Empty for sessions that resolve
  // names as the login role with its startup search_path; they share.
  void set_scope(std::string scope) { scope_ = std::move(scope); }

  // A backend frame from that connection. First appends to `out` the
  // synthetic answers due before it; then says whether to forward it.
  Verdict OnBackend(const protocol::Frame& frame, ConnectionStatements& conn, std::string& out);
  // Whether OnBackend will swallow a backend frame with `tag` arriving now
  // as the answer to one of our own messages (a replayed Parse, the hidden
  // Describe that records a statement's shape) or a discarded unit's: such
  // frames are not the client's, so the query cache must not see them
  // either. Changes nothing. Errors are not counted as hidden (they reach
  // the client in some form).
  bool Hides(char tag) const;
  // The next ReadyForQuery answers a Sync of ours (ShowOwnStatements): the
  // caller hands it to OnBackend and to nobody else (it is not the client's).
  bool OwnsReady() const;

  // The lent connection went back to the pool or was lost: nothing is
  // pending on it any more.
  void Reset();
  // Nothing is pending: the queue gives its storage back (an idle session
  // keeps none; a unit's worth is made again by its first message).
  void ReleaseBuffers();

  // Parse-only units -- named Parses up to a Sync, as libpq's PQprepare
  // sends -- need no origin connection: the Parse is recorded and replayed
  // before the first Bind that needs it, so a client that prepares while
  // every connection is busy does not wait for one (pgbench -M prepared
  // prepares synchronously, in one thread for several clients, some of them
  // mid-transaction). A statement the origin rejects reports its error at
  // that Bind instead, so with `known_only` (the caller could get a
  // connection now) only statements the origin has parsed since the last
  // schema change heard of qualify: a text never seen goes to the origin
  // and fails at its Parse, as directly. True if `frames` (starting at a
  // Parse) holds such a unit completely, none of its names is one the
  // client holds already, and (with `known_only`) every statement is one
  // the origin parsed and described (StatementInfo::shape_known, not
  // retired) under the session's scope (set_scope first).
  bool IsParseOnlyUnit(std::string_view frames, bool known_only) const;
  // Answers one message of such a unit into `out`: ParseComplete for a
  // Parse (recording it), ReadyForQuery 'I' for the Sync. Returns true
  // while the unit goes on (false after the Sync).
  bool AnswerParseOnly(const protocol::Frame& frame, std::string& out);

  // Result-shape check (docs/architecture.md, "Prepared statements"): a
  // driver decodes rows with the RowDescription it was given when it
  // prepared, so a statement re-Parsed on a connection that lacks it must
  // describe the same shape. Call before OnFrontend for every frame. If
  // `frame` is a Bind / Describe('S') of a client name whose statement
  // `conn` lacks and the schema epoch moved since its shape was confirmed,
  // appends to `out` a hidden Parse + Describe('S') + Flush and returns
  // true: the caller sends it, waits until shape_check_pending() is false
  // (OnBackend resolves it), then calls OnFrontend(frame). A changed shape
  // retires the statement, so that frame fails with 0A000 "cached plan must
  // not change result type" before anything of it runs, as directly.
  bool StartShapeCheck(const protocol::Frame& frame, ConnectionStatements& conn, std::string& out);
  bool shape_check_pending() const { return shape_check_pending_; }

  // Pipelined Sync groups (docs/architecture.md, "Prepared statements"):
  // what a statement name means is decided when a message is sent, but an
  // earlier Sync group's Parse, Close, DEALLOCATE or DISCARD may still fail
  // or be skipped, or an earlier group may leave the transaction failed.
  // Within one Sync group that never matters (an error skips the rest of the
  // group); across groups it does. True if `frame` names a statement (Bind,
  // Describe('S'), Close('S'), Parse, EXECUTE or DEALLOCATE in SQL) whose
  // meaning depends on a message of an earlier group still unanswered, or is
  // a DEALLOCATE answered here while an earlier group's outcome is unknown:
  // the caller holds it (before StartShapeCheck and OnFrontend) and asks
  // again after each origin frame. The earlier group ended with a Sync or
  // Query already sent, so its answers come. Const; cheap when nothing
  // earlier is pending.
  bool MustWait(const protocol::Frame& frame, const ConnectionStatements& conn) const;
  // The origin reported an error and skips to a Sync not yet sent, or a
  // shape mismatch discards the unit's answers.
  bool skipping() const { return skipping_ || discarding_; }
  // The ErrorResponse OnBackend just took failed an extended-query message
  // (not a Query's or FunctionCall's own): the origin skips to the next Sync
  // (CopyTracker::OnSkipToSync counts what that skips). Reading clears it.
  bool TakeSkipStarted() { return std::exchange(skip_started_, false); }

  // SQL-level prepared statements exist: keep the connection (kPreparedSql).
  bool pinned() const { return sql_prepared_ > 0; }
  // Nothing the client made (no statement, unnamed included, no SQL
  // PREPARE), nothing pending: as a new session's (SessionCore::Releasable).
  bool Empty() const {
    return client_.size() == 0 && client_.unnamed_id() == 0 && client_.unnamed_parse().empty() && Quiet() &&
           scope_.empty();
  }
  // Nothing pending and nothing but what Kept holds: the client's
  // statements (names, unnamed) and their scope (SessionCore::CanSleep).
  bool Quiet() const {
    return head_ == ops_.size() && !skipping_ && !discarding_ && !shape_check_pending_ && !unnamed_is_dealloc_ &&
           !portal_is_dealloc_ && sql_prepared_ == 0;
  }
  // What a sleeping session keeps of a Quiet() one (SessionCore::Dormant):
  // the client's statements are replayed on whatever connection it
  // borrows next, as after any lend.
  struct Kept {
    ClientStatements client;
    std::string scope;
  };
  // (Null when there is nothing to keep: most sleeping sessions.)
  std::unique_ptr<Kept> TakeKept() {
    if (Empty()) return nullptr;
    return std::make_unique<Kept>(Kept{std::move(client_), std::move(scope_)});
  }
  void Restore(std::unique_ptr<Kept> kept) {
    if (kept == nullptr) return;
    client_ = std::move(kept->client);
    scope_ = std::move(kept->scope);
  }
  // A CommandComplete tag from the origin. Returns true if pinned() changed.
  bool OnCommandComplete(std::string_view tag, ConnectionStatements& conn);

  ClientStatements& client() { return client_; }
  const ClientStatements& client() const { return client_; }
  // Entries still waiting for their answers.
  std::size_t pending() const { return ops_.size() - head_; }

 private:
  void AppendScope() const;  // to the scratch key, after BuildStatementKey
  enum class Kind : std::uint8_t {
    kParse,
    kBind,
    kDescribeStatement,
    kDescribePortal,
    kExecute,
    kClose,
    kSync,
    kQuery,         // simple Query: everything up to its ReadyForQuery
    kFunctionCall,  // likewise
  };
  enum class Mode : std::uint8_t {
    kForwarded,  // sent; its answers go to the client
    kSynthetic,  // not sent; its answer is made here
    kHidden,     // sent by us; its answers are swallowed (errors excepted)
  };
  struct Op {
    Kind kind = Kind::kSync;
    Mode mode = Mode::kForwarded;
    bool unnamed = false;           // Parse/Bind of the unnamed statement
    bool translate_dealloc = false; // EmptyQueryResponse -> CommandComplete "DEALLOCATE"
    bool eviction = false;          // hidden Close of an evicted statement
    bool stale = false;             // Bind/Describe of a retired statement: its error becomes 0A000
    bool verify = false;            // hidden Describe('S') of a replay: its shape must match
    bool shape_check = false;       // ...of StartShapeCheck (nothing of the client's follows yet)
    bool view_only = false;         // ...of ShowOwnStatements: a changed shape retires, discards nothing
    bool view_prep = false;         // ShowOwnStatements' own Sync group: its errors are swallowed
    StatementRef statement;         // the server statement concerned, if any
    // The hidden Describe('S') of a candidate (`statement`, ParseCandidate):
    // the shared statement of its identity, which the client's name is
    // folded into when the origin describes the same shape.
    StatementRef fold_into;
    // A named Parse: the client name's entry it set (undone if skipped); a
    // Bind / Describe('S'): the entry it used (its error names that name).
    std::uint64_t client_order = 0;
    // A Close('S') or DEALLOCATE of a client name answered here: the entry
    // it took (`statement`, `close_name` and this order), put back if skipped.
    std::uint64_t put_back_order = 0;
    std::string close_name;         // hidden Close of a pending_close name; a client's Close / Bind: its name
    // A simple Query: the client's unnamed statement it destroyed, put back
    // if the origin skips the Query (an error before it, until Sync). A
    // Parse(''): the one it replaced (`unnamed_id`: the id it set), put
    // back if skipped, dropped if the Parse fails (PostgreSQL drops the old
    // unnamed statement before parsing the new one).
    bool dropped_unnamed = false;
    std::uint64_t dropped_unnamed_id = 0;
    std::uint64_t unnamed_id = 0;
    std::string dropped_unnamed_parse;
  };

  void Push(Kind kind, Mode mode, StatementRef statement = nullptr);
  // The client's Parse of name `name` (`mode`: kForwarded for its own Parse,
  // kHidden at the first use of a name a Parse-only unit answered) when
  // the interned statement `shared` already has a shape: the origin parses
  // a candidate under a fresh server name, as a direct connection parses
  // the client's statement now, and describes it (hidden). Its answer
  // (OnShape) folds the name into `shared` if the shape is the same, else
  // retires `shared` and makes the candidate the text's statement: DDL
  // that bypassed the Endpoint never fails a statement the client parsed
  // after it. Returns the candidate.
  StatementRef ParseCandidate(std::string_view name, StatementRef shared, Mode mode, ConnectionStatements& conn,
                              std::string& out);
  // OnShape for a candidate's Describe answer.
  void FoldCandidate(const Op& op, ConnectionStatements& conn);
  void Pop();
  // Sequence numbers (MustWait): the n-th message pushed since the session
  // began is n; it is answered (or dropped) once popped_ >= n.
  std::uint64_t LastSeq() const { return popped_ + (ops_.size() - head_); }
  // A message of an earlier Sync group, not answered yet.
  bool EarlierUnanswered(std::uint64_t seq) const { return seq > popped_ && seq <= last_boundary_; }
  // The transaction status at the start of the current Sync group is
  // known (every earlier group answered): status_.
  bool StatusKnown() const { return last_boundary_ <= popped_; }
  // The latest pending message that set or dropped client name `name`
  // ("": the unnamed statement); `native`: a Parse sent as the client's
  // (not answered here), so the origin holds its server statement exactly
  // when the client's name would exist directly.
  struct NameSet {
    std::uint64_t seq = 0;
    // The set before it: a later set in the current group (a hidden Close
    // of the raw name, EmitPendingCloses) must not hide one of an earlier
    // group whose outcome decides what the name means (PendingSet).
    std::uint64_t prev = 0;
    bool native = false;
  };
  void NoteSet(std::string_view name, bool native = false);
  // `name`'s NameSet if it is of an earlier Sync group and unanswered.
  const NameSet* PendingSet(std::string_view name) const;
  // Keeps the client's unnamed statement in `op` (a Parse('') or Close('')
  // replaces it), to put back if the origin skips `op` (PutBackUnnamed).
  void KeepUnnamed(Op& op) {
    op.dropped_unnamed = true;
    op.dropped_unnamed_id = 0;
    client_.SwapUnnamed(op.dropped_unnamed_parse, op.dropped_unnamed_id);
  }
  // The latest pending message that made or closed `statement` on the
  // connection (a Parse, a replay, an eviction's Close).
  void NoteMember(const StatementInfo* statement);
  std::uint64_t MemberSeq(const StatementInfo* statement) const;
  // MustWait for a message that uses client name `name` (Bind, Describe,
  // EXECUTE), and for SQL that names a statement (EXECUTE, DEALLOCATE).
  bool UseMustWait(std::string_view name, const ConnectionStatements& conn) const;
  bool SqlMustWait(std::string_view sql, const ConnectionStatements& conn) const;
  // A Bind / Describe sent while its name's Parse was pending keeps the
  // name (Op::close_name): that Parse may fail and take the name with it.
  // (Otherwise the op's client_order names it: a folded candidate's name
  // keeps its order.)
  void KeepNameForErrors(std::string_view name);
  // An error about `op`'s server statement ("hp_<n>"): appends it to `out`
  // naming the client's statement instead, as PostgreSQL would; false if
  // it does not name it.
  bool NameClientsStatement(const Op& op, std::string_view payload, std::string& out);
  // Emits the answers of the synthetic entries at the head of the queue.
  void EmitLeadingSynthetic(std::string& out);
  // Undoes what a dropped (never executed) entry assumed about `conn`.
  void UndoSkipped(Op& op, ConnectionStatements& conn);
  // A Parse('') or Close('') the origin skipped: the unnamed statement it
  // replaced (kept in `op`) is the client's again.
  void PutBackUnnamed(Op& op);
  // The unnamed statement `id` never existed on the origin (its Parse failed
  // or was skipped): pending messages that kept it to put back keep
  // (`instead`, `instead_id`) instead.
  void UnnamedNeverMade(std::uint64_t id, std::string_view instead, std::uint64_t instead_id);
  void OnError(Op& op, std::string_view payload, ConnectionStatements& conn);
  // The name to send for client statement `name` on `conn`; sends the
  // statement's Parse first (hidden) if `conn` lacks it. A retired statement
  // the connection lacks resolves to a name that does not exist (`*stale`):
  // the origin's error (and its rollback and skip-until-Sync) stands in for
  // the "cached plan must not change result type" a direct connection gives.
  std::string_view Resolve(std::string_view name, ConnectionStatements& conn, std::string& out,
                           StatementRef* statement, bool* stale, std::uint64_t* order);
  void AddToConnection(const StatementRef& statement, ConnectionStatements& conn, std::string& out);
  void EmitPendingCloses(ConnectionStatements& conn, std::string& out);
  void OnParse(const protocol::Frame& frame, ConnectionStatements& conn, std::string& out);
  void OnQuery(const protocol::Frame& frame, ConnectionStatements& conn, std::string& out);
  // Before a message that reads pg_prepared_statements: makes the
  // connection hold exactly the client's own statements (docs/architecture.md,
  // "Prepared statements"): every statement on it is closed (hidden), then
  // the client's are replayed in the order it prepared them.
  // With `sync` (the message starts a unit) the preparation is a Sync group
  // of its own, hidden, errors included (a statement of the client's that no
  // longer parses is then simply missing from the view).
  void ShowOwnStatements(ConnectionStatements& conn, std::string& out, bool sync);
  // Ends a Sync group of our own begun at pending index `first`: its
  // answers, errors included, go to nobody.
  void EndOwnSyncGroup(std::size_t first, std::string& out);
  // SQL "EXECUTE name" of a statement the client Parsed (asyncpg's
  // `prepare(name=...)` then `EXECUTE name`): the text with hyperpool's
  // server name instead, after a replay of the statement if `conn` lacks it;
  // `*runs` is then that statement. Otherwise `sql` unchanged.
  enum class ReplayMode : std::uint8_t {
    kInline,   // in the flight (a Parse: an error skips to the client's Sync)
    kOwnSync,  // in a Sync group of its own (a Query at a unit's start)
    kNone,     // not at all (a Query inside a unit: an error would skip it)
  };
  std::string_view RewriteExecute(std::string_view sql, ConnectionStatements& conn, std::string& out,
                                  ReplayMode mode, StatementRef* runs);
  // Nothing of the client's is outstanding before the next message.
  bool AtUnitStart() const;
  // Sends `statement`'s Parse (hidden) and a hidden Describe('S') of it that
  // records its shape, or verifies it if known.
  void Replay(const StatementRef& statement, ConnectionStatements& conn, std::string& out);
  // A 'T' / 'n' answering a Describe('S') of `op.statement`. False if it
  // verified a shape that differs: the statement was retired.
  bool OnShape(const Op& op, char tag, std::string_view payload, ConnectionStatements& conn);

  StatementCatalog& catalog_;
  ClientStatements client_;
  std::vector<Op> ops_;   // [head_, size): pending; reused (no allocation in steady state)
  std::size_t head_ = 0;
  bool skipping_ = false; // the origin skips until a Sync not yet sent (an error was seen)
  bool skip_started_ = false;  // TakeSkipStarted()
  bool discarding_ = false;  // a replay's shape differed mid-flight: drop answers until ReadyForQuery
  bool shape_check_pending_ = false;  // StartShapeCheck's answers are awaited
  bool unnamed_is_dealloc_ = false;  // the client's unnamed statement is an intercepted DEALLOCATE
  bool portal_is_dealloc_ = false;   // ...and the unnamed portal is bound to it
  std::size_t sql_prepared_ = 0;     // SQL-level PREPAREd statements the client holds
  // MustWait's bookkeeping (sequence numbers, LastSeq()):
  std::uint64_t popped_ = 0;         // messages answered or dropped
  std::uint64_t last_boundary_ = 0;  // the latest Sync / Query / FunctionCall pushed
  std::uint64_t last_sync_ = 0;      // the latest Sync: an error skips what follows it up to the next
  std::uint64_t unnamed_set_ = 0;    // the latest message that set or dropped the unnamed statement
  std::uint64_t all_set_ = 0;        // the latest whose group may drop every statement
  bool group_drops_ = false;         // the current group runs such a text (all_set_ at its Sync)
  char status_ = 'I';                // transaction status of the latest ReadyForQuery
  // NameSet per client name, and NoteMember's per statement, while any
  // message is pending (cleared when the queue empties).
  absl::flat_hash_map<std::string, NameSet> name_set_;
  absl::flat_hash_map<const StatementInfo*, std::uint64_t> member_set_;
  std::string scope_;                // set_scope()
  // (Scratch buffers are the catalog's: StatementCatalog::scratch().)
};

}  // namespace hyperpool::endpoint
