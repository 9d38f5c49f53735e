// Whether a statement's result may be cached, with the reason, decided on
// the token analysis (sql_analysis.h) and the origin's catalog: a function is
// cacheable only if pg_proc says IMMUTABLE (most volatile overload wins), a
// relation only if pg_class knows it and it is not temporary; views are
// resolved to their base tables (for invalidation) and refused if their
// definition calls a non-immutable function.
//
// The Endpoint implements VolatilityOracle from a CatalogSnapshot (below),
// filled from the catalog queries kFunctionVolatilityQuery... run on an
// origin connection and refreshed after DDL. Not thread-safe; pure otherwise.
#ifndef HYPERPOOL_CACHE_CACHEABILITY_H_
#define HYPERPOOL_CACHE_CACHEABILITY_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "cache/cache_key.h"
#include "cache/sql_analysis.h"

namespace hyperpool::cache {

// Every decision's reason. Names follow Hyperdrive's per-query cache status
// values where one exists (ReasonName()).
enum class Reason : uint8_t {
  kCacheable,
  kDisabled,            // Caching is off for this configuration.
  kOversizedQuery,      // Query text above the limit (not even lexed).
  kParseError,          // The lexer rejected the text.
  kMultipleStatements,  // More than one non-empty statement.
  kNotAQuery,           // Not SELECT / VALUES / TABLE / WITH ... SELECT.
  kInTransaction,       // The client is inside an explicit transaction block.
  kSelectInto,          // SELECT ... INTO creates a table.
  kDataModifyingCte,    // WITH x AS (INSERT | UPDATE | DELETE | MERGE ...).
  kRowLocks,            // FOR UPDATE / SHARE ...
  kVolatile,            // Non-immutable or unknown function, value function, time literal, sequence.
  kTemporaryTable,      // Reads a temporary or unknown relation.
  kOversizedResult,     // The result exceeded max_entry_bytes (decided while capturing).
};
std::string_view ReasonName(Reason reason);

// pg_proc.provolatile.
enum class Volatility : char { kImmutable = 'i', kStable = 's', kVolatile = 'v' };

struct RelationInfo {
  std::string resolved;   // "schema.name" the name resolved to.
  char kind = 'r';        // pg_class.relkind: r p v m f S.
  bool temporary = false; // relpersistence 't' (or a view over one).
  // Tables whose writes must invalidate results reading this relation
  // ("schema.name"; partitions mapped to their partition root): the relation
  // itself, or a view's base tables (transitively).
  std::vector<std::string> base_tables;
  // A view whose definition (transitively) calls a non-immutable function.
  bool nonimmutable_functions = false;
  // A write to it may write any table: a user trigger (on it or, for a
  // partitioned table, on a partition) or a rule other than a view's SELECT.
  bool writes_anything = false;
  // Tables a write to it also writes (foreign keys' ON DELETE / ON UPDATE
  // CASCADE, SET NULL, SET DEFAULT actions): "schema.name".
  std::vector<std::string> also_writes;
  // A view: the names (unqualified) of what its definition reads and calls,
  // nested views' included; what it says above holds only while none of
  // them changes (CatalogOverlay).
  std::vector<std::string> depends_on;
};

class VolatilityOracle {
 public:
  virtual ~VolatilityOracle() = default;
  // The most volatile of the overloads visible under `name`; nullopt if none.
  virtual std::optional<Volatility> FunctionVolatility(const QualifiedName& name) const = 0;
  // What `name` resolves to; nullopt if no such relation.
  virtual std::optional<RelationInfo> Relation(const QualifiedName& name) const = 0;
  // True if every function visible under `name` is in pg_catalog (built-ins
  // never write user tables, so a volatile built-in needs no invalidation).
  virtual bool IsBuiltinFunction(const QualifiedName& name) const { return false; }
  // The most volatile function behind the operators visible under `name`
  // (pg_operator.oprcode; built-in operators count as immutable unless
  // volatile: the stable ones depend on TimeZone or DateStyle alone); nullopt
  // if no operator has that name.
  virtual std::optional<Volatility> OperatorVolatility(const QualifiedName& name) const {
    return Volatility::kImmutable;
  }
  // The most volatile user-defined (not pg_catalog) function that a cast to
  // type `name` or its input function may run (pg_cast.castfunc,
  // pg_type.typinput); kImmutable if none; nullopt if no such type.
  virtual std::optional<Volatility> TypeVolatility(const QualifiedName& name) const {
    return Volatility::kImmutable;
  }
  // The most volatile visible function `name` of one argument of a row or
  // pseudo type: what `t.name` calls when `name` is no column of t
  // (attribute notation). nullopt if there is none (then it is a column).
  virtual std::optional<Volatility> AttributeCallVolatility(std::string_view name) const { return std::nullopt; }
  // True when whatever `name` (unqualified) denotes may have changed since
  // the catalog was read (DDL naming it, CatalogOverlay): every look-up of it
  // answers unknown, and an attribute-notation reference `t.name` counts as
  // an unknown call rather than a column.
  virtual bool Unsettled(std::string_view name) const { return false; }
  // True when more than one schema holds a relation or a type named `name`
  // (an unqualified reference may resolve to another one once the first is
  // dropped). Unknown: true.
  virtual bool Shadowed(std::string_view name) const { return true; }
};

struct DecisionContext {
  bool enabled = true;
  bool in_transaction = false;  // Last ReadyForQuery was 'T' or 'E'.
  size_t max_query_bytes = 0;   // 0 = unlimited.
  // Text-format parameters are checked for 'now'/'today'/... (a parameter
  // bound to a timestamp type is read at bind time).
  absl::Span<const ParamValue> params;
  const VolatilityOracle* oracle = nullptr;  // nullptr: every function/relation unknown.
  // The session's standard_conforming_strings: off, a text with a backslash
  // is not judged (the grammar reads strings as with it on): kParseError.
  bool standard_conforming_strings = true;
};

struct Decision {
  Reason reason = Reason::kCacheable;
  std::string detail;  // Human-readable cause ("function public.f is volatile").
  // kCacheable: the base tables read (for CacheEntry::tables).
  std::vector<std::string> tables;
  // The oracle was consulted and did not know a function or relation the
  // statement names (created on the origin after the catalog was read): a
  // catalog refresh may make it cacheable.
  bool unknown_name = false;
  bool cacheable() const { return reason == Reason::kCacheable; }
};

// Decides from an analysis (the ordered checks are listed in Reason).
Decision Decide(const StatementAnalysis& analysis, const DecisionContext& context);
// Decide in its three steps, which it runs in this order: the checks that
// read only the analysis and the context's flags (nullopt: none decided),
// the text-format parameters' time words (nullopt: none), and the catalog
// look-ups of what the statement calls and reads. The first and last are
// independent of `context.params` (DecisionMemo keeps them per text).
std::optional<Decision> DecideBeforeParams(const StatementAnalysis& analysis, const DecisionContext& context);
std::optional<Decision> DecideParams(absl::Span<const ParamValue> params);
Decision DecideAfterParams(const StatementAnalysis& analysis, const DecisionContext& context);
// Checks the cheap reasons (disabled, size) first, then lexes and decides.
Decision DecideSql(std::string_view sql, const DecisionContext& context, LexOptions options = {});
// The same for one text whose analysis the caller shares with other passes
// (default LexOptions; the analysis stays in `text`:
// SqlText::normalized_analysis_if_done).
Decision DecideSql(const SqlText& text, const DecisionContext& context);

// The first of `analysis`'s operators, casts and attribute-notation names
// that is not immutable (or unknown), as a kVolatile decision (its
// unknown_name set for a name the catalog did not know); nullopt if none.
std::optional<Decision> ResolvedCallsVolatility(const StatementAnalysis& analysis, const VolatilityOracle* oracle);

// Tables to invalidate after `analysis` ran successfully: the resolved
// written relations (partition roots; for a view, its base tables). nullopt
// when that cannot be known precisely: DDL, TRUNCATE of an unknown relation,
// a written relation the oracle does not know, CALL / DO / EXECUTE, or a
// call of a volatile or unknown non-built-in function (all of which may
// write anything) — then call Cache::InvalidateAll(database).
std::optional<std::vector<std::string>> TablesToInvalidate(const StatementAnalysis& analysis,
                                                           const VolatilityOracle* oracle);

// ---------------------------------------------------------------------------
// Catalog.
// ---------------------------------------------------------------------------

// Operators, types and attribute-notation candidates: (kind, nspname, name,
// provolatile) where kind is 'o' (an operator: its oprcode's volatility,
// most volatile overload), 't' (a type, arrays excluded: the most volatile
// non-pg_catalog function among its input function and the casts to it; 'i'
// if none) or 'a' (a function of one argument of a composite or pseudo
// type, callable as t.name). The types' part joins once (hash joins): a
// correlated subquery per type took 360 ms on the regression database, and
// the catalog is read again after DDL.
inline constexpr std::string_view kSideCatalogQuery =
    "SELECT 'o', n.nspname, o.oprname, max(p.provolatile::text) "
    "FROM pg_catalog.pg_operator o JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace "
    "JOIN pg_catalog.pg_proc p ON p.oid = o.oprcode GROUP BY n.nspname, o.oprname "
    "UNION ALL "
    "SELECT 't', n.nspname, t.typname, coalesce(max(p.provolatile::text), 'i') "
    "FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace "
    "LEFT JOIN (SELECT t2.oid AS typ, t2.typinput AS fn FROM pg_catalog.pg_type t2 "
    " UNION ALL SELECT c.casttarget, c.castfunc FROM pg_catalog.pg_cast c) f ON f.typ = t.oid "
    "LEFT JOIN pg_catalog.pg_proc p ON p.oid = f.fn AND p.pronamespace <> 'pg_catalog'::pg_catalog.regnamespace "
    "WHERE t.typcategory <> 'A' GROUP BY n.nspname, t.typname "
    "UNION ALL "
    "SELECT 'a', n.nspname, p.proname, max(p.provolatile::text) "
    "FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
    "JOIN pg_catalog.pg_type t ON t.oid = p.proargtypes[0] "
    "WHERE p.pronargs = 1 AND t.typtype IN ('c', 'p') GROUP BY n.nspname, p.proname";

// Functions: (nspname, proname, provolatile), provolatile the most volatile
// overload ('v' > 's' > 'i' sorts as text).
inline constexpr std::string_view kFunctionVolatilityQuery =
    "SELECT n.nspname, p.proname, max(p.provolatile::text) AS provolatile "
    "FROM pg_catalog.pg_proc p "
    "JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
    "GROUP BY n.nspname, p.proname";

// Relations: (nspname, relname, relkind, relpersistence, root_nspname,
// root_relname, viewdef); the root columns are NULL unless the relation is in
// a declarative partition tree or an inheritance tree (then its topmost
// ancestor: a read of a parent reads its children, a write to a parent
// writes them); viewdef is a view's definition. Run it with
// search_path = pg_catalog so that the definitions name every non-built-in
// object with its schema. (pg_depend records no dependency on pinned
// built-in functions such as now(), so a view's functions are found by
// analysing its definition; kViewDependenciesQuery adds the user-defined
// ones and the base tables.)
inline constexpr std::string_view kRelationsQuery =
    "SELECT n.nspname, c.relname, c.relkind::text, c.relpersistence::text, "
    "rn.nspname AS root_nspname, r.relname AS root_relname, "
    "CASE WHEN c.relkind = 'v' THEN pg_catalog.pg_get_viewdef(c.oid) END AS viewdef "
    "FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "LEFT JOIN pg_catalog.pg_class r ON r.oid = coalesce(pg_catalog.pg_partition_root(c.oid), "
    " (WITH RECURSIVE up(oid) AS (SELECT i.inhparent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid"
    "  UNION SELECT i.inhparent FROM pg_catalog.pg_inherits i JOIN up ON i.inhrelid = up.oid)"
    "  SELECT min(up.oid) FROM up WHERE NOT EXISTS"
    "  (SELECT 1 FROM pg_catalog.pg_inherits i2 WHERE i2.inhrelid = up.oid))) "
    "LEFT JOIN pg_catalog.pg_namespace rn ON rn.oid = r.relnamespace "
    "WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')";

// The dependencies of every view's rewrite rule, followed through nested
// views: (view_nspname, view_relname, dep_kind, dep_nspname, dep_name,
// dep_flag) where dep_kind is 'r' (a non-view relation; dep_flag = relkind ||
// relpersistence, e.g. "rp", "rt") or 'f' (a function; dep_flag =
// provolatile).
inline constexpr std::string_view kViewDependenciesQuery =
    "WITH RECURSIVE deps(view_oid, rule_oid) AS ("
    " SELECT v.oid, rw.oid FROM pg_catalog.pg_class v"
    " JOIN pg_catalog.pg_rewrite rw ON rw.ev_class = v.oid"
    " WHERE v.relkind = 'v'"
    " UNION"
    " SELECT deps.view_oid, rw.oid FROM deps"
    " JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass"
    "  AND d.objid = deps.rule_oid"
    "  AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass"
    " JOIN pg_catalog.pg_class c ON c.oid = d.refobjid AND c.relkind = 'v'"
    " JOIN pg_catalog.pg_rewrite rw ON rw.ev_class = c.oid"
    "), refs AS ("
    " SELECT DISTINCT deps.view_oid, d.refclassid, d.refobjid FROM deps"
    " JOIN pg_catalog.pg_rewrite rw ON rw.oid = deps.rule_oid"
    " JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass"
    "  AND d.objid = deps.rule_oid AND d.refobjid <> rw.ev_class"
    ") "
    "SELECT vn.nspname, v.relname, 'r', cn.nspname, c.relname,"
    " c.relkind::text || c.relpersistence::text "
    "FROM refs JOIN pg_catalog.pg_class v ON v.oid = refs.view_oid"
    " JOIN pg_catalog.pg_namespace vn ON vn.oid = v.relnamespace"
    " JOIN pg_catalog.pg_class c ON c.oid = refs.refobjid"
    " JOIN pg_catalog.pg_namespace cn ON cn.oid = c.relnamespace "
    "WHERE refs.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND c.relkind <> 'v' "
    "UNION ALL "
    "SELECT vn.nspname, v.relname, 'f', pn.nspname, p.proname, p.provolatile::text "
    "FROM refs JOIN pg_catalog.pg_class v ON v.oid = refs.view_oid"
    " JOIN pg_catalog.pg_namespace vn ON vn.oid = v.relnamespace"
    " JOIN pg_catalog.pg_proc p ON p.oid = refs.refobjid"
    " JOIN pg_catalog.pg_namespace pn ON pn.oid = p.pronamespace "
    "WHERE refs.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass";

// What a write to a relation writes besides it: (nspname, relname, 'a',
// NULL, NULL) when a user trigger, a non-SELECT rule or multiple
// inheritance may make it write anything,
// (nspname, relname, 'c', target_nspname, target_relname) for a foreign
// key's action that writes the referencing table. Run after kRelationsQuery
// (a partition's rows count for its root too).
inline constexpr std::string_view kWriteEffectsQuery =
    "SELECT n.nspname, c.relname, 'a', NULL::pg_catalog.name, NULL::pg_catalog.name "
    "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal) "
    " OR EXISTS (SELECT 1 FROM pg_catalog.pg_rewrite r WHERE r.ev_class = c.oid AND r.ev_type <> '1') "
    // Multiple inheritance: one root cannot stand for the trees a table is
    // in, so a write to any of them (or their ancestors) may write anything.
    " OR c.oid IN (WITH RECURSIVE up(oid) AS (SELECT i.inhrelid FROM pg_catalog.pg_inherits i"
    "  GROUP BY i.inhrelid HAVING count(*) > 1"
    "  UNION SELECT i.inhparent FROM pg_catalog.pg_inherits i JOIN up ON i.inhrelid = up.oid) SELECT oid FROM up) "
    "UNION ALL "
    "SELECT n.nspname, c.relname, 'c', tn.nspname, tc.relname FROM pg_catalog.pg_trigger t "
    "JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "JOIN pg_catalog.pg_class tc ON tc.oid = t.tgconstrrelid "
    "JOIN pg_catalog.pg_namespace tn ON tn.oid = tc.relnamespace "
    "JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid "
    "WHERE t.tgisinternal AND p.proname IN ('RI_FKey_cascade_del', 'RI_FKey_cascade_upd', "
    "'RI_FKey_setnull_del', 'RI_FKey_setnull_upd', 'RI_FKey_setdefault_del', 'RI_FKey_setdefault_upd')";

// The effective search path of the session running it, implicit schemas
// included (pg_temp_N if it exists, pg_catalog), in order: one row per schema.
inline constexpr std::string_view kSearchPathQuery =
    "SELECT s FROM pg_catalog.unnest(pg_catalog.current_schemas(true)) "
    "WITH ORDINALITY AS t(s, i) ORDER BY i";

// Splits a search_path setting ("$user", public, "My Schema") into schema
// names: "$user" becomes `user`, quotes are removed, unquoted names
// lowercased.
std::vector<std::string> ParseSearchPath(std::string_view setting, std::string_view user);

// The catalog as the queries above returned it; the Endpoint builds one per
// origin database and replaces it after DDL.
class CatalogSnapshot {
 public:
  using Row = absl::Span<const std::optional<std::string_view>>;

  // One row of kFunctionVolatilityQuery / kRelationsQuery /
  // kViewDependenciesQuery. InvalidArgument on a malformed row.
  absl::Status AddFunctionRow(Row row);
  absl::Status AddRelationRow(Row row);
  absl::Status AddViewDependencyRow(Row row);
  // One row of kSideCatalogQuery.
  absl::Status AddSideRow(Row row);
  // One row of kWriteEffectsQuery (after the relation rows).
  absl::Status AddWriteEffectRow(Row row);

  // An oracle resolving unqualified names through `search_path` (schema
  // names; pg_catalog is searched first unless listed; for relations, any
  // temporary relation of that name in any pg_temp_N schema counts as
  // temporary, because a pooled connection may own one). The snapshot must
  // outlive it.
  std::unique_ptr<VolatilityOracle> Oracle(std::vector<std::string> search_path) const;

  size_t function_count() const { return functions_.size(); }
  size_t relation_count() const { return relations_.size(); }

 private:
  friend class SnapshotOracle;
  struct Rel {
    char kind = 'r';
    bool temporary = false;
    std::string root;  // "schema.name" of the partition root, or empty.
    std::vector<std::string> view_tables;  // "schema.name" (roots).
    std::string viewdef;
  };
  // Keyed by schema + '\0' + name.
  absl::flat_hash_map<std::string, Volatility> functions_;
  absl::flat_hash_map<std::string, Rel> relations_;
  // Name → schemas having a relation / function of that name.
  absl::flat_hash_map<std::string, std::vector<std::string>> relation_schemas_;
  absl::flat_hash_map<std::string, std::vector<std::string>> function_schemas_;
  absl::flat_hash_map<std::string, uint32_t> type_schema_count_;  // type name → schemas holding it
  // kWriteEffectsQuery's rows, keyed by MapKey: relations whose writes may
  // write anything, and the tables an FK action writes ("schema.name").
  absl::flat_hash_set<std::string> writes_anything_;
  absl::flat_hash_map<std::string, std::vector<std::string>> also_writes_;
  // kSideCatalogQuery's rows, keyed by kind + schema + '\0' + name.
  absl::flat_hash_map<std::string, Volatility> side_;
  // Views' dependency rows arrive before or after the relation rows.
  struct ViewDep {
    char dep_kind;
    std::string schema, name, flag;
  };
  absl::flat_hash_map<std::string, std::vector<ViewDep>> view_deps_;
};

// An in-memory oracle for tests and for callers that know the answers.
class FakeOracle final : public VolatilityOracle {
 public:
  // Unqualified names given here match unqualified look-ups only; give
  // "schema.name" to match qualified ones.
  FakeOracle& Function(std::string name, Volatility v);
  FakeOracle& Table(std::string name, bool temporary = false);
  FakeOracle& View(std::string name, std::vector<std::string> base_tables,
                   bool nonimmutable_functions = false);
  // A table whose writes also write `also` ("schema.name" each; "*": anything).
  FakeOracle& Writes(std::string name, std::vector<std::string> also);
  FakeOracle& Sequence(std::string name);
  // A pg_catalog function (IsBuiltinFunction).
  FakeOracle& Builtin(std::string name, Volatility v);
  // An operator or a type with a function of this volatility behind it
  // (unnamed ones: immutable), a function callable in attribute notation.
  FakeOracle& Operator(std::string name, Volatility v);
  FakeOracle& Type(std::string name, Volatility v);
  FakeOracle& AttributeFunction(std::string name, Volatility v);

  std::optional<Volatility> FunctionVolatility(const QualifiedName& name) const override;
  std::optional<RelationInfo> Relation(const QualifiedName& name) const override;
  bool IsBuiltinFunction(const QualifiedName& name) const override;
  std::optional<Volatility> OperatorVolatility(const QualifiedName& name) const override;
  std::optional<Volatility> TypeVolatility(const QualifiedName& name) const override;
  std::optional<Volatility> AttributeCallVolatility(std::string_view name) const override;
  bool Shadowed(std::string_view name) const override { return false; }

 private:
  absl::flat_hash_set<std::string> builtins_;
  absl::flat_hash_map<std::string, Volatility> operators_, types_, attribute_functions_;
  absl::flat_hash_map<std::string, Volatility> functions_;
  absl::flat_hash_map<std::string, RelationInfo> relations_;
};

// ---------------------------------------------------------------------------
// Decision statistics.
// ---------------------------------------------------------------------------

// Counts decisions per (fingerprint, reason) in a bounded table; when full,
// the least recently updated row is dropped.
class DecisionStats {
 public:
  struct Row {
    uint64_t fingerprint = 0;
    Reason reason = Reason::kCacheable;
    uint64_t count = 0;
    std::string sample;  // Normalised text, truncated to kSampleBytes.
  };
  static constexpr size_t kSampleBytes = 256;

  explicit DecisionStats(size_t capacity = 1024) : capacity_(capacity) {}
  void Record(uint64_t fingerprint, Reason reason, std::string_view normalized);
  // The same; `normalized` is called only when the row is new (the text is
  // built for a sample, not for every count).
  void Record(uint64_t fingerprint, Reason reason, absl::FunctionRef<std::string()> normalized);
  // Rows by descending count.
  std::vector<Row> Top(size_t n) const;
  std::optional<uint64_t> Count(uint64_t fingerprint, Reason reason) const;
  size_t size() const { return rows_.size(); }
  uint64_t dropped() const { return dropped_; }

 private:
  struct Key {
    uint64_t fingerprint;
    Reason reason;
    bool operator==(const Key&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.fingerprint, static_cast<uint8_t>(k.reason));
    }
  };
  size_t capacity_;
  uint64_t dropped_ = 0;
  std::list<Row> rows_;  // Front: most recently updated.
  absl::flat_hash_map<Key, std::list<Row>::iterator> index_;
};

}  // namespace hyperpool::cache

#endif  // HYPERPOOL_CACHE_CACHEABILITY_H_
