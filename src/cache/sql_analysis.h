// A PostgreSQL-aware SQL lexer (PostgreSQL docs, "SQL Syntax" > "Lexical
// Structure") and the statement analysis for the query cache.
//
// The analysis is PostgreSQL's own: libpg_query parses the text with the
// server's grammar (sql_parse_tree.cc) and one walk over the raw parse tree
// reports the statement kinds, the relations read and written (CTE names
// scoped as the server scopes them), the calls, and the names only the
// catalog can resolve (operators, casts, attribute-notation references).
// Text the grammar rejects is an error (the caller: uncacheable, and
// invalidate everything). The lexer splits and normalizes: the analysis is
// memoized per statement shape (literals replaced), so a text differing
// only in its literals is not parsed again.
//
// Pure functions, no I/O, no shared state: safe to call from any thread.
// SqlText keeps one text's analysis for the passes over it.
#ifndef HYPERPOOL_CACHE_SQL_ANALYSIS_H_
#define HYPERPOOL_CACHE_SQL_ANALYSIS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace hyperpool::cache {

// ---------------------------------------------------------------------------
// Lexer.
// ---------------------------------------------------------------------------

enum class TokenKind : uint8_t {
  kIdentifier,        // Unquoted word (keywords included); `value` is lowercased (ASCII).
  kQuotedIdentifier,  // "..." or U&"..."; `value` has "" unescaped, case kept.
  kString,            // '...', E'...', $tag$...$tag$, B'...', X'...', N'...', U&'...'.
  kNumber,            // 42, 3.5, 1e10, .5, 0x1F, 1_000.
  kParam,             // $1.
  kOperator,          // + - * / < > = ~ ! @ # % ^ & | ` ? and runs of them.
  kLParen,            // (
  kRParen,            // )
  kLBracket,          // [
  kRBracket,          // ]
  kComma,             // ,
  kSemicolon,         // ;
  kDot,               // .
  kColon,             // :
  kDoubleColon,       // ::
};

struct Token {
  TokenKind kind = TokenKind::kIdentifier;
  // The token's bytes in the source (for strings: including quotes).
  std::string_view text;
  // Identifiers: the normalised name. Strings: the decoded body (escapes
  // resolved as far as the analysis needs). Others: empty.
  std::string value;
  size_t offset = 0;  // Byte offset of `text` in the source.

  bool IsKeyword(std::string_view lower) const {
    return kind == TokenKind::kIdentifier && value == lower;
  }
};

struct LexOptions {
  // With standard_conforming_strings off, backslash escapes in plain '...'
  // strings too (pre-9.1 behaviour; still a session setting).
  bool standard_conforming_strings = true;
};

// Splits `sql` into tokens, dropping whitespace and comments. Errors
// (InvalidArgument): unterminated string, quoted identifier, dollar quote or
// block comment; a zero-length quoted identifier.
absl::StatusOr<std::vector<Token>> Lex(std::string_view sql, LexOptions options = {});

// ---------------------------------------------------------------------------
// Statement analysis.
// ---------------------------------------------------------------------------

// A possibly schema-qualified name as PostgreSQL resolves it: unquoted parts
// are lowercased, quoted parts kept verbatim. `schema` is empty when the name
// is unqualified (resolved through search_path). A catalog part
// (db.schema.name) is dropped.
struct QualifiedName {
  std::string schema;
  std::string name;

  // "name" or "schema.name" (for logs and diagnostics; not unambiguous
  // when parts contain dots).
  std::string ToString() const { return schema.empty() ? name : schema + "." + name; }
  bool operator==(const QualifiedName&) const = default;
  auto operator<=>(const QualifiedName&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const QualifiedName& n) {
    return H::combine(std::move(h), n.schema, n.name);
  }
};

