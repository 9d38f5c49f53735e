// The statement analysis (sql_analysis.h, AnalyzeStatement) from
// PostgreSQL's own grammar: libpg_query parses the text into the raw parse
// tree the server would build (PostgreSQL 15's gram.y), and one walk over it
// collects what the cache decides on. The walk is generic (protobuf-c's
// descriptors enumerate every node's children), so a node kind it does not
// name is still descended into: a relation or a call inside it is found.
//
// What a raw parse tree cannot tell (which function an operator, a cast or
// an attribute-notation reference calls) is reported as names for the
// catalog to resolve (cacheability.h).

#include <pg_query.h>
#include <pg_query/pg_query.pb-c.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/sql_analysis.h"
#include "cache/string_hash.h"

namespace hyperpool::cache {
namespace {

using Set = absl::flat_hash_set<std::string_view, StringHash, StringEq>;

// Casting a time word to one of these keeps it a plain string.
const Set& NonTimeTypes() {
  static const Set* s = new Set{"text",  "varchar", "character", "char",    "bpchar",  "name",
                                "json",  "jsonb",   "xml",       "bytea",   "citext",  "uuid",
                                "bool",  "boolean", "jsonpath",  "tsquery", "tsvector", "regclass",
                                "int2",  "int4",    "int8",      "numeric", "float4",  "float8"};
  return *s;
}

template <typename T>
void AddUnique(std::vector<T>& v, T x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(std::move(x));
}

std::string_view Str(const char* s) { return s == nullptr ? std::string_view() : std::string_view(s); }

// The String nodes of a name list (funcname, operator name, type names).
std::vector<std::string_view> Strings(size_t n, PgQuery__Node* const* nodes) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < n; ++i) {
    if (nodes[i] != nullptr && nodes[i]->node_case == PG_QUERY__NODE__NODE_STRING && nodes[i]->string != nullptr) {
      out.push_back(Str(nodes[i]->string->sval));
    }
  }
  return out;
}

// The last two parts of a name list (a catalog part is dropped).
QualifiedName NameOf(const std::vector<std::string_view>& parts) {
  QualifiedName n;
  if (parts.empty()) return n;
  n.name = std::string(parts.back());
  if (parts.size() >= 2) n.schema = std::string(parts[parts.size() - 2]);
  return n;
}

std::string_view ValueFunctionName(PgQuery__SQLValueFunctionOp op) {
  switch (op) {
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_DATE: return "current_date";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_TIME:
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_TIME_N: return "current_time";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_TIMESTAMP:
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_TIMESTAMP_N: return "current_timestamp";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_LOCALTIME:
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_LOCALTIME_N: return "localtime";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_LOCALTIMESTAMP:
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_LOCALTIMESTAMP_N: return "localtimestamp";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_ROLE: return "current_role";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_USER: return "current_user";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_USER: return "user";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_SESSION_USER: return "session_user";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_CATALOG: return "current_catalog";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_SCHEMA: return "current_schema";
    default: return "sqlvaluefunction";
  }
}

