// A memo of the Endpoint's cacheability decisions (cacheability.h,
// docs/architecture.md "Query cache"): DecideSql lexes and analyses the text
// and looks up what it reads and calls in the catalog, ~9k instructions for
// pgbench's one-line SELECT, for every unit; most units repeat a text seen
// before (a prepared statement's every execution) or differ from one only in
// their integer literals (pgbench -S's simple-protocol reads).
//
// The memo answers exactly what DecideSql(text, context) answers:
//  - its key is the text itself, or, for a text IsPlainSelect reads (no
//    comments, dollar quotes, quoted identifiers, backslashes or U&
//    escapes), the text with every integer literal outside a string replaced
//    by one marker byte: two such texts lex to the same tokens but for the
//    numbers' values, which the analysis never reads (sql_analysis.cc
//    memoizes the analysis itself by a shape that masks them);
//  - plus every context flag the decision reads (standard_conforming_strings,
//    in_transaction); the size limit and the backslash check are made on the
//    text before the memo is asked, the parameters' time words after
//    (DecideParams), and a text that does not lex is never kept (its error
//    names byte positions);
//  - and it holds only decisions made on one state of the catalog
//    (`CatalogVersion`, which the owner changes whenever the oracle's
//    answers may change: a catalog read loaded, a DDL opened or settled in
//    the overlay): any other version empties it.
// One per EndpointCache (one database, one role, the origin's default
// search_path: a session whose state a key cannot describe bypasses the
// tier before deciding). Not thread-safe (the Endpoint's executor).
#ifndef HYPERPOOL_CACHE_DECISION_MEMO_H_
#define HYPERPOOL_CACHE_DECISION_MEMO_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "cache/cacheability.h"
#include "cache/catalog_overlay.h"
#include "cache/sql_analysis.h"
#include "cache/string_hash.h"
#include "cache/tier.h"

namespace hyperpool::cache {

// The state of the catalog a decision was made on (EndpointCache: loads of
// the snapshot, changes of the overlay).
struct CatalogVersion {
  uint64_t loads = 0;
  uint64_t overlay = 0;
  bool operator==(const CatalogVersion&) const = default;
};

// DecideSql's answer with what the caller reads from the text's analysis.
struct MemoDecision {
  Decision decision;
  bool analysed = false;       // the text was analysed (else: a cheap check, or it did not lex)
  bool wants_catalog = false;  // the analysis calls a function or reads a relation
  uint64_t fingerprint = 0;    // the analysis's normalized fingerprint (analysed only)
  bool from_memo = false;
};

class DecisionMemo {
 public:
  // Entries per generation (two are kept: the current one, and the one
  // before, whose entries move back on use), and the longest key kept.
  static constexpr size_t kCapacity = 2048;
  static constexpr size_t kMaxTextBytes = 2048;

  // DecideSql(text, context), from the memo when `version` is the one its
  // entries were made at.
  MemoDecision Decide(const SqlText& text, const DecisionContext& context, const CatalogVersion& version);

  // The key of `text` under `context` into `key`; false when the text is not
  // memoized (too long). Exposed for tests.
  static bool KeyOf(const SqlText& text, const DecisionContext& context, std::string& key);

  size_t size() const { return current_.size() + previous_.size(); }
  uint64_t hits() const { return hits_; }

 private:
  struct Entry {
    Decision decision;  // DecideBeforeParams's, else DecideAfterParams's
    bool before_params = false;
    bool wants_catalog = false;
    uint64_t fingerprint = 0;
  };
  using Map = absl::flat_hash_map<std::string, Entry, StringHash, StringEq>;
  static MemoDecision Answer(const Entry& e, const DecisionContext& context);
  // Keeps `e` under key_ (the current generation full: it becomes the
  // previous one, whose entries are dropped).
  void Keep(Entry e);

  CatalogVersion version_;
  const VolatilityOracle* oracle_ = nullptr;
  Map current_;
  Map previous_;
  std::string key_;  // reused
  uint64_t hits_ = 0;
};

// Whether the standalone integers of `sql` can be told from its bytes alone
// (AppendMaskedIntegers): no double quote, dollar sign, backslash, '&', NUL
// or comment, and balanced single quotes. Then two texts that mask alike lex
// to the same tokens but for those integers' values.
bool MaskableText(std::string_view sql);
// Appends `sql` to `key` with each maximal run of digits that stands alone
// outside a string (not part of an identifier, a parameter, a decimal or
// an exponent) replaced by one marker byte. For texts MaskableText accepts
// (or IsPlainSelect reads).
void AppendMaskedIntegers(std::string_view sql, std::string& key);

// What the Endpoint's write tracking concludes from a statement text
// (endpoint_cache.h, SessionCache::EffectOf) for a session whose names
// resolve as the catalog's: the tables it may write, whether it may write
// at all, and what it may change in the catalog.
struct MemoEffect {
  WriteEffect write;
  bool own_write = false;
  CatalogChange catalog;
};

// A memo of MemoEffects, for texts that change no session state: TPC-B's
// UPDATEs and INSERTs differ from transaction to transaction only in their
// integer literals, and each was lexed and analysed anew (~8k instructions
// a statement). Keyed like DecisionMemo: the text with its standalone
// integers masked when MaskableText, else the text itself, and
// standard_conforming_strings; entries hold only for the catalog state
// (`CatalogVersion`, oracle) they were made at. What a text's analysis
// yields is the same for every text that masks alike (the analysis is
// itself memoized by a shape that masks literals; tests/unit/cache/
// corpus_test.cc holds the key against PostgreSQL's parser). Not
// thread-safe (the Endpoint's executor).
class EffectMemo {
 public:
  static constexpr size_t kCapacity = 4096;
  static constexpr size_t kMaxTextBytes = 2048;

  // The memoized effect of `text`, or nullptr. Keep() after a miss stores
  // under the key this call made.
  const MemoEffect* Find(const SqlText& text, bool standard_conforming_strings, const CatalogVersion& version,
                         const VolatilityOracle* oracle);
  void Keep(MemoEffect effect);

  // The key of `text` into `key`; false when it is not memoized (too long).
  // Exposed for tests.
  static bool KeyOf(std::string_view sql, bool standard_conforming_strings, std::string& key);

  size_t size() const { return map_.size(); }
  uint64_t hits() const { return hits_; }

 private:
  absl::flat_hash_map<std::string, MemoEffect, StringHash, StringEq> map_;
  CatalogVersion version_;
  const VolatilityOracle* oracle_ = nullptr;
  std::string key_;  // the last Find's, reused
  bool keyed_ = false;
  uint64_t hits_ = 0;
};

}  // namespace hyperpool::cache

#endif  // HYPERPOOL_CACHE_DECISION_MEMO_H_