// The leading keyword of a statement, grouped by what the pooler and the
// cache must do with it.
enum class StatementKind : uint8_t {
  kEmpty,        // Nothing but whitespace, comments and semicolons.
  kSelect,       // SELECT, VALUES, TABLE, WITH ... SELECT (and parenthesised forms).
  kInsert,       // INSERT (also WITH ... INSERT).
  kUpdate,       // UPDATE.
  kDelete,       // DELETE.
  kMerge,        // MERGE.
  kTruncate,     // TRUNCATE.
  kCopyFrom,     // COPY ... FROM (writes).
  kCopyTo,       // COPY ... TO (reads).
  kDdl,          // CREATE ALTER DROP COMMENT GRANT REVOKE SECURITY REFRESH IMPORT REASSIGN.
  kMaintenance,  // VACUUM ANALYZE CLUSTER REINDEX CHECKPOINT.
  kTransaction,  // BEGIN START COMMIT END ROLLBACK ABORT SAVEPOINT RELEASE PREPARE TRANSACTION.
  kSet,          // SET, RESET (SET CONSTRAINTS / SET TRANSACTION included).
  kShow,         // SHOW.
  kPrepare,      // PREPARE name AS ...
  kExecute,      // EXECUTE.
  kDeallocate,   // DEALLOCATE.
  kDiscard,      // DISCARD.
  kListen,       // LISTEN.
  kUnlisten,     // UNLISTEN.
  kNotify,       // NOTIFY.
  kLock,         // LOCK.
  kCall,         // CALL.
  kDo,           // DO.
  kExplain,      // EXPLAIN (EXPLAIN ANALYZE executes its statement).
  kCursor,       // DECLARE FETCH MOVE CLOSE.
  kOther,        // Anything else (LOAD, SECURITY LABEL is DDL, ...).
};
std::string_view StatementKindName(StatementKind kind);

// What AnalyzeStatement learnt. Names are deduplicated, in first-seen order.
// Every flag and list covers all statements of a multi-statement text (so
// the Endpoint can invalidate what any of them writes); `kind` is the first
// non-empty statement's.
struct StatementAnalysis {
  size_t statement_count = 0;  // Non-empty statements.
  StatementKind kind = StatementKind::kEmpty;
  std::vector<StatementKind> kinds;  // One per non-empty statement.

  bool has_row_locks = false;          // FOR UPDATE / NO KEY UPDATE / SHARE / KEY SHARE.
  bool has_data_modifying_cte = false;  // WITH x AS (INSERT|UPDATE|DELETE|MERGE ...).
  bool has_select_into = false;         // SELECT ... INTO t (creates a table).
  // A string literal whose value the date/time input routines would read as
  // the current time ('now', 'today', 'tomorrow', 'yesterday', possibly with
  // more text: 'today 10:00') — evaluated once at parse time, so a cached
  // result would freeze it. Flagged for any literal containing those words
  // unless it is cast (::) to a non-date/time type; implicit casts
  // (ts > 'now') are caught too.
  bool has_time_literal = false;
  // SQL-standard value functions written without parentheses
  // (CURRENT_TIMESTAMP, LOCALTIME, CURRENT_USER, ...), lowercased.
  std::vector<std::string> value_functions;
  // Function calls (FuncCall nodes: in FROM too, and the SQL-syntax calls
  // the grammar rewrites, e.g. TRIM as pg_catalog.btrim).
  std::vector<QualifiedName> functions;
  // Operators named (A_Expr, ORDER BY ... USING; BETWEEN as >= and <=),
  // resolved by the catalog to the functions behind them.
  std::vector<QualifiedName> operators;
  // Types cast to (x::t, CAST(x AS t), t 'literal'): a user cast or input
  // function behind them may be volatile.
  std::vector<QualifiedName> casts;
  // The last field of every qualified column reference (t.f, (x).f): f may
  // be a function taking t's row type (attribute notation, f(t)).
  std::vector<std::string> attribute_names;
  // Relations read (FROM, JOIN, USING, TABLE x, COPY x TO) and written
  // (INSERT INTO, UPDATE, DELETE FROM, MERGE INTO, TRUNCATE, COPY x FROM).
  // CTE references are excluded (a CTE hides a table only in its scope).
  std::vector<QualifiedName> relations_read;
  std::vector<QualifiedName> relations_written;
  // What the statements may change in the catalog the cache decides with
  // (DDL, EXPLAIN, SELECT INTO): every name their parse trees hold (each
  // identifier, unqualified: a relation, function, type, operator or
  // schema named anywhere), or `catalog_unbounded` when the change reaches
  // objects no name in the text bounds (DROP ... CASCADE, a schema's or an
  // extension's objects, a role's or database's default settings, DO, CALL,
  // LOAD, ...). Both empty/false for statements that change no catalog.
  // DROP ... CASCADE also drops what depends on the objects named: their
  // names are not in the text, so an unqualified name another schema on the
  // search path also holds may now resolve there (catalog_cascade).
  std::vector<std::string> catalog_names;
  bool catalog_unbounded = false;
  bool catalog_cascade = false;
  // TRUNCATE ... CASCADE: the tables referencing the ones named are written.
  bool writes_cascade = false;
  // LISTEN / UNLISTEN in statement order: (kind, channel) with kind 'L'
  // (LISTEN), 'U' (UNLISTEN) or '*' (UNLISTEN *, channel empty); the channel
  // as the server names it (the scanner's identifier: case-folded unless
  // quoted, escapes decoded, truncated to 63 bytes).
  std::vector<std::pair<char, std::string>> listens;
  // The text with comments dropped, literals and numbers replaced by '?',
  // identifiers lowercased, tokens separated by single spaces: equal for
  // queries that differ only in literals.
  std::string normalized;
  // 64-bit FNV-1a of `normalized` (stable across processes).
  uint64_t fingerprint = 0;
};