// The statement kind of one raw statement's node.
StatementKind KindOfNode(const PgQuery__Node* n) {
  if (n == nullptr) return StatementKind::kEmpty;
  switch (n->node_case) {
    case PG_QUERY__NODE__NODE_SELECT_STMT: return StatementKind::kSelect;
    case PG_QUERY__NODE__NODE_INSERT_STMT: return StatementKind::kInsert;
    case PG_QUERY__NODE__NODE_UPDATE_STMT: return StatementKind::kUpdate;
    case PG_QUERY__NODE__NODE_DELETE_STMT: return StatementKind::kDelete;
    case PG_QUERY__NODE__NODE_MERGE_STMT: return StatementKind::kMerge;
    case PG_QUERY__NODE__NODE_TRUNCATE_STMT: return StatementKind::kTruncate;
    case PG_QUERY__NODE__NODE_COPY_STMT:
      return n->copy_stmt != nullptr && n->copy_stmt->is_from ? StatementKind::kCopyFrom : StatementKind::kCopyTo;
    case PG_QUERY__NODE__NODE_VACUUM_STMT:
    case PG_QUERY__NODE__NODE_CLUSTER_STMT:
    case PG_QUERY__NODE__NODE_REINDEX_STMT:
    case PG_QUERY__NODE__NODE_CHECK_POINT_STMT: return StatementKind::kMaintenance;
    case PG_QUERY__NODE__NODE_TRANSACTION_STMT: return StatementKind::kTransaction;
    case PG_QUERY__NODE__NODE_VARIABLE_SET_STMT:
    case PG_QUERY__NODE__NODE_CONSTRAINTS_SET_STMT: return StatementKind::kSet;
    case PG_QUERY__NODE__NODE_VARIABLE_SHOW_STMT: return StatementKind::kShow;
    case PG_QUERY__NODE__NODE_PREPARE_STMT: return StatementKind::kPrepare;
    case PG_QUERY__NODE__NODE_EXECUTE_STMT: return StatementKind::kExecute;
    case PG_QUERY__NODE__NODE_DEALLOCATE_STMT: return StatementKind::kDeallocate;
    case PG_QUERY__NODE__NODE_DISCARD_STMT: return StatementKind::kDiscard;
    case PG_QUERY__NODE__NODE_LISTEN_STMT: return StatementKind::kListen;
    case PG_QUERY__NODE__NODE_UNLISTEN_STMT: return StatementKind::kUnlisten;
    case PG_QUERY__NODE__NODE_NOTIFY_STMT: return StatementKind::kNotify;
    case PG_QUERY__NODE__NODE_LOCK_STMT: return StatementKind::kLock;
    case PG_QUERY__NODE__NODE_CALL_STMT: return StatementKind::kCall;
    case PG_QUERY__NODE__NODE_DO_STMT: return StatementKind::kDo;
    case PG_QUERY__NODE__NODE_EXPLAIN_STMT: return StatementKind::kExplain;
    case PG_QUERY__NODE__NODE_DECLARE_CURSOR_STMT:
    case PG_QUERY__NODE__NODE_FETCH_STMT:
    case PG_QUERY__NODE__NODE_CLOSE_PORTAL_STMT: return StatementKind::kCursor;
    case PG_QUERY__NODE__NODE_LOAD_STMT: return StatementKind::kOther;
    default: return StatementKind::kDdl;  // CREATE, ALTER, DROP, GRANT, COMMENT, SECURITY LABEL, ...
  }
}

// One walk over a parse tree. `scope` holds the CTE names visible at the
// node being visited (innermost last); a CTE hides a table of its name only
// for an unqualified reference inside the WITH's own query.
class TreeWalker {
 public:
  explicit TreeWalker(StatementAnalysis& out) : out_(out) {}

  void Statement(const PgQuery__Node* stmt) { Visit(&stmt->base); }

 private:
  bool InScope(std::string_view name) const {
    return std::find(scope_.rbegin(), scope_.rend(), name) != scope_.rend();
  }

  void Relation(const PgQuery__RangeVar* rv, bool written) {
    if (rv == nullptr || rv->relname == nullptr) return;
    QualifiedName n;
    n.name = rv->relname;
    if (rv->schemaname != nullptr) n.schema = rv->schemaname;
    if (n.schema.empty() && !written && InScope(n.name)) return;  // a CTE reference
    AddUnique(written ? out_.relations_written : out_.relations_read, std::move(n));
  }

