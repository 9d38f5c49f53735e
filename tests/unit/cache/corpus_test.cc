// The shortcuts that conclude something about a text without PostgreSQL's
// parser, held against the parser on a corpus of real SQL: every statement
// of PostgreSQL 15's regression suite (src/test/regress/sql/*.sql of
// Debian's postgresql-15 source, which scripts/setup.sh fetches; psql's
// meta-commands left out), one by one and as the multi-statement texts
// between meta-commands. Where a shortcut concludes, the parser's analysis
// (ParseAnalysis) must say the same:
//   - SqlText::simple_read(): one SELECT that calls nothing, casts nothing,
//     writes nothing (its operators may only be spelled with + - * / < > =);
//   - SqlText::plain_select(): one SELECT that calls no set_config;
//   - LeadingKeywordOfPlainText + StatementKindOfKeyword: one statement of
//     that kind;
//   - AnalyzeStatement's memo, keyed by the lexer's shape of the text
//     (literals replaced): the analysis of the text itself;
//   - DecisionMemo's key of a plain SELECT (its standalone integers
//     masked): the parser's analysis of the text with other integers there
//     is this text's;
//   - EffectMemo's key of any text (its standalone integers masked when
//     MaskableText; SqlText::shape, the key the Endpoint's memos share):
//     the same, and the same ClassifyStatements, write effect, catalog
//     change and session effects (AnalyzeSessionEffects) from the lexer's
//     side.
// A text the parser rejects is not held against anything: the server
// rejects it too, so it runs nothing.

#include <pg_query.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "cache/catalog_overlay.h"
#include "cache/decision_memo.h"
#include "cache/sql_analysis.h"
#include "cache/tier.h"
#include "endpoint/session_settings.h"

namespace hyperpool::cache {
namespace {

namespace fs = std::filesystem;

// $HYPERPOOL_REGRESS_SQL, else the suite scripts/setup.sh unpacks.
fs::path CorpusDir() {
  if (const char* env = std::getenv("HYPERPOOL_REGRESS_SQL"); env != nullptr && *env != '\0') return env;
  const fs::path cache = "/var/cache/hyperpool-pgsrc";
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(cache, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("postgresql-15.", 0) == 0 && fs::is_directory(e.path() / "src/test/regress/sql")) {
      return e.path() / "src/test/regress/sql";
    }
  }
  return {};
}

// The SQL of one psql script in runs between meta-commands: a line whose
// first non-blank byte is a backslash ends the run; a meta-command after
// SQL on a line (`SELECT 1 \gset`) ends it too.
std::vector<std::string> SqlRuns(const std::string& script) {
  std::vector<std::string> runs(1);
  std::istringstream in(script);
  std::string line;
  while (std::getline(in, line)) {
    const size_t first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] == '\\') {
      runs.emplace_back();
      continue;
    }
    const size_t meta = line.find(" \\g");
    runs.back() += line.substr(0, meta);
    runs.back() += '\n';
    if (meta != std::string::npos) runs.emplace_back();
  }
  return runs;
}

// One run's statements: split by the parser when the run parses, else by
// the scanner (the suite has many statements meant to fail).
std::vector<std::string> Statements(const std::string& run) {
  std::vector<std::string> out;
  PgQuerySplitResult r = pg_query_split_with_parser(run.c_str());
  if (r.error != nullptr) {
    pg_query_free_split_result(r);
    r = pg_query_split_with_scanner(run.c_str());
  }
  if (r.error == nullptr) {
    for (int i = 0; i < r.n_stmts; ++i) {
      std::string s = run.substr(static_cast<size_t>(r.stmts[i]->stmt_location),
                                 static_cast<size_t>(r.stmts[i]->stmt_len));
      if (s.find_first_not_of(" \t\n") != std::string::npos) out.push_back(std::move(s));
    }
  }
  pg_query_free_split_result(r);
  return out;
}

struct Corpus {
  std::vector<std::string> texts;  // statements, then multi-statement runs
  size_t statements = 0;
  size_t files = 0;
};

