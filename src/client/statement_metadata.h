// Statement metadata at the Client (docs/architecture.md, "Statement
// metadata at the Client"): the ParameterDescription and RowDescription (or
// NoData) the origin returned for a Describe of a statement, kept so that a
// driver's next Parse + Describe(statement) of the same statement, from any
// app connection of this Client, is answered at once without a round trip.
//
// One store per Client, shared by the sessions of every worker under a mutex
// taken once per statement (a look-up at Parse, a store at the origin's
// answer), never per message.
//
// What keys an entry is everything that can change the answer: the database,
// the session's startup fingerprint (cache::HelloFingerprint: sessions whose
// name resolution a key cannot describe -- search_path, role, options -- are
// never given local answers and never store), the declared parameter type
// OIDs and the statement text. The origin role is the same for every session
// of a Client (one Endpoint, one origin login).
//
// Staleness: DDL seen by the Endpoint reaches every Client as an 'I' control
// message with `all` set, which drops every entry (InvalidateAll); an answer
// whose Describe was sent before that invalidation is refused (generation
// check). DDL made elsewhere is caught when the statement runs: the Client
// compares the origin's RowDescription with the one it promised
// (extended_session.h) and drops the entry on a mismatch.
#ifndef HYPERPOOL_CLIENT_STATEMENT_METADATA_H_
#define HYPERPOOL_CLIENT_STATEMENT_METADATA_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hyperpool::client {

// What the origin answered to Describe(statement).
struct StatementMetadata {
  std::string parameter_description;  // The whole 't' frame, as received.
  std::string row_description;        // The whole 'T' frame, or the 'n' (NoData) frame.
  // Running the statement and discarding its result is harmless (a plain
  // read, or a statement that returns no rows: its NoData cannot change), so
  // its Parse may be deferred to the Bind (extended_session.h).
  bool deferrable = false;
};

struct StatementMetadataStats {
  uint64_t entries = 0;
  uint64_t stores = 0;
  uint64_t local_answers = 0;   // Parse/Describe flights answered with no round trip
  uint64_t mismatches = 0;      // promised RowDescription differed at execution: 0A000
  uint64_t deferred_failures = 0;  // a deferred Parse failed at the origin
  uint64_t invalidations = 0;   // 'I' all messages applied
};

// The store's key for one statement (length-prefixed fields, so no two
// inputs share a key).
std::string StatementMetadataKey(std::string_view database, std::string_view hello_fingerprint,
                                 const std::vector<uint32_t>& param_types, std::string_view sql);

// Whether a statement text may have its Parse deferred when its metadata is
// `row_description` (see StatementMetadata::deferrable).
bool IsDeferrable(std::string_view sql, std::string_view row_description);

class StatementMetadataStore {
 public:
  explicit StatementMetadataStore(size_t max_entries = 4096, size_t max_bytes = 8u << 20);

  // The entry for `key`, or nullptr.
  std::shared_ptr<const StatementMetadata> Get(const std::string& key);
  // Current invalidation generation; pass it to Put for an answer to a
  // Describe sent now.
  uint64_t generation();
  // Stores an origin answer to a Describe sent at `generation`; refused when
  // an invalidation happened since (the answer may predate the DDL).
  void Put(const std::string& key, StatementMetadata metadata, uint64_t generation);
  void Drop(const std::string& key);
  // DDL (or something that may have run it) was seen: forget everything.
  void InvalidateAll();

  void NoteLocalAnswer();
  void NoteMismatch();
  void NoteDeferredFailure();
  StatementMetadataStats Stats();

 private:
  const size_t max_entries_;
  const size_t max_bytes_;
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const StatementMetadata>> entries_;
  std::deque<std::string> order_;  // insertion order, for eviction (may hold dropped keys)
  size_t bytes_ = 0;
  uint64_t generation_ = 1;
  StatementMetadataStats stats_;
};

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_STATEMENT_METADATA_H_