  // Visits every message-typed field of `m` but the ones named in `skip`.
  void Children(const ProtobufCMessage* m, std::initializer_list<const void*> skip = {}) {
    const ProtobufCMessageDescriptor* d = m->descriptor;
    const char* base = reinterpret_cast<const char*>(m);
    for (unsigned i = 0; i < d->n_fields; ++i) {
      const ProtobufCFieldDescriptor& f = d->fields[i];
      if (f.type != PROTOBUF_C_TYPE_MESSAGE) continue;
      const void* at = base + f.offset;
      if (std::find(skip.begin(), skip.end(), at) != skip.end()) continue;
      // A oneof's members share one union: only the set case is a child.
      if ((f.flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0 &&
          *reinterpret_cast<const uint32_t*>(base + f.quantifier_offset) != f.id) {
        continue;
      }
      if (f.label == PROTOBUF_C_LABEL_REPEATED) {
        const size_t n = *reinterpret_cast<const size_t*>(base + f.quantifier_offset);
        ProtobufCMessage* const* items = *reinterpret_cast<ProtobufCMessage* const* const*>(at);
        for (size_t k = 0; k < n; ++k) {
          if (items[k] != nullptr) Visit(items[k]);
        }
      } else {
        const ProtobufCMessage* child = *reinterpret_cast<const ProtobufCMessage* const*>(at);
        if (child != nullptr) Visit(child);
      }
    }
  }

  // A WITH clause's queries, then the rest of `m` with its names in scope.
  // `target`: a write's relation field (recorded as written after the
  // WITH's queries, not visited as a read).
  void WithScope(const ProtobufCMessage* m, const PgQuery__WithClause* with,
                 PgQuery__RangeVar* const* target = nullptr) {
    const size_t outer = scope_.size();
    if (with != nullptr) {
      for (size_t i = 0; i < with->n_ctes; ++i) {
        const PgQuery__Node* n = with->ctes[i];
        if (n == nullptr || n->node_case != PG_QUERY__NODE__NODE_COMMON_TABLE_EXPR) continue;
        const PgQuery__CommonTableExpr* cte = n->common_table_expr;
        // A recursive WITH sees all its names (itself included) in every
        // query; otherwise a query sees the ones before it.
        if (with->recursive) {
          for (size_t k = 0; k < with->n_ctes; ++k) {
            const PgQuery__Node* o = with->ctes[k];
            if (o != nullptr && o->node_case == PG_QUERY__NODE__NODE_COMMON_TABLE_EXPR) {
              scope_.emplace_back(Str(o->common_table_expr->ctename));
            }
          }
        }
        const PgQuery__Node* q = cte->ctequery;
        if (q != nullptr && (q->node_case == PG_QUERY__NODE__NODE_INSERT_STMT ||
                             q->node_case == PG_QUERY__NODE__NODE_UPDATE_STMT ||
                             q->node_case == PG_QUERY__NODE__NODE_DELETE_STMT ||
                             q->node_case == PG_QUERY__NODE__NODE_MERGE_STMT)) {
          out_.has_data_modifying_cte = true;
        }
        Visit(&cte->base);
        scope_.resize(outer + (with->recursive ? 0 : i));
        scope_.emplace_back(Str(cte->ctename));
      }
      scope_.resize(outer);
      for (size_t i = 0; i < with->n_ctes; ++i) {
        const PgQuery__Node* n = with->ctes[i];
        if (n != nullptr && n->node_case == PG_QUERY__NODE__NODE_COMMON_TABLE_EXPR) {
          scope_.emplace_back(Str(n->common_table_expr->ctename));
        }
      }
    }
    if (target != nullptr) Relation(*target, true);
    Children(m, {with != nullptr ? WithField(m) : nullptr, target});
    scope_.resize(outer);
  }

  // The address of `m`'s with_clause member (one of the statements that
  // have one).
  static const void* WithField(const ProtobufCMessage* m) {
    const ProtobufCMessageDescriptor* d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; ++i) {
      if (std::strcmp(d->fields[i].name, "with_clause") == 0) {
        return reinterpret_cast<const char*>(m) + d->fields[i].offset;
      }
    }
    return nullptr;
  }

  // A string constant that reads the clock at parse time, unless its cast
  // makes it a plain value.
  // `casts`: the types it is cast to, innermost first ('now'::text::date
  // still reads the clock); a pattern (LIKE, ILIKE, SIMILAR TO) is text.
  void Constant(const PgQuery__AConst* c, const std::vector<const PgQuery__TypeName*>& casts) {
    if (c->val_case != PG_QUERY__A__CONST__VAL_SVAL || c->sval == nullptr) return;
    if (!ContainsTimeWord(Str(c->sval->sval))) return;
    if (!casts.empty() && std::all_of(casts.begin(), casts.end(), [](const PgQuery__TypeName* t) {
          std::vector<std::string_view> parts = Strings(t->n_names, t->names);
          return !parts.empty() && t->n_array_bounds == 0 && NonTimeTypes().contains(parts.back());
        })) {
      return;
    }
    out_.has_time_literal = true;
  }

