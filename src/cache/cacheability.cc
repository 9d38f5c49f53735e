#include "cache/cacheability.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/string_view.h"

namespace hyperpool::cache {
namespace {

// absl::StrCat takes absl::string_view, which is not std::string_view in
// Debian's abseil: concatenate std::string_views ourselves.
template <typename... Parts>
std::string Cat(const Parts&... parts) {
  std::string out;
  (out.append(std::string_view(parts)), ...);
  return out;
}

std::string Join(std::string_view schema, std::string_view name) {
  return Cat(schema, ".", name);
}
std::string MapKey(std::string_view schema, std::string_view name) {
  std::string k(schema);
  k.push_back('\0');
  k.append(name);
  return k;
}
// MapKey for a look-up, without allocating for names of ordinary length
// (every cacheability decision looks up each relation it reads).
class LookupKey {
 public:
  LookupKey(std::string_view schema, std::string_view name) {
    const size_t n = schema.size() + 1 + name.size();
    char* p = small_;
    if (n > sizeof(small_)) {
      big_.resize(n);
      p = big_.data();
    }
    std::memcpy(p, schema.data(), schema.size());
    p[schema.size()] = '\0';
    std::memcpy(p + schema.size() + 1, name.data(), name.size());
    view_ = std::string_view(p, n);
  }
  LookupKey(const LookupKey&) = delete;
  LookupKey& operator=(const LookupKey&) = delete;
  // absl's string_view: Debian's abseil keys string maps by its own type.
  absl::string_view view() const { return absl::string_view(view_.data(), view_.size()); }

