#pragma once
// Protocol-level prepared statements through a transaction pool: the
// bookkeeping, with no I/O (unit-tested in
// tests/unit/endpoint/statement_registry_test.cc).
//
// A client's named statement ("S_1", "_pg3_0", "__asyncpg_stmt_1__") never
// reaches the origin under its own name: two clients may use one name for
// different texts on one origin connection (42P05 "already exists"), and a
// statement made on one connection is missing on the next one the client
// gets (26000 "does not exist"). Instead:
//  - StatementCatalog (one per Endpoint) gives each distinct statement
//    identity -- the full query text plus the parameter type OIDs, never a
//    hash alone (Odyssey's 32-bit hash names collided) -- one server-side
//    name "hp_<n>";
//  - ClientStatements (one per Endpoint session) maps the client's names to
//    identities, and remembers its current unnamed statement;
//  - ConnectionStatements (one per origin connection, it lives and dies
//    with it) knows which server names exist on that backend, bounded with
//    LRU eviction (the evicted one is closed on the origin).
// StatementSession (statement_session.h) uses these to rewrite the frontend
// stream and to match the origin's answers.

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace hyperpool::endpoint {

// One distinct prepared statement (its identity and server-side name).
// Immutable once made; shared by the clients that use it and the
// connections where it exists.
struct StatementInfo {
  // The identity: Int16 parameter count, the Int32 OIDs (as on the wire in
  // Parse), then the query text. Equal keys <=> same statement.
  std::string key;
  // "hp_<n>", unique per Endpoint for its lifetime (never reused, so a stale
  // name can never mean another text).
  std::string server_name;
  // The complete Parse frame ('P') that creates it under server_name.
  std::string parse_frame;
  // The catalog's schema epoch when it was made (StatementCatalog::SchemaChanged).
  std::uint64_t epoch = 0;
  // The origin said its result type changed (0A000): a client name still
  // mapped to it fails with 0A000 everywhere, also where it would be
  // re-prepared (Endpoint executor only).
  mutable bool retired = false;
  // The origin's ErrorResponse payload that retired it, replayed verbatim
  // (drivers recognise it by its fields: asyncpg by R = RevalidateCachedQuery).
  mutable std::string stale_error;
  // The result shape the origin described for it first: a RowDescription
  // payload ('T') or "" for NoData, once `shape_known`. What every client
  // mapped to it may have been told; a re-Parse on another connection must
  // describe the same shape, else the driver would decode rows of another
  // shape (StatementSession's shape check).
  mutable std::string shape;
  mutable bool shape_known = false;
  // protocol::ResultTypeDigest(shape), once `shape_known`: the query
  // cache's key part for a Bind of it (cache::CandidateUnit::result_type).
  mutable std::uint64_t shape_digest = 0;
  // The catalog epoch at which `shape` was last confirmed (made or checked);
  // a re-Parse after a later schema change is checked first.
  mutable std::uint64_t shape_epoch = 0;
  // Its text reads pg_prepared_statements (ReadsPreparedView): running it
  // first shows the client its own statements only (StatementSession).
  bool reads_prepared_view = false;
  // Its text may drop every prepared statement (DropsStatements): messages
  // pipelined behind a run of it wait for its answer (StatementSession::MustWait).
  bool drops_statements = false;
  // Its text is "EXECUTE hp_<n> ...": the statement that runs it must exist
  // on a connection before it does (StatementSession, SQL EXECUTE of a
  // protocol-level name).
  mutable std::shared_ptr<const StatementInfo> runs;

  std::string_view query() const;
};
using StatementRef = std::shared_ptr<const StatementInfo>;

// Whether `sql` may read the pg_prepared_statements view (or its function
// pg_prepared_statement()): a case-insensitive search for the name, so a
// comment or a string mentioning it counts too (the cost of a false positive
// is a few hidden Closes and Parses).
bool ReadsPreparedView(std::string_view sql);
// Whether `sql` may drop prepared statements (DEALLOCATE, DISCARD): a
// conservative test of the text (a false positive costs a wait, no more).
bool DropsStatements(std::string_view sql);

// Builds the identity key of a Parse into `key` (reusing its capacity):
// `types_raw` is the Parse's parameter section exactly as on the wire
// (Int16 count followed by the Int32 OIDs).
void BuildStatementKey(std::string_view query, std::string_view types_raw, std::string& key);

// Per Endpoint: one server name per distinct statement identity. Entries
// are weak: a statement nobody uses (no client maps it, no connection has
// it) is forgotten and gets a fresh name if it comes back.
class StatementCatalog {
 public:
  explicit StatementCatalog(std::string prefix = "hp_") : prefix_(std::move(prefix)) {}

  // The statement with identity `key` (see BuildStatementKey), made with a
  // fresh server name if unknown, retired, or made before the last schema
  // change. `query` and `types_raw` are what the key was built from (used
  // to encode the Parse frame on first use).
  StatementRef Intern(std::string_view key, std::string_view query, std::string_view types_raw);
  // The statement Intern(key, ...) would return now if it exists (null if
  // it would make a new one). Changes nothing.
  StatementRef Find(std::string_view key) const;

  // DDL went through the Endpoint (CREATE / ALTER / DROP): a statement
  // parsed before it may now have another result type, and PostgreSQL
  // answers a Bind of it with "cached plan must not change result type"
  // (0A000). A client's later Parse of the same text therefore gets a new
  // server statement, as it would on a direct connection; names the client
  // mapped before keep their statement (and fail as they would directly).
  void SchemaChanged() { ++epoch_; }
  // The origin reported 0A000 for `statement`: later Parses of its text get
  // a new server statement (DDL that bypassed the Endpoint).
  void Retire(const StatementInfo* statement, std::string_view error_payload);
  // A client's own Parse of a text whose statement already has a described
  // shape (StatementSession's candidate): a new statement of `like`'s
  // identity under a fresh server name, not the one Intern returns. The
  // origin parses it as the client's statement now, so it cannot carry a
  // result type from before DDL that bypassed the Endpoint.
  StatementRef Candidate(const StatementInfo& like);
  // `statement` (a candidate whose shape differed from the interned one's)
  // is what Intern returns for its identity from now on, unless a live
  // statement of this epoch that is not retired holds the place.
  void Adopt(const StatementRef& statement);
  std::uint64_t epoch() const { return epoch_; }

  // A fresh id for a client's unnamed statement (unique per Endpoint, never 0).
  std::uint64_t NextUnnamedId() { return ++unnamed_counter_; }

  // Identities currently known (live or not yet pruned).
  std::size_t size() const { return by_key_.size(); }
  // Statements made so far (the counter behind the server names).
  std::uint64_t created() const { return counter_; }

  // Scratch space for the sessions' statement work (StatementSession), one
  // per catalog, as the catalog is confined to one executor: nothing here
  // outlives one synchronous call of a session, so an idle session keeps
  // no scratch buffers of its own.
  struct Scratch {
    std::string key;        // a statement key
    std::string name;       // a DEALLOCATE / EXECUTE name
    std::string exec_text;  // RewriteExecute's text
    std::vector<StatementRef> evicted;
    std::vector<StatementRef> own;
  };
  Scratch& scratch() { return scratch_; }

 private:
  void PruneExpired();
  // A new statement of that identity under a fresh server name.
  std::shared_ptr<StatementInfo> Make(std::string_view key, std::string_view query, std::string_view types_raw);

  std::string prefix_;
  std::uint64_t counter_ = 0;
  std::uint64_t unnamed_counter_ = 0;
  std::uint64_t epoch_ = 0;
  std::size_t prune_at_ = 64;
  absl::flat_hash_map<std::string, std::weak_ptr<const StatementInfo>> by_key_;
  Scratch scratch_;
};

// Per client session: the client's statement names and its unnamed statement.
class ClientStatements {
 public:
  // Records (or replaces) `name` -> `statement`. `name` is not "". Returns
  // the entry's order (EraseSetAt).
  std::uint64_t Set(std::string_view name, StatementRef statement);
  // Forgets the name whose statement was set with `order` (a Parse the
  // origin skipped after an error never made it), if it is still that one.
  void EraseSetAt(std::uint64_t order);
  // The name set with `order` maps to `from`: it maps to `to` instead (a
  // candidate folded into the shared statement of the same shape).
  void Fold(std::uint64_t order, const StatementInfo* from, const StatementRef& to);
  // Parse-only units (StatementSession::AnswerParseOnly) answer a Parse
  // without the origin: the name is unconfirmed until its first use, which
  // parses it on the origin as a candidate first. Takes the mark.
  void MarkUnconfirmed(std::string_view name);
  // Points `name` (known) at `statement`, keeping its order; returns it
  // (0 if the name is unknown).
  std::uint64_t Repoint(std::string_view name, StatementRef statement);
  // The statement the client calls `name`, or null.
  const StatementRef* Find(std::string_view name) const;
  // Find for a use of the name (Bind, Describe): also takes its
  // unconfirmed mark (MarkUnconfirmed) into `*unconfirmed`, and gives its
  // entry's order (NameAt).
  const StatementRef* FindForUse(std::string_view name, bool* unconfirmed, std::uint64_t* order);
  // The name whose entry has `order` ("" if none): for error texts, which
  // must name the statement the client used even when another of its names
  // shares the server statement.
  std::string_view NameAt(std::uint64_t order) const;
  // Forgets `name`; true if it was known.
  bool Erase(std::string_view name);
  // Forgets `name` as Erase does; returns its entry's order (0 if
  // unknown) and statement, for PutBack.
  std::uint64_t Take(std::string_view name, StatementRef* statement);
  // Puts back what Take took (a Close the origin skipped), order included.
  void PutBack(std::string_view name, StatementRef statement, std::uint64_t order) {
    named_.insert_or_assign(std::string(name), Named{std::move(statement), order});
  }
  // A name the client calls `statement` by ("" if none): for error texts.
  std::string_view NameOf(const StatementInfo* statement) const;
  // Forgets every named statement (DISCARD ALL / DEALLOCATE ALL).
  void Clear() { named_.clear(); }
  std::size_t size() const { return named_.size(); }
  // The distinct statements the client's names map to, in the order the
  // client prepared them (a name prepared again counts from then).
  void InOrder(std::vector<StatementRef>& out) const;

  // The unnamed statement: its Parse as the client sent it (re-sent
  // verbatim to a connection that lacks it) and a per-Endpoint id that
  // tells whether a connection's unnamed statement is this one.
  void SetUnnamed(std::string_view parse_frame, std::uint64_t id) {
    unnamed_parse_.assign(parse_frame.data(), parse_frame.size());
    unnamed_id_ = id;
  }
  void ForgetUnnamed() { unnamed_id_ = 0; }
  // Exchanges the unnamed statement with (`parse_frame`, `id`): a Parse('')
  // keeps the one it replaces, to put it back if the origin skips it.
  void SwapUnnamed(std::string& parse_frame, std::uint64_t& id) {
    unnamed_parse_.swap(parse_frame);
    std::swap(unnamed_id_, id);
  }
  // A simple Query destroys the unnamed statement ("Extended Query"): a
  // later Bind of it without a Parse fails, as directly. Returns its Parse
  // (moved out), for a caller that may put it back.
  std::string DropUnnamed() {
    unnamed_id_ = 0;
    return std::exchange(unnamed_parse_, std::string());
  }
  std::uint64_t unnamed_id() const { return unnamed_id_; }
  std::string_view unnamed_parse() const { return unnamed_parse_; }

 private:
  struct Named {
    StatementRef statement;
    std::uint64_t order = 0;   // when the client prepared it (Set)
    bool unconfirmed = false;  // MarkUnconfirmed
  };
  absl::flat_hash_map<std::string, Named> named_;
  std::uint64_t next_order_ = 0;
  std::string unnamed_parse_;
  std::uint64_t unnamed_id_ = 0;  // 0: none
};

// Per origin connection: which server statements exist on that backend.
class ConnectionStatements {
 public:
  static constexpr std::size_t kDefaultCapacity = 256;
  explicit ConnectionStatements(std::size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // True if the statement exists there; marks it most recently used.
  bool Touch(const StatementInfo* statement);
  // True if it exists there (no LRU update).
  bool Has(const StatementInfo* statement) const { return index_.contains(statement); }
  // Records that `statement` now exists there (most recently used). If that
  // exceeds the capacity, the least recently used ones are removed and
  // appended to `evicted` (the caller closes them on the origin).
  void Add(StatementRef statement, std::vector<StatementRef>* evicted);
  // Records that it no longer exists there (closed, or its Parse failed).
  void Remove(const StatementInfo* statement);
  // Every named statement is gone (DISCARD ALL, DEALLOCATE ALL).
  void Clear() {
    lru_.clear();
    index_.clear();
  }
  std::size_t size() const { return index_.size(); }
  std::size_t capacity() const { return capacity_; }
  // Every statement that exists there, most recently used first.
  const std::list<StatementRef>& members() const { return lru_; }

  // Id (ClientStatements::unnamed_id) of the unnamed statement the backend
  // has, 0 if none or unknown (reset whenever our work on it is done:
  // others may run simple Queries on it in between).
  std::uint64_t unnamed_id = 0;

  // Server statements to close at the next opportunity (e.g. after "cached
  // plan must not change result type": the next use re-prepares it).
  std::vector<std::string> pending_close;

 private:
  std::size_t capacity_;
  std::list<StatementRef> lru_;  // front: most recently used
  absl::flat_hash_map<const StatementInfo*, std::list<StatementRef>::iterator> index_;
};

}  // namespace hyperpool::endpoint