  // A cast, and the casts directly inside it, down to a constant.
  void Cast(const PgQuery__TypeCast* c) {
    std::vector<const PgQuery__TypeName*> chain;
    const PgQuery__Node* arg = nullptr;
    for (const PgQuery__TypeCast* at = c; at != nullptr;) {
      if (at->type_name != nullptr) {
        chain.insert(chain.begin(), at->type_name);
        QualifiedName n = NameOf(Strings(at->type_name->n_names, at->type_name->names));
        if (!n.name.empty()) AddUnique(out_.casts, std::move(n));
      }
      arg = at->arg;
      at = arg != nullptr && arg->node_case == PG_QUERY__NODE__NODE_TYPE_CAST ? arg->type_cast : nullptr;
    }
    if (arg == nullptr) return;
    if (arg->node_case == PG_QUERY__NODE__NODE_A_CONST) {
      Constant(arg->a_const, chain);
    } else {
      Visit(&arg->base);
    }
  }

  // An operator expression: its operators (BETWEEN as >= and <=); false
  // when its pattern operand was handled here (a LIKE's constant is text).
  bool Operator(const PgQuery__AExpr* e) {
    switch (e->kind) {
      case PG_QUERY__A__EXPR__KIND__AEXPR_BETWEEN:
      case PG_QUERY__A__EXPR__KIND__AEXPR_NOT_BETWEEN:
      case PG_QUERY__A__EXPR__KIND__AEXPR_BETWEEN_SYM:
      case PG_QUERY__A__EXPR__KIND__AEXPR_NOT_BETWEEN_SYM:
        AddUnique(out_.operators, QualifiedName{"", ">="});
        AddUnique(out_.operators, QualifiedName{"", "<="});
        break;
      default: {
        QualifiedName n = NameOf(Strings(e->n_name, e->name));
        if (!n.name.empty()) AddUnique(out_.operators, std::move(n));
        break;
      }
    }
    const bool pattern = e->kind == PG_QUERY__A__EXPR__KIND__AEXPR_LIKE ||
                         e->kind == PG_QUERY__A__EXPR__KIND__AEXPR_ILIKE ||
                         e->kind == PG_QUERY__A__EXPR__KIND__AEXPR_SIMILAR;
    if (pattern && e->rexpr != nullptr && e->rexpr->node_case == PG_QUERY__NODE__NODE_A_CONST) {
      if (e->lexpr != nullptr) Visit(&e->lexpr->base);  // the pattern is text, not a time
      return true;
    }
    return false;
  }