 private:
  char small_[136];
  std::string big_;
  std::string_view view_;
};
bool IsTempSchema(std::string_view s) { return s.starts_with("pg_temp"); }

template <typename T>
void AddUnique(std::vector<T>& v, T x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(std::move(x));
}

Decision Make(Reason r, std::string detail = {}) {
  Decision d;
  d.reason = r;
  d.detail = std::move(detail);
  return d;
}

}  // namespace

std::string_view ReasonName(Reason reason) {
  switch (reason) {
    case Reason::kCacheable: return "cacheable";
    case Reason::kDisabled: return "disabled";
    case Reason::kOversizedQuery: return "oversizedquery";
    case Reason::kParseError: return "parseerror";
    case Reason::kMultipleStatements: return "multiplestatements";
    case Reason::kNotAQuery: return "notaquery";
    case Reason::kInTransaction: return "transaction";
    case Reason::kSelectInto: return "selectinto";
    case Reason::kDataModifyingCte: return "datamodifyingcte";
    case Reason::kRowLocks: return "rowlocks";
    case Reason::kVolatile: return "volatile";
    case Reason::kTemporaryTable: return "temporarytable";
    case Reason::kOversizedResult: return "oversizedresult";
  }
  return "unknown";
}

std::optional<Decision> DecideBeforeParams(const StatementAnalysis& a, const DecisionContext& ctx) {
  if (!ctx.enabled) return Make(Reason::kDisabled);
  if (a.statement_count > 1) return Make(Reason::kMultipleStatements);
  if (a.kind != StatementKind::kSelect) {
    return Make(Reason::kNotAQuery, std::string(StatementKindName(a.kind)));
  }
  if (ctx.in_transaction) return Make(Reason::kInTransaction);
  if (a.has_select_into) return Make(Reason::kSelectInto);
  if (a.has_data_modifying_cte) return Make(Reason::kDataModifyingCte);
  if (a.has_row_locks) return Make(Reason::kRowLocks);
  if (!a.value_functions.empty()) {
    return Make(Reason::kVolatile, Cat("value function ", a.value_functions.front()));
  }
  if (a.has_time_literal) return Make(Reason::kVolatile, "time literal");
  return std::nullopt;
}

std::optional<Decision> DecideParams(absl::Span<const ParamValue> params) {
  for (const ParamValue& p : params) {
    if (p.format == 0 && p.value.has_value() && ContainsTimeWord(*p.value)) {
      return Make(Reason::kVolatile, "time parameter");
    }
  }
  return std::nullopt;
}

Decision DecideAfterParams(const StatementAnalysis& a, const DecisionContext& ctx) {
  for (const QualifiedName& f : a.functions) {
    std::optional<Volatility> v =
        ctx.oracle != nullptr ? ctx.oracle->FunctionVolatility(f) : std::nullopt;
    if (!v.has_value()) {
      Decision unknown = Make(Reason::kVolatile, Cat("unknown function ", f.ToString()));
      unknown.unknown_name = ctx.oracle != nullptr;
      return unknown;
    }
    if (*v != Volatility::kImmutable) {
      return Make(Reason::kVolatile,
                  Cat("function ", f.ToString(),
                               *v == Volatility::kStable ? " is stable" : " is volatile"));
    }
  }
  if (std::optional<Decision> calls = ResolvedCallsVolatility(a, ctx.oracle)) return std::move(*calls);
  Decision d;
  for (const QualifiedName& r : a.relations_read) {
    std::optional<RelationInfo> info =
        ctx.oracle != nullptr ? ctx.oracle->Relation(r) : std::nullopt;
    if (!info.has_value()) {
      Decision unknown = Make(Reason::kTemporaryTable, Cat("unknown relation ", r.ToString()));
      unknown.unknown_name = ctx.oracle != nullptr;
      return unknown;
    }
    if (info->temporary) {
      return Make(Reason::kTemporaryTable, Cat("temporary relation ", r.ToString()));
    }
    if (info->kind == 'S') return Make(Reason::kVolatile, Cat("sequence ", r.ToString()));
    if (info->nonimmutable_functions) {
      return Make(Reason::kVolatile,
                  Cat("view ", r.ToString(), " calls a non-immutable function"));
    }
    for (std::string& t : info->base_tables) AddUnique(d.tables, std::move(t));
  }
  d.reason = Reason::kCacheable;
  return d;
}

Decision Decide(const StatementAnalysis& a, const DecisionContext& ctx) {
  if (std::optional<Decision> d = DecideBeforeParams(a, ctx)) return std::move(*d);
  if (std::optional<Decision> d = DecideParams(ctx.params)) return std::move(*d);
  return DecideAfterParams(a, ctx);
}

Decision DecideSql(std::string_view sql, const DecisionContext& ctx, LexOptions options) {
  if (!options.standard_conforming_strings) {
    if (!ctx.enabled) return Make(Reason::kDisabled);
    if (ctx.max_query_bytes != 0 && sql.size() > ctx.max_query_bytes) return Make(Reason::kOversizedQuery);
    absl::StatusOr<StatementAnalysis> a = AnalyzeStatement(sql, options);
    if (!a.ok()) return Make(Reason::kParseError, std::string(a.status().message()));
    return Decide(*a, ctx);
  }
  SqlText text(sql);
  return DecideSql(text, ctx);
}

Decision DecideSql(const SqlText& text, const DecisionContext& ctx) {
  if (!ctx.enabled) return Make(Reason::kDisabled);
  if (ctx.max_query_bytes != 0 && text.sql().size() > ctx.max_query_bytes) {
    return Make(Reason::kOversizedQuery);
  }
  if (!ctx.standard_conforming_strings && text.sql().find('\\') != std::string_view::npos) {
    return Make(Reason::kParseError, "standard_conforming_strings is off and the text has a backslash");
  }
  const absl::StatusOr<StatementAnalysis>& a = text.analysis();
  if (!a.ok()) return Make(Reason::kParseError, std::string(a.status().message()));
  return Decide(*a, ctx);
}

std::optional<Decision> ResolvedCallsVolatility(const StatementAnalysis& a, const VolatilityOracle* oracle) {
  auto judge = [&](std::optional<Volatility> v, std::string_view what, std::string_view name,
                   bool unknown_is_volatile) -> std::optional<Decision> {
    if (!v.has_value()) {
      if (!unknown_is_volatile) return std::nullopt;
      Decision unknown = Make(Reason::kVolatile, Cat("unknown ", what, " ", name));
      unknown.unknown_name = oracle != nullptr;
      return unknown;
    }
    if (*v == Volatility::kImmutable) return std::nullopt;
    return Make(Reason::kVolatile,
                Cat(what, " ", name, *v == Volatility::kStable ? " is stable" : " is volatile"));
  };
  for (const std::string& f : a.attribute_names) {
    if (oracle == nullptr) break;  // no catalog: the relations are unknown anyway
    if (oracle->Unsettled(f)) {
      Decision unknown = Make(Reason::kVolatile, Cat("attribute-notation call ", f, " changed since the catalog read"));
      unknown.unknown_name = true;
      return unknown;
    }
    if (auto d = judge(oracle->AttributeCallVolatility(f), "attribute-notation call", f, false)) return d;
  }
  for (const QualifiedName& op : a.operators) {
    std::optional<Volatility> v = oracle != nullptr ? oracle->OperatorVolatility(op) : std::nullopt;
    if (auto d = judge(v, "operator", op.ToString(), true)) return d;
  }
  for (const QualifiedName& t : a.casts) {
    std::optional<Volatility> v = oracle != nullptr ? oracle->TypeVolatility(t) : std::nullopt;
    if (auto d = judge(v, "cast to", t.ToString(), true)) return d;
  }
  return std::nullopt;
}

std::optional<std::vector<std::string>> TablesToInvalidate(const StatementAnalysis& a,
                                                           const VolatilityOracle* oracle) {
  for (StatementKind k : a.kinds) {
    switch (k) {
      case StatementKind::kDdl:
      case StatementKind::kCall:
      case StatementKind::kDo:
      case StatementKind::kExecute:
      case StatementKind::kOther:
        return std::nullopt;
      default:
        break;
    }
  }
  if (a.writes_cascade) return std::nullopt;  // TRUNCATE ... CASCADE: the referencing tables too
  std::vector<std::string> out;
  // The written relations, then what their writes write (FK actions, which
  // may cascade further), until nothing new.
  std::vector<QualifiedName> work(a.relations_written.begin(), a.relations_written.end());
  for (size_t i = 0; i < work.size(); ++i) {
    if (i > 256) return std::nullopt;
    std::optional<RelationInfo> info = oracle != nullptr ? oracle->Relation(work[i]) : std::nullopt;
    if (!info.has_value() || info->writes_anything) return std::nullopt;
    for (std::string& t : info->base_tables) AddUnique(out, std::move(t));
    for (const std::string& t : info->also_writes) {
      const size_t dot = t.find('.');
      if (dot == std::string::npos) return std::nullopt;
      QualifiedName next{t.substr(0, dot), t.substr(dot + 1)};
      if (std::find(work.begin(), work.end(), next) == work.end()) work.push_back(std::move(next));
    }
  }
  // A volatile function in a "read" may write (SELECT my_func_that_inserts()).
  for (const QualifiedName& f : a.functions) {
    std::optional<Volatility> v = oracle != nullptr ? oracle->FunctionVolatility(f) : std::nullopt;
    if (!v.has_value()) return std::nullopt;
    if (*v == Volatility::kVolatile && !oracle->IsBuiltinFunction(f)) return std::nullopt;
  }
  // A volatile function behind an operator, a cast or t.f may write too
  // (built-in operators report immutable).
  if (std::optional<Decision> calls = ResolvedCallsVolatility(a, oracle);
      calls.has_value() && (calls->unknown_name || calls->detail.ends_with("is volatile") || oracle == nullptr)) {
    return std::nullopt;
  }
  return out;
}

// ---------------------------------------------------------------------------
// Catalog snapshot.
// ---------------------------------------------------------------------------

std::vector<std::string> ParseSearchPath(std::string_view setting, std::string_view user) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < setting.size()) {
    while (i < setting.size() && (setting[i] == ' ' || setting[i] == '\t' || setting[i] == ',')) ++i;
    if (i >= setting.size()) break;
    std::string name;
    bool quoted = setting[i] == '"';
    if (quoted) {
      ++i;
      while (i < setting.size()) {
        if (setting[i] == '"') {
          if (i + 1 < setting.size() && setting[i + 1] == '"') {
            name.push_back('"');
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        name.push_back(setting[i++]);
      }
    } else {
      while (i < setting.size() && setting[i] != ',') {
        char c = setting[i++];
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        name.push_back(c);
      }
      while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
    }
    while (i < setting.size() && setting[i] != ',') ++i;
    if (name == "$user") {
      if (!user.empty()) out.emplace_back(user);
      continue;
    }
    if (!name.empty()) out.push_back(std::move(name));
  }
  return out;
}

absl::Status CatalogSnapshot::AddFunctionRow(Row row) {
  if (row.size() != 3 || !row[0] || !row[1] || !row[2] || row[2]->size() != 1) {
    return absl::InvalidArgumentError("function row: want (nspname, proname, provolatile)");
  }
  char v = (*row[2])[0];
  if (v != 'i' && v != 's' && v != 'v') return absl::InvalidArgumentError("bad provolatile");
  std::string key = MapKey(*row[0], *row[1]);
  auto [it, inserted] = functions_.try_emplace(key, static_cast<Volatility>(v));
  if (!inserted) {
    // Rows for one name should be aggregated already; keep the most volatile.
    if (v > static_cast<char>(it->second)) it->second = static_cast<Volatility>(v);
  } else {
    function_schemas_[std::string(*row[1])].emplace_back(*row[0]);
  }
  return absl::OkStatus();
}

absl::Status CatalogSnapshot::AddRelationRow(Row row) {
  if ((row.size() != 6 && row.size() != 7) || !row[0] || !row[1] || !row[2] || !row[3] ||
      row[2]->size() != 1 || row[3]->size() != 1) {
    return absl::InvalidArgumentError(
        "relation row: want (nspname, relname, relkind, relpersistence, root_nspname, "
        "root_relname, viewdef)");
  }
  Rel rel;
  rel.kind = (*row[2])[0];
  rel.temporary = (*row[3])[0] == 't';
  if (row[4] && row[5]) rel.root = Join(*row[4], *row[5]);
  if (row.size() == 7 && row[6]) rel.viewdef = std::string(*row[6]);
  std::string key = MapKey(*row[0], *row[1]);
  if (!relations_.contains(key)) relation_schemas_[std::string(*row[1])].emplace_back(*row[0]);
  relations_[key] = std::move(rel);
  return absl::OkStatus();
}

absl::Status CatalogSnapshot::AddViewDependencyRow(Row row) {
  if (row.size() != 6 || !row[0] || !row[1] || !row[2] || !row[3] || !row[4] || !row[5] ||
      row[2]->size() != 1 || ((*row[2])[0] != 'r' && (*row[2])[0] != 'f')) {
    return absl::InvalidArgumentError(
        "view dependency row: want (view_nspname, view_relname, 'r'|'f', nspname, name, flag)");
  }
  view_deps_[MapKey(*row[0], *row[1])].push_back(
      ViewDep{(*row[2])[0], std::string(*row[3]), std::string(*row[4]), std::string(*row[5])});
  return absl::OkStatus();
}

absl::Status CatalogSnapshot::AddSideRow(Row row) {
  if (row.size() != 4 || !row[0] || !row[1] || !row[2] || !row[3] || row[0]->size() != 1 || row[3]->size() != 1) {
    return absl::InvalidArgumentError("side row: want (kind, nspname, name, provolatile)");
  }
  const char v = (*row[3])[0];
  if (v != 'i' && v != 's' && v != 'v') return absl::InvalidArgumentError("bad provolatile");
  std::string key = Cat(*row[0], MapKey(*row[1], *row[2]));
  auto [it, inserted] = side_.try_emplace(std::move(key), static_cast<Volatility>(v));
  if (!inserted && v > static_cast<char>(it->second)) it->second = static_cast<Volatility>(v);
  if (inserted && (*row[0])[0] == 't') ++type_schema_count_[std::string(*row[2])];
  return absl::OkStatus();
}

absl::Status CatalogSnapshot::AddWriteEffectRow(Row row) {
  if (row.size() != 5 || !row[0] || !row[1] || !row[2] || row[2]->size() != 1 ||
      ((*row[2])[0] == 'c' && (!row[3] || !row[4]))) {
    return absl::InvalidArgumentError("write effect row: want (nspname, relname, 'a'|'c', nspname, relname)");
  }
  // A partition's trigger fires for a write through its root as well.
  std::vector<std::string> keys{MapKey(*row[0], *row[1])};
  if (auto it = relations_.find(keys[0]); it != relations_.end() && !it->second.root.empty()) {
    const std::string& root = it->second.root;
    const size_t dot = root.find('.');
    if (dot != std::string::npos) keys.push_back(MapKey(root.substr(0, dot), root.substr(dot + 1)));
  }
  for (const std::string& key : keys) {
    if ((*row[2])[0] == 'a') {
      writes_anything_.insert(key);
    } else {
      AddUnique(also_writes_[key], Join(*row[3], *row[4]));
    }
  }
  return absl::OkStatus();
}

class SnapshotOracle final : public VolatilityOracle {
 public:
  SnapshotOracle(const CatalogSnapshot& s, std::vector<std::string> path)
      : s_(s), path_(std::move(path)) {
    if (std::find(path_.begin(), path_.end(), "pg_catalog") == path_.end()) {
      path_.insert(path_.begin(), "pg_catalog");
    }
  }

  std::optional<Volatility> FunctionVolatility(const QualifiedName& n) const override {
    if (!n.schema.empty()) {
      auto it = s_.functions_.find(LookupKey(n.schema, n.name).view());
      if (it == s_.functions_.end()) return std::nullopt;
      return it->second;
    }
    // Without argument types we cannot pick the overload PostgreSQL would:
    // take the most volatile visible one.
    std::optional<Volatility> worst;
    for (const std::string& schema : path_) {
      if (IsTempSchema(schema)) continue;  // Functions are never found in pg_temp implicitly.
      auto it = s_.functions_.find(LookupKey(schema, n.name).view());
      if (it == s_.functions_.end()) continue;
      if (!worst || static_cast<char>(it->second) > static_cast<char>(*worst)) worst = it->second;
    }
    return worst;
  }

  std::optional<Volatility> OperatorVolatility(const QualifiedName& n) const override {
    // Without operand types, the most volatile operator of that name on the
    // path (PostgreSQL picks among all of them by type).
    return Side('o', n, [](std::string_view schema, Volatility v) {
      return schema == "pg_catalog" && v != Volatility::kVolatile ? Volatility::kImmutable : v;
    });
  }
  std::optional<Volatility> TypeVolatility(const QualifiedName& n) const override {
    return Side('t', n, [](std::string_view, Volatility v) { return v; }, /*first_only=*/true);
  }
  std::optional<Volatility> AttributeCallVolatility(std::string_view name) const override {
    return Side('a', QualifiedName{"", std::string(name)}, [](std::string_view, Volatility v) { return v; });
  }

  bool Shadowed(std::string_view name) const override {
    const absl::string_view key(name.data(), name.size());
    auto rel = s_.relation_schemas_.find(key);
    if (rel != s_.relation_schemas_.end() && rel->second.size() > 1) return true;
    auto type = s_.type_schema_count_.find(key);
    return type != s_.type_schema_count_.end() && type->second > 1;
  }

  bool IsBuiltinFunction(const QualifiedName& n) const override {
    if (!n.schema.empty()) return n.schema == "pg_catalog";
    auto schemas = s_.function_schemas_.find(n.name);
    if (schemas == s_.function_schemas_.end()) return false;
    for (const std::string& schema : schemas->second) {
      if (schema != "pg_catalog" &&
          std::find(path_.begin(), path_.end(), schema) != path_.end()) {
        return false;
      }
    }
    return true;
  }

  std::optional<RelationInfo> Relation(const QualifiedName& n) const override {
    auto schemas = s_.relation_schemas_.find(n.name);
    if (schemas == s_.relation_schemas_.end()) return std::nullopt;
    if (n.schema.empty() || n.schema == "pg_temp") {
      // Any session's temp relation of this name may be the one a pooled
      // connection sees first.
      for (const std::string& schema : schemas->second) {
        if (IsTempSchema(schema)) return Info(schema, n.name);
      }
      if (n.schema == "pg_temp") return std::nullopt;
      // The schemas holding this name are listed: the first on the path
      // that is among them is the one (no look-up per path entry).
      for (const std::string& schema : path_) {
        if (std::find(schemas->second.begin(), schemas->second.end(), schema) != schemas->second.end()) {
          return Info(schema, n.name);
        }
      }
      return std::nullopt;
    }
    if (!s_.relations_.contains(LookupKey(n.schema, n.name).view())) return std::nullopt;
    return Info(n.schema, n.name);
  }

 private:
  // kSideCatalogQuery's entry of `kind` for `n`: qualified, that schema's;
  // else the most volatile over the path (`first_only`: the first found,
  // as a type name resolves), each mapped through `adjust`.
  template <typename Adjust>
  std::optional<Volatility> Side(char kind, const QualifiedName& n, Adjust adjust, bool first_only = false) const {
    auto find = [&](std::string_view schema) -> std::optional<Volatility> {
      auto it = s_.side_.find(Cat(std::string_view(&kind, 1), MapKey(schema, n.name)));
      if (it == s_.side_.end()) return std::nullopt;
      return adjust(schema, it->second);
    };
    if (!n.schema.empty()) return find(n.schema);
    std::optional<Volatility> worst;
    for (const std::string& schema : path_) {
      std::optional<Volatility> v = find(schema);
      if (!v) continue;
      if (first_only) return v;
      if (!worst || static_cast<char>(*v) > static_cast<char>(*worst)) worst = v;
    }
    return worst;
  }

  std::string Invalidation(const std::string& schema, const std::string& name) const {
    auto it = s_.relations_.find(LookupKey(schema, name).view());
    if (it != s_.relations_.end() && !it->second.root.empty()) return it->second.root;
    return Join(schema, name);
  }

  // True if a view definition calls anything not immutable (or unknown), or
  // reads a view that does, up to a nesting depth.
  // `names`: every name the definition reads or calls (nested views'
  // included) is added to it.
  bool DefinitionNonImmutable(const std::string& viewdef, int depth, std::vector<std::string>& names) const {
    if (depth > 16) return true;
    absl::StatusOr<StatementAnalysis> a = AnalyzeStatement(viewdef);
    if (!a.ok()) return true;
    for (const QualifiedName& f : a->functions) AddUnique(names, f.name);
    for (const QualifiedName& o : a->operators) AddUnique(names, o.name);
    for (const QualifiedName& t : a->casts) AddUnique(names, t.name);
    for (const std::string& f : a->attribute_names) AddUnique(names, f);
    bool nonimmutable = !a->value_functions.empty() || a->has_time_literal;
    // Definitions are printed under search_path = pg_catalog.
    SnapshotOracle printed(s_, {"pg_catalog"});
    for (const QualifiedName& f : a->functions) {
      std::optional<Volatility> v = printed.FunctionVolatility(f);
      if (!v || *v != Volatility::kImmutable) nonimmutable = true;
    }
    if (ResolvedCallsVolatility(*a, &printed).has_value()) nonimmutable = true;
    for (const QualifiedName& r : a->relations_read) {
      AddUnique(names, r.name);
      std::optional<RelationInfo> info = printed.Info(r, depth + 1);
      if (!info || info->nonimmutable_functions) nonimmutable = true;
      if (info) {
        for (std::string& n : info->depends_on) AddUnique(names, std::move(n));
      }
    }
    return nonimmutable;
  }

  std::optional<RelationInfo> Info(const QualifiedName& n, int depth) const {
    if (!n.schema.empty()) {
      if (!s_.relations_.contains(LookupKey(n.schema, n.name).view())) return std::nullopt;
      return Info(n.schema, n.name, depth);
    }
    for (const std::string& schema : path_) {
      if (s_.relations_.contains(LookupKey(schema, n.name).view())) return Info(schema, n.name, depth);
    }
    return std::nullopt;
  }

  RelationInfo Info(const std::string& schema, const std::string& name, int depth = 0) const {
    const CatalogSnapshot::Rel& rel = s_.relations_.at(LookupKey(schema, name).view());
    RelationInfo info;
    info.resolved = Join(schema, name);
    info.kind = rel.kind;
    info.temporary = rel.temporary || IsTempSchema(schema);
    const LookupKey key(schema, name);
    info.writes_anything = s_.writes_anything_.contains(key.view());
    if (auto also = s_.also_writes_.find(key.view()); also != s_.also_writes_.end()) info.also_writes = also->second;
    if (rel.kind != 'v') {
      // Invalidation(schema, name), from the entry already found.
      info.base_tables.push_back(!rel.root.empty() ? rel.root : info.resolved);
      return info;
    }
    if (!rel.viewdef.empty() && DefinitionNonImmutable(rel.viewdef, depth, info.depends_on)) {
      info.nonimmutable_functions = true;
    }
    auto deps = s_.view_deps_.find(LookupKey(schema, name).view());
    if (deps == s_.view_deps_.end()) return info;
    for (const CatalogSnapshot::ViewDep& d : deps->second) {
      AddUnique(info.depends_on, d.name);
      if (d.dep_kind == 'f') {
        if (d.flag != "i") info.nonimmutable_functions = true;
        continue;
      }
      if (d.flag.size() >= 2 && d.flag[1] == 't') info.temporary = true;
      if (!d.flag.empty() && d.flag[0] == 'S') info.nonimmutable_functions = true;
      AddUnique(info.base_tables, Invalidation(d.schema, d.name));
    }
    return info;
  }

  const CatalogSnapshot& s_;
  std::vector<std::string> path_;
};

std::unique_ptr<VolatilityOracle> CatalogSnapshot::Oracle(std::vector<std::string> path) const {
  return std::make_unique<SnapshotOracle>(*this, std::move(path));
}

// ---------------------------------------------------------------------------
// Fake oracle.
// ---------------------------------------------------------------------------

FakeOracle& FakeOracle::Function(std::string name, Volatility v) {
  functions_[std::move(name)] = v;
  return *this;
}
FakeOracle& FakeOracle::Table(std::string name, bool temporary) {
  RelationInfo info;
  info.resolved = name.find('.') == std::string::npos ? "public." + name : name;
  info.temporary = temporary;
  info.base_tables.push_back(info.resolved);
  relations_[std::move(name)] = std::move(info);
  return *this;
}
FakeOracle& FakeOracle::View(std::string name, std::vector<std::string> base_tables,
                             bool nonimmutable_functions) {
  RelationInfo info;
  info.resolved = name.find('.') == std::string::npos ? "public." + name : name;
  info.kind = 'v';
  info.base_tables = std::move(base_tables);
  info.nonimmutable_functions = nonimmutable_functions;
  relations_[std::move(name)] = std::move(info);
  return *this;
}
FakeOracle& FakeOracle::Writes(std::string name, std::vector<std::string> also) {
  RelationInfo& info = relations_.at(name);
  for (std::string& t : also) {
    if (t == "*") {
      info.writes_anything = true;
    } else {
      info.also_writes.push_back(std::move(t));
    }
  }
  return *this;
}
FakeOracle& FakeOracle::Sequence(std::string name) {
  RelationInfo info;
  info.resolved = name.find('.') == std::string::npos ? "public." + name : name;
  info.kind = 'S';
  info.base_tables.push_back(info.resolved);
  relations_[std::move(name)] = std::move(info);
  return *this;
}
FakeOracle& FakeOracle::Builtin(std::string name, Volatility v) {
  builtins_.insert(name);
  functions_[std::move(name)] = v;
  return *this;
}
bool FakeOracle::IsBuiltinFunction(const QualifiedName& n) const {
  return builtins_.contains(n.ToString());
}
std::optional<Volatility> FakeOracle::FunctionVolatility(const QualifiedName& n) const {
  auto it = functions_.find(n.ToString());
  if (it == functions_.end()) return std::nullopt;
  return it->second;
}
FakeOracle& FakeOracle::Operator(std::string name, Volatility v) {
  operators_[std::move(name)] = v;
  return *this;
}
FakeOracle& FakeOracle::Type(std::string name, Volatility v) {
  types_[std::move(name)] = v;
  return *this;
}
FakeOracle& FakeOracle::AttributeFunction(std::string name, Volatility v) {
  attribute_functions_[std::move(name)] = v;
  return *this;
}
std::optional<Volatility> FakeOracle::OperatorVolatility(const QualifiedName& n) const {
  auto it = operators_.find(n.ToString());
  return it == operators_.end() ? Volatility::kImmutable : it->second;
}
std::optional<Volatility> FakeOracle::TypeVolatility(const QualifiedName& n) const {
  auto it = types_.find(n.ToString());
  return it == types_.end() ? Volatility::kImmutable : it->second;
}
std::optional<Volatility> FakeOracle::AttributeCallVolatility(std::string_view name) const {
  auto it = attribute_functions_.find(std::string(name));
  if (it == attribute_functions_.end()) return std::nullopt;
  return it->second;
}
std::optional<RelationInfo> FakeOracle::Relation(const QualifiedName& n) const {
  auto it = relations_.find(n.ToString());
  if (it == relations_.end()) return std::nullopt;
  return it->second;
}

// ---------------------------------------------------------------------------
// Decision statistics.
// ---------------------------------------------------------------------------

void DecisionStats::Record(uint64_t fingerprint, Reason reason, std::string_view normalized) {
  Record(fingerprint, reason, [normalized] { return std::string(normalized); });
}

void DecisionStats::Record(uint64_t fingerprint, Reason reason,
                           absl::FunctionRef<std::string()> normalized) {
  if (capacity_ == 0) return;
  Key key{fingerprint, reason};
  if (auto it = index_.find(key); it != index_.end()) {
    ++it->second->count;
    rows_.splice(rows_.begin(), rows_, it->second);
    return;
  }
  if (rows_.size() >= capacity_) {
    const Row& victim = rows_.back();
    index_.erase(Key{victim.fingerprint, victim.reason});
    rows_.pop_back();
    ++dropped_;
  }
  std::string sample = normalized();
  if (sample.size() > kSampleBytes) sample.resize(kSampleBytes);
  rows_.push_front(Row{fingerprint, reason, 1, std::move(sample)});
  index_.emplace(key, rows_.begin());
}

std::vector<DecisionStats::Row> DecisionStats::Top(size_t n) const {
  std::vector<Row> out(rows_.begin(), rows_.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const Row& a, const Row& b) { return a.count > b.count; });
  if (out.size() > n) out.resize(n);
  return out;
}

std::optional<uint64_t> DecisionStats::Count(uint64_t fingerprint, Reason reason) const {
  auto it = index_.find(Key{fingerprint, reason});
  if (it == index_.end()) return std::nullopt;
  return it->second->count;
}

}  // namespace hyperpool::cache