// Lexes and analyses `sql` (one Query message, or one Parse's text). Errors
// are the lexer's or the grammar's (the caller's reason: kParseError), and
// a backslash with standard_conforming_strings off (the grammar reads
// strings as with it on).
absl::StatusOr<StatementAnalysis> AnalyzeStatement(std::string_view sql, LexOptions options = {});

// PostgreSQL's parser alone on `sql`: no lexer, no memo (AnalyzeStatement
// without `normalized` and `fingerprint`). The judge the shortcuts below
// are held against (tests/unit/cache/corpus_test.cc).
absl::StatusOr<StatementAnalysis> ParseAnalysis(std::string_view sql);

// `sql` with the rows of its VALUES lists after the first cut out where they
// hold only parameters, NULL, DEFAULT and unsigned integers ("insert into t
// (a, b) values ($1, $2), ($3, $4)" -> "insert into t (a, b) values ($1, $2)"):
// those rows add nothing to the statement's analysis, so a bulk INSERT is
// analysed as its one-row text. nullopt when nothing would be cut. `tokens`
// are Lex(sql)'s. Checked against the parser in sql_analysis_test and on the
// regression suite (corpus_test).
std::optional<std::string> CollapsedValuesText(const std::vector<Token>& tokens, std::string_view sql);

// Whether a literal's text names a time word PostgreSQL's date/time input
// reads as the current time ('now', 'today', 'tomorrow', 'yesterday'; any
// case): such a literal's value depends on when it is read.
bool ContainsTimeWord(std::string_view value);

// Calls `fn(std::span<const Token>)` for each statement of `tokens` (the
// runs between semicolons, empty ones included), in order.
template <typename Fn>
void ForEachStatement(const std::vector<Token>& tokens, Fn&& fn) {
  size_t begin = 0;
  for (size_t i = 0; i <= tokens.size(); ++i) {
    if (i < tokens.size() && tokens[i].kind != TokenKind::kSemicolon) continue;
    fn(std::span<const Token>(tokens).subspan(begin, i - begin));
    begin = i + 1;
  }
}

// The kind AnalyzeStatement reports for a statement whose leading keyword
// (lowercase) is `keyword`, when that keyword alone decides it; nullopt when
// more of it must be read (WITH, COPY, PREPARE). Held against the parser on
// the regression suite (tests/unit/cache/corpus_test.cc).
std::optional<StatementKind> StatementKindOfKeyword(std::string_view keyword);
// The leading keyword (lowercased) of `sql` when `sql` is one statement
// that lexes without fail and whose first token is that keyword, told from
// the bytes alone: no ';' but trailing ones, no quote of any kind, no
// backslash, no comment, no '&'; nullopt otherwise (then lex it).
std::optional<std::string> LeadingKeywordOfPlainText(std::string_view sql);
// Whether `hay` holds `needle` (lowercase ASCII) with ASCII letters compared
// case-insensitively: the byte scans that ask "may this text mention X?"
// before any lexing (LISTEN, NOTIFY, pg_prepared_statements,
// hyperpool:nocache, set_config) on every statement. A needle with a byte
// that is not a letter is looked for where that byte occurs (memchr); one of
// letters only, sixteen places at a time by its first and last bytes (SSE2).
// A candidate is then compared whole.
bool ContainsCaseless(std::string_view hay, std::string_view needle);

// Whether `sql` is one plain SELECT that ClassifyStatements (tier.h) can
// classify without lexing it (no effects at all). Conservative: false for
// anything it cannot tell from the bytes (several statements, set_config,
// quoted identifiers, comments, dollar quotes, ...), which then goes to the
// lexer.
bool IsPlainSelect(std::string_view sql);