  void Visit(const ProtobufCMessage* m) {
    const ProtobufCMessageDescriptor* d = m->descriptor;
    if (d == &pg_query__node__descriptor) {
      const auto* n = reinterpret_cast<const PgQuery__Node*>(m);
      if (n->node_case == PG_QUERY__NODE__NODE_A_CONST) {
        Constant(n->a_const, {});
        return;
      }
      Children(m);
      return;
    }
    if (d == &pg_query__range_var__descriptor) {
      Relation(reinterpret_cast<const PgQuery__RangeVar*>(m), false);
      return;
    }
    if (d == &pg_query__select_stmt__descriptor) {
      const auto* s = reinterpret_cast<const PgQuery__SelectStmt*>(m);
      if (s->n_locking_clause > 0) out_.has_row_locks = true;
      if (s->into_clause != nullptr) out_.has_select_into = true;
      WithScope(m, s->with_clause);
      return;
    }
    if (d == &pg_query__into_clause__descriptor) {
      const auto* into = reinterpret_cast<const PgQuery__IntoClause*>(m);
      Children(m, {&into->rel});  // the table it creates is not read
      return;
    }
    if (d == &pg_query__insert_stmt__descriptor) {
      const auto* s = reinterpret_cast<const PgQuery__InsertStmt*>(m);
      WithScope(m, s->with_clause, &s->relation);  // the target is recorded
      return;
    }
    if (d == &pg_query__update_stmt__descriptor) {
      const auto* s = reinterpret_cast<const PgQuery__UpdateStmt*>(m);
      WithScope(m, s->with_clause, &s->relation);  // the target is recorded
      return;
    }
    if (d == &pg_query__delete_stmt__descriptor) {
      const auto* s = reinterpret_cast<const PgQuery__DeleteStmt*>(m);
      WithScope(m, s->with_clause, &s->relation);  // the target is recorded
      return;
    }
    if (d == &pg_query__merge_stmt__descriptor) {
      const auto* s = reinterpret_cast<const PgQuery__MergeStmt*>(m);
      WithScope(m, s->with_clause, &s->relation);  // the target is recorded
      return;
    }
    if (d == &pg_query__truncate_stmt__descriptor) {
      const auto* s = reinterpret_cast<const PgQuery__TruncateStmt*>(m);
      if (s->behavior == PG_QUERY__DROP_BEHAVIOR__DROP_CASCADE) out_.writes_cascade = true;
      for (size_t i = 0; i < s->n_relations; ++i) {
        if (s->relations[i] != nullptr && s->relations[i]->node_case == PG_QUERY__NODE__NODE_RANGE_VAR) {
          Relation(s->relations[i]->range_var, true);
        }
      }
      return;
    }
    if (d == &pg_query__copy_stmt__descriptor) {
      const auto* s = reinterpret_cast<const PgQuery__CopyStmt*>(m);
      Relation(s->relation, s->is_from);
      Children(m, {&s->relation});
      return;
    }
    if (d == &pg_query__func_call__descriptor) {
      const auto* f = reinterpret_cast<const PgQuery__FuncCall*>(m);
      QualifiedName n = NameOf(Strings(f->n_funcname, f->funcname));
      if (!n.name.empty()) AddUnique(out_.functions, std::move(n));
      Children(m);
      return;
    }
    if (d == &pg_query__listen_stmt__descriptor) {
      out_.listens.emplace_back('L', std::string(Str(reinterpret_cast<const PgQuery__ListenStmt*>(m)->conditionname)));
      return;
    }
    if (d == &pg_query__unlisten_stmt__descriptor) {
      std::string_view channel = Str(reinterpret_cast<const PgQuery__UnlistenStmt*>(m)->conditionname);
      out_.listens.emplace_back(channel.empty() ? '*' : 'U', std::string(channel));
      return;
    }
    if (d == &pg_query__sqlvalue_function__descriptor) {
      const auto* f = reinterpret_cast<const PgQuery__SQLValueFunction*>(m);
      AddUnique(out_.value_functions, std::string(ValueFunctionName(f->op)));
      return;
    }
    if (d == &pg_query__a__expr__descriptor) {
      if (!Operator(reinterpret_cast<const PgQuery__AExpr*>(m))) Children(m);
      return;
    }
    if (d == &pg_query__sort_by__descriptor) {
      const auto* s = reinterpret_cast<const PgQuery__SortBy*>(m);
      QualifiedName n = NameOf(Strings(s->n_use_op, s->use_op));
      if (!n.name.empty()) AddUnique(out_.operators, std::move(n));
      if (s->node != nullptr) Visit(&s->node->base);
      return;
    }
    if (d == &pg_query__type_cast__descriptor) {
      Cast(reinterpret_cast<const PgQuery__TypeCast*>(m));
      return;
    }
    if (d == &pg_query__range_table_sample__descriptor) {
      // The sampling method is a function (tsm_handler; SYSTEM and
      // BERNOULLI are volatile: each run samples anew).
      const auto* t = reinterpret_cast<const PgQuery__RangeTableSample*>(m);
      QualifiedName n = NameOf(Strings(t->n_method, t->method));
      if (!n.name.empty()) AddUnique(out_.functions, std::move(n));
      Children(m);
      return;
    }
    if (d == &pg_query__column_ref__descriptor) {
      const auto* r = reinterpret_cast<const PgQuery__ColumnRef*>(m);
      // rel.f may be f(rel) (PostgreSQL docs, "Function Call" notation).
      if (r->n_fields >= 2 && r->fields[r->n_fields - 1] != nullptr &&
          r->fields[r->n_fields - 1]->node_case == PG_QUERY__NODE__NODE_STRING) {
        AddUnique(out_.attribute_names, std::string(Str(r->fields[r->n_fields - 1]->string->sval)));
      }
      return;
    }
    if (d == &pg_query__a__indirection__descriptor) {
      const auto* r = reinterpret_cast<const PgQuery__AIndirection*>(m);
      for (size_t i = 0; i < r->n_indirection; ++i) {
        const PgQuery__Node* x = r->indirection[i];
        if (x != nullptr && x->node_case == PG_QUERY__NODE__NODE_STRING) {
          AddUnique(out_.attribute_names, std::string(Str(x->string->sval)));
        }
      }
      Children(m);
      return;
    }
    Children(m);
  }