const Corpus& LoadCorpus() {
  static const Corpus corpus = [] {
    Corpus c;
    const fs::path dir = CorpusDir();
    if (dir.empty()) return c;
    std::vector<fs::path> files;
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".sql") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    std::vector<std::string> runs;
    for (const fs::path& f : files) {
      std::ifstream in(f, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      for (std::string& run : SqlRuns(ss.str())) {
        for (std::string& s : Statements(run)) c.texts.push_back(std::move(s));
        if (run.find_first_not_of(" \t\n") != std::string::npos && run.size() < (64u << 10)) {
          runs.push_back(std::move(run));
        }
      }
      ++c.files;
    }
    c.statements = c.texts.size();
    for (std::string& r : runs) c.texts.push_back(std::move(r));
    return c;
  }();
  return corpus;
}

std::string Excerpt(std::string_view text) {
  std::string s(text.substr(0, 160));
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

bool OnlyArithmeticOrComparison(const QualifiedName& op) {
  return op.schema.empty() && !op.name.empty() &&
         op.name.find_first_not_of("+-*/<>=") == std::string::npos;
}

bool CallsSetConfig(const StatementAnalysis& a) {
  return std::any_of(a.functions.begin(), a.functions.end(),
                     [](const QualifiedName& f) { return f.name == "set_config"; });
}

// What the parser says is wrong with simple_read()'s claim on `a`, or "".
std::string SimpleReadDisagreement(const StatementAnalysis& a) {
  if (a.statement_count != 1 || a.kind != StatementKind::kSelect) return "not one SELECT";
  if (!a.functions.empty()) return "calls " + a.functions.front().ToString();
  if (!a.casts.empty()) return "casts to " + a.casts.front().ToString();
  if (!a.attribute_names.empty()) return "names ." + a.attribute_names.front();
  if (a.has_select_into) return "SELECT INTO";
  if (a.has_data_modifying_cte) return "data-modifying CTE";
  if (!a.relations_written.empty()) return "writes " + a.relations_written.front().ToString();
  for (const QualifiedName& op : a.operators) {
    if (!OnlyArithmeticOrComparison(op)) return "operator " + op.ToString();
  }
  return "";
}

// The fields of an analysis the memo must reproduce (all but `normalized`
// and `fingerprint`, which AnalyzeStatement fills from the lexer).
bool SameAnalysis(const StatementAnalysis& a, const StatementAnalysis& b) {
  return a.statement_count == b.statement_count && a.kind == b.kind && a.kinds == b.kinds &&
         a.has_row_locks == b.has_row_locks && a.has_data_modifying_cte == b.has_data_modifying_cte &&
         a.has_select_into == b.has_select_into && a.has_time_literal == b.has_time_literal &&
         a.value_functions == b.value_functions && a.functions == b.functions && a.operators == b.operators &&
         a.casts == b.casts && a.attribute_names == b.attribute_names && a.relations_read == b.relations_read &&
         a.relations_written == b.relations_written;
}

// The text a memo key (flag byte, then the text with masked integers)
// stands for, with 907 wherever an integer was masked.
std::string VariantOf(const std::string& key) {
  std::string variant;
  for (size_t i = 1; i < key.size(); ++i) {
    if (key[i] == '\0') {
      variant += "907";
    } else {
      variant.push_back(key[i]);
    }
  }
  return variant;
}

// DecisionMemo::KeyOf's claim for `text` (analysed by the parser as `p`):
// the text with every masked integer replaced by another has the same
// analysis, by the parser and by AnalyzeStatement (fingerprint included).
// "" when it holds or the key is the text itself.
std::string MemoKeyDisagreement(const std::string& text, const StatementAnalysis& p) {
  std::string key;
  if (!DecisionMemo::KeyOf(SqlText(text), DecisionContext{}, key) || (key[0] & 1) == 0) return "";
  const std::string variant = VariantOf(key);
  std::string again;
  if (!DecisionMemo::KeyOf(SqlText(variant), DecisionContext{}, again) || again != key) {
    return "memo key: the variant has another key: " + Excerpt(variant);
  }
  const absl::StatusOr<StatementAnalysis> pv = ParseAnalysis(variant);
  if (!pv.ok() || !SameAnalysis(*pv, p)) return "memo key: the parser tells the variant apart: " + Excerpt(variant);
  const absl::StatusOr<StatementAnalysis> a = AnalyzeStatement(text);
  const absl::StatusOr<StatementAnalysis> av = AnalyzeStatement(variant);
  if (a.ok() != av.ok() || (a.ok() && (!SameAnalysis(*a, *av) || a->fingerprint != av->fingerprint))) {
    return "memo key: the lexer tells the variant apart: " + Excerpt(variant);
  }
  return "";
}

// EffectMemo::KeyOf's claim for `text`: the variant with other integers
// where the key masks them has the same key, the parser's analysis, and
// what EffectOf derives from the lexer's analysis. "" when it holds or
// nothing is masked.
std::string EffectKeyDisagreement(const std::string& text, const StatementAnalysis& p, size_t& masked) {
  std::string key;
  if (!EffectMemo::KeyOf(text, true, key)) return "";
  // The shape the memos share (SqlText::shape, one pass) is this key but
  // for standard_conforming_strings' bit.
  if (std::string shape = SqlText(text).shape(); shape.empty() || static_cast<char>(shape[0] | 2) != key[0] ||
                                                  std::string_view(shape).substr(1) != std::string_view(key).substr(1)) {
    return "effect key: the text's shape is not its key: " + Excerpt(text);
  }
  if ((key[0] & 1) == 0 || key.find('\0', 1) == std::string::npos) return "";
  ++masked;
  const std::string variant = VariantOf(key);
  std::string again;
  if (!EffectMemo::KeyOf(variant, true, again) || again != key) {
    return "effect key: the variant has another key: " + Excerpt(variant);
  }
  const absl::StatusOr<StatementAnalysis> pv = ParseAnalysis(variant);
  if (!pv.ok() || !SameAnalysis(*pv, p)) return "effect key: the parser tells the variant apart: " + Excerpt(variant);
  const SqlText a(text);
  const SqlText b(variant);
  const StatementEffects fa = ClassifyStatements(a, nullptr);
  const StatementEffects fb = ClassifyStatements(b, nullptr);
  if (fa.changes_session_state != fb.changes_session_state || fa.only_setting_changes != fb.only_setting_changes ||
      fa.only_cache_settings != fb.only_cache_settings) {
    return "effect key: ClassifyStatements tells the variant apart: " + Excerpt(variant);
  }
  // The Endpoint's session-effects memo (endpoint::SessionEffectsMemo)
  // holds the same key to AnalyzeSessionEffects.
  const endpoint::SessionEffects sa = endpoint::AnalyzeSessionEffects(a);
  const endpoint::SessionEffects sb = endpoint::AnalyzeSessionEffects(b);
  if (sa.settings != sb.settings || sa.pins != sb.pins || sa.custom_names != sb.custom_names ||
      sa.sequences != sb.sequences) {
    return "effect key: AnalyzeSessionEffects tells the variant apart: " + Excerpt(variant);
  }
  const WriteEffect wa = WriteEffectOf(a, nullptr, true, true);
  const WriteEffect wb = WriteEffectOf(b, nullptr, true, true);
  if (wa.all != wb.all || wa.schema != wb.schema || wa.tables != wb.tables) {
    return "effect key: WriteEffectOf tells the variant apart: " + Excerpt(variant);
  }
  if (a.analysis().ok() != b.analysis().ok()) return "effect key: the lexer tells the variant apart: " + Excerpt(variant);
  if (a.analysis().ok()) {
    const CatalogChange ca = CatalogChange::Of(*a.analysis());
    const CatalogChange cb = CatalogChange::Of(*b.analysis());
    if (ca.all != cb.all || ca.cascade != cb.cascade || ca.names != cb.names) {
      return "effect key: the catalog change tells the variant apart: " + Excerpt(variant);
    }
  }
  return "";
}

TEST_CASE("the regression suite's SQL is there to be read") {
  const Corpus& c = LoadCorpus();
  INFO("corpus: " << CorpusDir() << " (set HYPERPOOL_REGRESS_SQL or run scripts/setup.sh)");
  REQUIRE(c.files >= 200);
  REQUIRE(c.statements >= 20000);
}

TEST_CASE("every shortcut agrees with PostgreSQL's parser on the regression suite's SQL") {
  const Corpus& c = LoadCorpus();
  REQUIRE(!c.texts.empty());
  std::vector<std::string> disagree;
  size_t parsed = 0, simple = 0, plain = 0, keyword = 0, effect_masked = 0, collapsed = 0;
  for (const std::string& text : c.texts) {
    const absl::StatusOr<StatementAnalysis> p = ParseAnalysis(text);
    if (!p.ok()) continue;
    ++parsed;
    const SqlText st(text);
    if (st.simple_read()) {
      ++simple;
      if (std::string why = SimpleReadDisagreement(*p); !why.empty()) {
        disagree.push_back("simple_read, but the parser: " + why + ": " + Excerpt(text));
      }
    }
    if (st.plain_select()) {
      ++plain;
      if (p->statement_count != 1 || p->kind != StatementKind::kSelect || CallsSetConfig(*p)) {
        disagree.push_back("plain_select, but the parser: " + std::string(StatementKindName(p->kind)) + " x" +
                           std::to_string(p->statement_count) + ": " + Excerpt(text));
      }
    }
    // The memo keyed by shape (literals replaced) gives this very text's
    // analysis: no two texts of one shape that the parser tells apart.
    if (const absl::StatusOr<StatementAnalysis> m = AnalyzeStatement(text); m.ok() && !SameAnalysis(*m, *p)) {
      disagree.push_back("the memo's analysis of this shape is another text's: " + Excerpt(text));
    }
    if (std::string why = MemoKeyDisagreement(text, *p); !why.empty()) disagree.push_back(why);
    if (std::string why = EffectKeyDisagreement(text, *p, effect_masked); !why.empty()) disagree.push_back(why);
    if (const absl::StatusOr<std::vector<Token>> t = Lex(text); t.ok()) {
      if (const std::optional<std::string> one_row = CollapsedValuesText(*t, text)) {
        ++collapsed;
        const absl::StatusOr<StatementAnalysis> pc = ParseAnalysis(*one_row);
        if (!pc.ok() || !SameAnalysis(*pc, *p)) {
          disagree.push_back("the VALUES rows cut, the parser tells it apart: " + Excerpt(text));
        }
      }
    }
    if (std::optional<std::string> kw = LeadingKeywordOfPlainText(text)) {
      if (std::optional<StatementKind> k = StatementKindOfKeyword(*kw)) {
        ++keyword;
        if (p->statement_count != 1 || p->kind != *k) {
          disagree.push_back("leading keyword says " + std::string(StatementKindName(*k)) + ", the parser " +
                             std::string(StatementKindName(p->kind)) + " x" + std::to_string(p->statement_count) +
                             ": " + Excerpt(text));
        }
      }
    }
  }
  INFO(c.texts.size() << " texts (" << c.statements << " statements), " << parsed << " parsed; simple_read "
                      << simple << ", plain_select " << plain << ", leading keyword " << keyword
                      << ", effect keys masking integers " << effect_masked << ", VALUES rows cut " << collapsed);
  std::string shown;
  for (size_t i = 0; i < disagree.size() && i < 40; ++i) shown += disagree[i] + "\n";
  INFO(disagree.size() << " disagreements:\n" << shown);
  CHECK(simple > 1000);
  CHECK(keyword > 5000);
  CHECK(effect_masked > 5000);
  CHECK(collapsed > 300);
  CHECK(disagree.empty());
}

}  // namespace
}  // namespace hyperpool::cache
