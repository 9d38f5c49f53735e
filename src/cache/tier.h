// Pieces of the two-tier query cache shared by the Client and the Endpoint
// (docs/architecture.md, "Query cache"): the link control messages, the
// shape of a cacheable unit of work, the per-session cache controls
// (hyperpool.cache / hyperpool.cache_ttl, the nocache comment hint), the
// classification of statements that change session state, and what a write
// invalidates. Pure functions, no I/O: both halves must classify the same
// bytes the same way, so they share this code.
#ifndef HYPERPOOL_CACHE_TIER_H_
#define HYPERPOOL_CACHE_TIER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "cache/cache_key.h"
#include "cache/cacheability.h"
#include "cache/result_store.h"
#include "cache/sql_analysis.h"
#include "protocol/link_controls.h"
#include "protocol/link_protocol.h"

namespace hyperpool::cache {

// ---------------------------------------------------------------------------
// Link control messages (Endpoint -> Client). A backend-direction frame with
// tag 'h' (no PostgreSQL backend message uses it); the Client consumes it and
// never forwards it to the application. Payload: one kind byte, then fields.
// ---------------------------------------------------------------------------

using link::kControlTag;  // protocol/link_protocol.h

// The digest of a unit's frontend frames that names it in the control
// messages below: computed by the Endpoint on what it received and by the
// Client on what it sent, so it must be the same function in every process
// (no per-process seed); a Client and an Endpoint of different versions that
// disagree on it only never match a result to a unit (nothing is stored in
// the Client tier). Eight bytes per step (xxHash64's short-input rounds):
// FNV-1a took a multiply per byte.
uint64_t UnitDigest(std::string_view frames);

// The control frames ('B', 'S', 'I') and their codec are the link
// protocol's (protocol/link_controls.h); the cache names them here.
using protocol::AppendControl;
using protocol::AppendStoreControl;
using protocol::BeginControl;
using protocol::Control;
using protocol::DecodeControl;
using protocol::InvalidateControl;
using protocol::ReleaseControl;
using protocol::StoreControl;

// ---------------------------------------------------------------------------
// The invalidation watch (docs/architecture.md, "Invalidation"): a link whose
// hello carries kWatchParam=1 and hyperpool.client_id. The Endpoint answers
// ParameterStatus kWatchSourceParam (its `source`, decimal) and
// kWatchGenerationParam (its generation now, decimal), then ReadyForQuery
// 'I'; from then on it sends every invalidation it broadcasts to Clients on
// it ('h' 'I' control frames), and answers each Sync (the Client's
// heartbeat) with ReadyForQuery 'I' after everything sent before. Terminate
// ends it.
// ---------------------------------------------------------------------------

using link::kWatchGenerationParam;  // protocol/link_protocol.h
using link::kWatchParam;
using link::kWatchSourceParam;

// ---------------------------------------------------------------------------
// Units of work.
// ---------------------------------------------------------------------------

// A unit whose result may be answered from a cache: one simple Query, or
// exactly [Parse] [Describe(statement)] Bind [Describe(portal)]
// Execute Sync of one statement and one portal, named or
// unnamed (a unit without a Parse names a statement the session prepared
// earlier, resolved through a StatementLookup). Keys use the statement's
// text and types, never its name. An Execute row limit is not part of the
// key (replay.max_rows): entries are complete results, and a limited
// Execute is answered from one as PostgreSQL would (result_store.h).
struct CandidateUnit {
  std::string_view frames;  // The unit's frontend frames, verbatim.
  ProtocolForm form = ProtocolForm::kSimple;
  std::string_view sql;
  std::vector<uint32_t> param_types;
  // Views into `frames`. Inline up to four (a unit is parsed on each half
  // per unit of work: most Binds carry a few parameters and formats).
  absl::InlinedVector<ParamValue, 4> params;
  absl::InlinedVector<int16_t, 4> result_formats;
  ReplayRequest replay;
  char describe = 0;  // 0, 'P' or 'S' (part of the key: the stored form differs).
  bool named_parse = false;  // the unit creates a named statement (the origin must see its Parse)
  // A unit that Binds a statement prepared earlier (no Parse in the unit):
  // the result type the session's driver holds for it
  // (protocol::ResultTypeDigest; 0 when the session does not know it), so
  // that a result stored by a statement of another shape (the same text
  // prepared again after DDL) is never handed to a driver that would decode
  // its rows with the old RowDescription: the Endpoint keys by it
  // (AppendKeySuffix), the Client checks it against the entry's own
  // RowDescription. 0 when the unit parses its statement.
  uint64_t result_type = 0;
};

// Resolves one of the session's prepared statements by name: its text,
// declared parameter types (views valid while the unit is used) and the
// result type its driver holds (CandidateUnit::result_type, 0 if unknown);
// false if the session has no such statement (or, the caller's choice, one
// it will not key: then the unit is no candidate, neither served nor
// stored).
using StatementLookup = std::function<bool(std::string_view name, std::string_view* sql, std::vector<uint32_t>* types,
                                           uint64_t* result_type)>;

enum class UnitShape : uint8_t { kCandidate, kNotCandidate, kIncomplete };

// Looks at `bytes`, which start at a unit's first frontend frame. kIncomplete
// when a Parse-led unit's Sync is not in `bytes` yet.
UnitShape ParseCandidateUnit(std::string_view bytes, CandidateUnit& out, const StatementLookup* lookup = nullptr);

// ---------------------------------------------------------------------------
// Session controls and state.
// ---------------------------------------------------------------------------

// What a session asked of the cache: `SET hyperpool.cache = on|off`,
// `SET hyperpool.cache_ttl = <seconds>`, RESET of either, or the startup
// parameters of the same names (directly or as `options=-c name=value`).
struct SessionCacheSettings {
  bool enabled = true;
  std::optional<std::chrono::milliseconds> ttl;  // nullopt: the tier's max_age
  bool operator==(const SessionCacheSettings&) const = default;
};

// Applies one `name = value` ("hyperpool.cache", "hyperpool.cache_ttl");
// false if `name` is not one of ours. An unparsable value turns caching off.
bool ApplyCacheSetting(std::string_view name, std::optional<std::string_view> value,
                       SessionCacheSettings& settings);

// Startup/hello parameters: applies ours (including `options` -c switches).
void ApplyStartupParameters(const std::vector<std::pair<std::string, std::string>>& params,
                            SessionCacheSettings& settings);

// What a statement text does to session state.
struct StatementEffects {
  // Only SET/RESET of hyperpool.* settings (answerable without the origin).
  bool only_cache_settings = false;
  // Changes session state that can change later results: SET/RESET (not
  // LOCAL, TRANSACTION, CONSTRAINTS or hyperpool.*), DISCARD, DO, CALL,
  // set_config(), LOAD and anything unrecognised. Also true when the text
  // does not lex.
  bool changes_session_state = false;
  // ...and every such change is a session-level SET/RESET [ALL] of ordinary
  // settings (not ROLE or SESSION AUTHORIZATION): what the Endpoint's
  // settings capture describes exactly, so its tier keys by the captured
  // settings instead of bypassing the session.
  bool only_setting_changes = false;
  // ...and every one of them is of a setting no key depends on
  // (application_name, statement_timeout, ...: HelloFingerprint leaves them
  // out), so keys made for the session stay valid (PgJDBC sets
  // application_name at connect).
  bool only_unkeyed_settings = false;
  // The cache-control hint comment /* hyperpool:nocache */ is present.
  bool nocache_hint = false;
};
// (IsPlainSelect, in sql_analysis.h, is ClassifyStatements's fast path.)
// Applies hyperpool.* SETs/RESETs found in `sql` to `settings` and reports
// the effects (plain SELECTs without lexing: IsPlainSelect).
StatementEffects ClassifyStatements(const SqlText& text, SessionCacheSettings* settings);
StatementEffects ClassifyStatements(std::string_view sql, SessionCacheSettings* settings);

// The startup parameters that make up the session part of a key: the result
// affecting ones by name, sorted, length-prefixed. Sets `unsupported` when a
// parameter could change how names resolve or who runs the query in ways a
// key cannot capture safely (search_path, role, options with -c switches
// other than hyperpool.*, session_authorization, unknown names).
std::string HelloFingerprint(const std::vector<std::pair<std::string, std::string>>& params,
                             bool* unsupported);

// ---------------------------------------------------------------------------
// Writes.
// ---------------------------------------------------------------------------

struct WriteEffect {
  bool all = false;
  std::vector<std::string> tables;  // "schema.table"
  // May change statement metadata (what a Describe answers): DDL, or what
  // may run it (DO, CALL, EXPLAIN, unknown commands, text the lexer
  // rejects). Implies `all`. Kept apart from `all` so that a read whose
  // functions are not known yet (no catalog), or any write the Endpoint
  // cannot attribute to tables, drops cached rows but not the Clients'
  // statement metadata. (A function that itself runs DDL is caught where
  // DDL made elsewhere is: the Client's RowDescription check at the first
  // execution, extended_session.h.)
  bool schema = false;
  bool any() const { return all || !tables.empty(); }
  void Merge(const WriteEffect& other);
};

// What running `sql` invalidates: TablesToInvalidate, plus all on parse
// errors, EXPLAIN (ANALYZE executes), FunctionCall and anything
// TablesToInvalidate cannot attribute. `precise_names` false (the session's
// name resolution differs from the oracle's): any write invalidates all.
// `schema` as described in WriteEffect.
// `standard_conforming_strings` false (the session's setting): a text with a
// backslash is not judged (the grammar reads strings as with it on): all.
WriteEffect WriteEffectOf(const SqlText& text, const VolatilityOracle* oracle, bool precise_names,
                          bool standard_conforming_strings = true);
WriteEffect WriteEffectOf(std::string_view sql, const VolatilityOracle* oracle, bool precise_names);

// ---------------------------------------------------------------------------
// Keys.
// ---------------------------------------------------------------------------

// The Client's local key: its session fingerprint, the session's cache
// settings and the unit's frames verbatim (same bytes, same session state
// => same Endpoint key).
std::string ClientLocalKey(std::string_view hello_fingerprint, const SessionCacheSettings& s,
                           std::string_view unit_frames);

// The Client's key for an extended unit: like ClientLocalKey, but built from
// the statement's text, types, parameter values and formats, result formats
// and Describe kind -- never from the driver's statement or portal names.
std::string ClientExtendedKey(std::string_view hello_fingerprint, const SessionCacheSettings& s,
                              const CandidateUnit& unit);

// Appends the tier's extra key components (hello fingerprint, describe kind,
// session TTL, the unit's CandidateUnit::result_type) after AppendCacheKey's
// (prefix-free: fixed trailing tags).
void AppendKeySuffix(std::string& key, std::string_view hello_fingerprint, char describe,
                     const SessionCacheSettings& s, uint64_t result_type = 0);
// The bytes AppendKeySuffix appends for `hello_fingerprint`.
inline size_t KeySuffixSize(std::string_view hello_fingerprint) { return 1 + 4 + hello_fingerprint.size() + 2 + 9 + 9; }
// Replaces the result type AppendKeySuffix put last in `key` (a unit whose
// statement's shape was learnt while it ran).
void SetKeyResultType(std::string& key, uint64_t result_type);

}  // namespace hyperpool::cache

#endif  // HYPERPOOL_CACHE_TIER_H_