  StatementAnalysis& out_;
  std::vector<std::string> scope_;
};

// What one statement may change in the catalog (StatementAnalysis::
// catalog_names): every string its tree holds up to an identifier's length,
// or unbounded when the statement reaches objects it does not name.
class CatalogNameWalker {
 public:
  explicit CatalogNameWalker(StatementAnalysis& out) : out_(out) {}

  // `ddl`: a DDL statement, which names what it changes (if it names
  // nothing, nothing bounds it).
  void Statement(const PgQuery__Node* stmt, bool ddl) {
    switch (stmt->node_case) {
      case PG_QUERY__NODE__NODE_CREATE_EXTENSION_STMT:
      case PG_QUERY__NODE__NODE_ALTER_EXTENSION_STMT:
      case PG_QUERY__NODE__NODE_ALTER_EXTENSION_CONTENTS_STMT:
      case PG_QUERY__NODE__NODE_DROP_OWNED_STMT:
      case PG_QUERY__NODE__NODE_REASSIGN_OWNED_STMT:
      case PG_QUERY__NODE__NODE_ALTER_DATABASE_STMT:
      case PG_QUERY__NODE__NODE_ALTER_DATABASE_SET_STMT:
      case PG_QUERY__NODE__NODE_ALTER_ROLE_SET_STMT:
      case PG_QUERY__NODE__NODE_ALTER_SYSTEM_STMT:
      case PG_QUERY__NODE__NODE_IMPORT_FOREIGN_SCHEMA_STMT:
      case PG_QUERY__NODE__NODE_CREATE_EVENT_TRIG_STMT:
      case PG_QUERY__NODE__NODE_ALTER_EVENT_TRIG_STMT:
        out_.catalog_unbounded = true;  // objects (or a search path) no name in the text bounds
        return;
      case PG_QUERY__NODE__NODE_GRANT_STMT:
      case PG_QUERY__NODE__NODE_GRANT_ROLE_STMT:
      case PG_QUERY__NODE__NODE_ALTER_DEFAULT_PRIVILEGES_STMT:
      case PG_QUERY__NODE__NODE_COMMENT_STMT:
      case PG_QUERY__NODE__NODE_SEC_LABEL_STMT:
      case PG_QUERY__NODE__NODE_ALTER_OWNER_STMT:
      case PG_QUERY__NODE__NODE_CREATE_ROLE_STMT:
      case PG_QUERY__NODE__NODE_ALTER_ROLE_STMT:
      case PG_QUERY__NODE__NODE_DROP_ROLE_STMT:
        return;  // privileges, comments, owners, roles: nothing a decision reads
      default:
        break;
    }
    const size_t before = out_.catalog_names.size();
    Visit(&stmt->base);
    if (ddl && out_.catalog_names.size() == before) out_.catalog_unbounded = true;
  }