// The first index at or after `from` (sql.size() if none) of a byte that
// IsPlainSelect's scan must look at: one of ' " & \ ; / - $ ( s S h H i I
// k K z Z . : ~ ! @ # % ^ | ` ?.
// The scan skips the rest in blocks (exposed for its tests).
size_t NextScanStop(std::string_view sql, size_t from);

// One statement text (a Query's, or a Parse's), analysed at most once: the
// passes over it (session settings and pins, sequences, NOTIFY, LISTEN,
// writes, cacheability, cache keys) take this object instead of the text,
// and the tokens and the statement analysis are computed when the first of
// them asks, then kept. Whoever decodes the frame makes one and hands it to
// everything that needs it (docs/architecture.md, "Decode once").
//
// Views `sql`: it must outlive this object. Not thread-safe (one session's
// frame at a time); no state is shared between objects.
class SqlText {
 public:
  explicit SqlText(std::string_view sql) : sql_(sql) {}
  SqlText(const SqlText&) = delete;
  SqlText& operator=(const SqlText&) = delete;

  std::string_view sql() const { return sql_; }

  // A read that no pass needs to lex: IsPlainSelect, with no '(' (so no
  // function call: nothing volatile, no set_config, nextval, pg_notify or
  // advisory lock), no '.' (t.f may call f(t)), no "::" cast, no operator
  // character beyond + - * / < > = (a user operator may call anything) and
  // no INTO (SELECT ... INTO creates a table). It changes
  // no session state, writes nothing, pins nothing, uses no sequence,
  // notifies and listens on nothing; what each pass would conclude from the
  // full analysis, without it. Most of an application's queries take this
  // path (pgbench -S's every query does).
  bool simple_read() const;
  // IsPlainSelect(sql()), from the same one scan as simple_read().
  bool plain_select() const;
  // That scan's result (-1: not scanned yet), for a new SqlText of the same
  // bytes to start from (a session handling one frame again after a wait).
  signed char scan_result() const { return scan_; }
  void set_scan_result(signed char scan) { scan_ = scan; }
  // LeadingKeywordOfPlainText(sql()), computed on first use: the
  // classification and the session-state pass both ask.
  const std::optional<std::string>& leading_keyword() const;
  // The key the memos keep what they conclude from this text under
  // (cache::EffectMemo, endpoint::SessionEffectsMemo), computed on first
  // use: one byte, 1 when the rest is the text with its standalone integers
  // masked (MaskableText and AppendMaskedIntegers, decision_memo.h), else 0
  // and the rest the text itself. Empty for a text longer than
  // kMaxShapeBytes (not memoized).
  const std::string& shape() const;
  static constexpr size_t kMaxShapeBytes = 2048;

  // Lex(sql) and AnalyzeStatement(sql) with the default LexOptions, each
  // computed on first use (the analysis from the same tokens).
  const absl::StatusOr<std::vector<Token>>& tokens() const;
  const absl::StatusOr<StatementAnalysis>& analysis() const;
  // The analysis if a pass has computed it and it succeeded, else null (it
  // never computes it: a pass that declined to, e.g. for an oversized text,
  // stays the only judge of that), with its `fingerprint` filled in:
  // analysis() leaves it 0, as only the cache's decision statistics read it.
  // Its `normalized` stays empty: the fingerprint is hashed from the tokens
  // without building that text; normalized_text() builds it (the statistics
  // want it only for a fingerprint they have not seen).
  const StatementAnalysis* normalized_analysis_if_done() const;
  // StatementAnalysis::normalized of this text; empty if it does not lex.
  std::string normalized_text() const;

 private:
  signed char scan() const;  // scan_, scanning first if needed

  std::string_view sql_;
  mutable signed char scan_ = -1;  // simple_read(), plain_select(): -1 not yet scanned
  mutable std::optional<absl::StatusOr<std::vector<Token>>> tokens_;
  mutable std::optional<absl::StatusOr<StatementAnalysis>> analysis_;
  mutable bool normalized_ = false;
  mutable std::optional<std::optional<std::string>> leading_keyword_;
  mutable std::optional<std::string> shape_;
};

// 64-bit FNV-1a; used for fingerprints. `h` continues a hash: the hash of
// a text fed in pieces, each piece's result passed to the next, is the
// hash of the whole.
inline constexpr uint64_t kFnvOffsetBasis = 14695981039346656037ull;
uint64_t Fnv1a64(std::string_view data, uint64_t h = kFnvOffsetBasis);

}  // namespace hyperpool::cache

#endif  // HYPERPOOL_CACHE_SQL_ANALYSIS_H_