 private:
  void Visit(const ProtobufCMessage* m) {
    if (out_.catalog_unbounded) return;
    const ProtobufCMessageDescriptor* d = m->descriptor;
    const char* base = reinterpret_cast<const char*>(m);
    for (unsigned i = 0; i < d->n_fields; ++i) {
      const ProtobufCFieldDescriptor& f = d->fields[i];
      if ((f.flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0 &&
          *reinterpret_cast<const uint32_t*>(base + f.quantifier_offset) != f.id) {
        continue;
      }
      const void* at = base + f.offset;
      if (f.type == PROTOBUF_C_TYPE_ENUM && f.label != PROTOBUF_C_LABEL_REPEATED) {
        const int v = *reinterpret_cast<const int*>(at);
        // CASCADE drops what depends on the objects named (catalog_cascade);
        // a schema's or an extension's objects are not named at all, and a
        // role's name is the search path's "$user".
        if (f.descriptor == &pg_query__drop_behavior__descriptor && v == PG_QUERY__DROP_BEHAVIOR__DROP_CASCADE) {
          out_.catalog_cascade = true;
        } else if (f.descriptor == &pg_query__object_type__descriptor &&
                   (v == PG_QUERY__OBJECT_TYPE__OBJECT_SCHEMA || v == PG_QUERY__OBJECT_TYPE__OBJECT_EXTENSION ||
                    v == PG_QUERY__OBJECT_TYPE__OBJECT_ROLE)) {
          out_.catalog_unbounded = true;
          return;
        }
        continue;
      }
      if (f.type == PROTOBUF_C_TYPE_STRING) {
        if (f.label == PROTOBUF_C_LABEL_REPEATED) {
          const size_t n = *reinterpret_cast<const size_t*>(base + f.quantifier_offset);
          const char* const* items = *reinterpret_cast<const char* const* const*>(at);
          for (size_t k = 0; k < n; ++k) Name(items[k]);
        } else {
          Name(*reinterpret_cast<const char* const*>(at));
        }
        continue;
      }
      if (f.type != PROTOBUF_C_TYPE_MESSAGE) continue;
      if (f.label == PROTOBUF_C_LABEL_REPEATED) {
        const size_t n = *reinterpret_cast<const size_t*>(base + f.quantifier_offset);
        ProtobufCMessage* const* items = *reinterpret_cast<ProtobufCMessage* const* const*>(at);
        for (size_t k = 0; k < n; ++k) {
          if (items[k] != nullptr) Visit(items[k]);
        }
      } else if (const ProtobufCMessage* child = *reinterpret_cast<const ProtobufCMessage* const*>(at)) {
        Visit(child);
      }
    }
  }

  // Identifiers are at most NAMEDATALEN - 1 bytes (the scanner truncates
  // longer ones): a longer string is a literal (a function body), no name.
  void Name(const char* s) {
    std::string_view v = Str(s);
    if (v.empty() || v.size() > 63) return;
    AddUnique(out_.catalog_names, std::string(v));
  }

  StatementAnalysis& out_;
};

// Whether a statement of `kind` (its node `stmt`) may change the catalog.
bool ChangesCatalog(StatementKind kind, const PgQuery__Node* stmt) {
  switch (kind) {
    case StatementKind::kDdl:
      return true;
    case StatementKind::kExplain: {  // EXPLAIN [ANALYZE] CREATE TABLE AS / SELECT INTO (as written)
      const PgQuery__Node* q = stmt->explain_stmt != nullptr ? stmt->explain_stmt->query : nullptr;
      return q != nullptr && (q->node_case == PG_QUERY__NODE__NODE_CREATE_TABLE_AS_STMT ||
                              ChangesCatalog(StatementKind::kSelect, q));
    }
    case StatementKind::kSelect:  // SELECT ... INTO creates a table
      return stmt->node_case == PG_QUERY__NODE__NODE_SELECT_STMT && stmt->select_stmt != nullptr &&
             stmt->select_stmt->into_clause != nullptr;
    default:
      return false;
  }
}

// The leading keywords, sorted (kKeywordStart indexes them by first letter).
using KeywordKind = std::pair<std::string_view, StatementKind>;
using SK = StatementKind;
constexpr KeywordKind kKeywords[] = {
      {"abort", SK::kTransaction}, {"alter", SK::kDdl}, {"analyse", SK::kMaintenance},
      {"analyze", SK::kMaintenance}, {"begin", SK::kTransaction}, {"call", SK::kCall},
      {"checkpoint", SK::kMaintenance}, {"close", SK::kCursor}, {"cluster", SK::kMaintenance},
      {"comment", SK::kDdl}, {"commit", SK::kTransaction}, {"create", SK::kDdl},
      {"deallocate", SK::kDeallocate}, {"declare", SK::kCursor}, {"delete", SK::kDelete},
      {"discard", SK::kDiscard}, {"do", SK::kDo}, {"drop", SK::kDdl},
      {"end", SK::kTransaction}, {"execute", SK::kExecute}, {"explain", SK::kExplain},
      {"fetch", SK::kCursor}, {"grant", SK::kDdl}, {"import", SK::kDdl},
      {"insert", SK::kInsert}, {"listen", SK::kListen}, {"lock", SK::kLock},
      {"merge", SK::kMerge}, {"move", SK::kCursor}, {"notify", SK::kNotify},
      {"prepare", SK::kPrepare}, {"reassign", SK::kDdl}, {"refresh", SK::kDdl},
      {"reindex", SK::kMaintenance}, {"release", SK::kTransaction}, {"reset", SK::kSet},
      {"revoke", SK::kDdl}, {"rollback", SK::kTransaction}, {"savepoint", SK::kTransaction},
      {"security", SK::kDdl}, {"select", SK::kSelect}, {"set", SK::kSet},
      {"show", SK::kShow}, {"start", SK::kTransaction}, {"table", SK::kSelect},
      {"truncate", SK::kTruncate}, {"unlisten", SK::kUnlisten}, {"update", SK::kUpdate},
      {"vacuum", SK::kMaintenance}, {"values", SK::kSelect},
};

// kKeywordStart[c - 'a'] .. kKeywordStart[c - 'a' + 1]: the words that begin with c.
constexpr std::array<unsigned char, 27> KeywordStarts() {
  std::array<unsigned char, 27> start{};
  size_t i = 0;
  for (int letter = 0; letter < 26; ++letter) {
    start[letter] = static_cast<unsigned char>(i);
    while (i < std::size(kKeywords) && kKeywords[i].first[0] == 'a' + letter) ++i;
  }
  start[26] = static_cast<unsigned char>(i);
  return start;
}
constexpr std::array<unsigned char, 27> kKeywordStart = KeywordStarts();
static_assert(kKeywordStart[26] == std::size(kKeywords), "keywords must be lowercase letters, sorted");

}  // namespace

StatementKind KindOfKeyword(std::string_view kw) {
  // Only the words with kw's first letter are compared: every text sent
  // asks once or twice per statement (a scan of all 50 cost ~240
  // instructions a call).
  if (kw.empty() || kw[0] < 'a' || kw[0] > 'z') return StatementKind::kOther;
  const int letter = kw[0] - 'a';
  for (size_t i = kKeywordStart[letter]; i < kKeywordStart[letter + 1]; ++i) {
    if (kKeywords[i].first == kw) return kKeywords[i].second;
  }
  return StatementKind::kOther;
}

absl::StatusOr<StatementAnalysis> ParseAnalysis(std::string_view sql) {
  const std::string text(sql);  // libpg_query wants a NUL-terminated string
  PgQueryProtobufParseResult parsed = pg_query_parse_protobuf(text.c_str());
  if (parsed.error != nullptr) {
    absl::Status st = absl::InvalidArgumentError(
        parsed.error->message != nullptr ? parsed.error->message : "syntax error");
    pg_query_free_protobuf_parse_result(parsed);
    return st;
  }
  PgQuery__ParseResult* tree = pg_query__parse_result__unpack(
      nullptr, parsed.parse_tree.len, reinterpret_cast<const uint8_t*>(parsed.parse_tree.data));
  pg_query_free_protobuf_parse_result(parsed);
  if (tree == nullptr) return absl::InternalError("parse tree did not decode");
  StatementAnalysis out;
  TreeWalker walker(out);
  for (size_t i = 0; i < tree->n_stmts; ++i) {
    const PgQuery__RawStmt* raw = tree->stmts[i];
    if (raw == nullptr || raw->stmt == nullptr) continue;
    const StatementKind kind = KindOfNode(raw->stmt);
    out.kinds.push_back(kind);
    walker.Statement(raw->stmt);
    if (kind == StatementKind::kDo || kind == StatementKind::kCall || kind == StatementKind::kOther) {
      out.catalog_unbounded = true;  // runs whatever it runs
    } else if (ChangesCatalog(kind, raw->stmt)) {
      CatalogNameWalker(out).Statement(raw->stmt, kind == StatementKind::kDdl);
    }
  }
  pg_query__parse_result__free_unpacked(tree, nullptr);
  out.statement_count = out.kinds.size();
  out.kind = out.kinds.empty() ? StatementKind::kEmpty : out.kinds.front();
  return out;
}

}  // namespace hyperpool::cache
