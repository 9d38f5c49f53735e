// Prepared statements through the pool, without I/O: the registry
// (statement_registry.h) and the session's rewriting and response queue
// (statement_session.h), driven against a small model of a PostgreSQL
// backend's extended-query behaviour (statements by name, the unnamed
// statement, skip-until-Sync after an error).
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "endpoint/statement_registry.h"
#include "endpoint/statement_session.h"
#include "protocol/codec.h"
#include "unit/endpoint/frontend_builders.h"

namespace hyperpool::endpoint {
namespace {

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string TypesRaw(std::vector<protocol::Oid> types) {
  std::string out;
  protocol::AppendInt16(out, static_cast<int16_t>(types.size()));
  for (auto t : types) protocol::AppendInt32(out, static_cast<int32_t>(t));
  return out;
}

StatementRef Intern(StatementCatalog& catalog, std::string_view query, std::vector<protocol::Oid> types = {}) {
  std::string key;
  std::string raw = TypesRaw(types);
  BuildStatementKey(query, raw, key);
  return catalog.Intern(key, query, raw);
}

// ---------------------------------------------------------------------------
// Registry
// ---------------------------------------------------------------------------

TEST_CASE("the catalog gives one server name per full identity (text and parameter types)") {
  StatementCatalog catalog;
  StatementRef a = Intern(catalog, "SELECT $1", {23});
  StatementRef a2 = Intern(catalog, "SELECT $1", {23});
  StatementRef b = Intern(catalog, "SELECT $1", {25});
  StatementRef c = Intern(catalog, "SELECT $1 ", {23});
  StatementRef d = Intern(catalog, "SELECT $1");
  CHECK(a == a2);
  CHECK(a->server_name == "hp_1");
  std::set<std::string> names{a->server_name, b->server_name, c->server_name, d->server_name};
  CHECK(names.size() == 4);
  CHECK(a->query() == "SELECT $1");
  auto parse = protocol::DecodeParse(std::string_view(a->parse_frame).substr(5));
  REQUIRE(parse.ok());
  CHECK(parse->statement == "hp_1");
  CHECK(parse->query == "SELECT $1");
  CHECK(parse->parameter_types == std::vector<protocol::Oid>{23});
}

TEST_CASE("the catalog forgets statements nobody uses and never reuses a name") {
  StatementCatalog catalog;
  std::string first;
  {
    StatementRef a = Intern(catalog, "SELECT 1");
    first = a->server_name;
  }
  for (int i = 0; i < 200; ++i) Intern(catalog, "SELECT " + std::to_string(i + 2));
  CHECK(catalog.size() < 100);
  StatementRef again = Intern(catalog, "SELECT 1");
  CHECK(again->server_name != first);
}

TEST_CASE("client names map to statements; Erase and Clear forget them") {
  StatementCatalog catalog;
  ClientStatements client;
  client.Set("S_1", Intern(catalog, "SELECT 1"));
  client.Set("S_2", Intern(catalog, "SELECT 2"));
  REQUIRE(client.Find("S_1") != nullptr);
  CHECK((*client.Find("S_1"))->query() == "SELECT 1");
  client.Set("S_1", Intern(catalog, "SELECT 3"));
  CHECK((*client.Find("S_1"))->query() == "SELECT 3");
  CHECK(client.Erase("S_1"));
  CHECK_FALSE(client.Erase("S_1"));
  CHECK(client.Find("S_1") == nullptr);
  client.Clear();
  CHECK(client.size() == 0);
}

TEST_CASE("a connection's statement set is an LRU with a bound") {
  StatementCatalog catalog;
  ConnectionStatements conn(2);
  StatementRef a = Intern(catalog, "A"), b = Intern(catalog, "B"), c = Intern(catalog, "C");
  std::vector<StatementRef> evicted;
  conn.Add(a, &evicted);
  conn.Add(b, &evicted);
  CHECK(conn.Touch(a.get()));  // a is now the most recent
  conn.Add(c, &evicted);
  REQUIRE(evicted.size() == 1);
  CHECK(evicted[0] == b);
  CHECK(conn.Has(a.get()));
  CHECK_FALSE(conn.Has(b.get()));
  conn.Remove(a.get());
  CHECK(conn.size() == 1);
  conn.Clear();
  CHECK(conn.size() == 0);
}

TEST_CASE("ParseDeallocate recognises DEALLOCATE of one name as PostgreSQL resolves it") {
  std::string name;
  CHECK(ParseDeallocate("DEALLOCATE _pg3_5", name));
  CHECK(name == "_pg3_5");
  CHECK(ParseDeallocate("  deallocate prepare S_1 ;  ", name));
  CHECK(name == "s_1");
  CHECK(ParseDeallocate("DEALLOCATE \"S_1\"", name));
  CHECK(name == "S_1");
  CHECK(ParseDeallocate("DEALLOCATE prepare", name));
  CHECK(name == "prepare");
  CHECK_FALSE(ParseDeallocate("DEALLOCATE ALL", name));
  CHECK_FALSE(ParseDeallocate("deallocate prepare all", name));
  CHECK_FALSE(ParseDeallocate("DEALLOCATE a; SELECT 1", name));
  CHECK_FALSE(ParseDeallocate("SELECT 1", name));
  CHECK_FALSE(ParseDeallocate("DEALLOCATEx a", name));
}

TEST_CASE("ParseExecute finds the name an EXECUTE runs and where the text spells it") {
  std::string name;
  std::size_t pos = 0;
  std::size_t len = 0;
  CHECK(ParseExecute("EXECUTE foobar", name, pos, len));
  CHECK((name == "foobar" && pos == 8 && len == 6));
  CHECK(ParseExecute("  execute FooBar(1, 'x');", name, pos, len));
  CHECK((name == "foobar" && pos == 10 && len == 6));
  CHECK(ParseExecute("EXECUTE \"Foo\"\"Bar\" (2)", name, pos, len));
  CHECK((name == "Foo\"Bar" && pos == 8 && len == 10));
  CHECK_FALSE(ParseExecute("EXECUTE", name, pos, len));
  CHECK_FALSE(ParseExecute("EXECUTE 1x", name, pos, len));
  CHECK_FALSE(ParseExecute("EXECUTEx a", name, pos, len));
  CHECK_FALSE(ParseExecute("SELECT 1", name, pos, len));
}

// ---------------------------------------------------------------------------
// A model backend
// ---------------------------------------------------------------------------

// Answers frontend messages as PostgreSQL does, for the behaviour that
// matters here. A query text starting with "FAIL" fails to parse.
class ModelBackend {
 public:
  std::set<std::string> statements;
  std::map<std::string, std::string> texts;
  bool has_unnamed = false;
  std::string unnamed_text;
  std::set<std::string> stale;       // statements whose Bind fails with 0A000 until re-Parsed
  // The database's tables: query text -> its one result column ("" or absent: NoData).
  std::map<std::string, std::string> columns;
  std::map<std::string, std::string> shapes;  // statement -> its column when it was parsed
  uint32_t table_oid = 0;  // of the table in RowDescriptions (a re-created table has a new one)
  std::vector<std::string> received;  // "P hp_1", "B hp_1", "C hp_1", "S", ...

  std::string Process(std::string_view bytes) {
    std::string out;
    REQUIRE(testing::ForEachFrame(bytes, [&](const protocol::Frame& f) { Handle(f, out); }));
    return out;
  }

 private:
  void Error(std::string& out, std::string_view sqlstate, std::string_view message = "model error") {
    protocol::EncodeErrorResponse(out, "ERROR", sqlstate, message);
    skipping_ = true;
    if (txn_ == 'T') txn_ = 'E';
  }
  // In a failed transaction block only COMMIT / ROLLBACK run (postgres.c,
  // IsTransactionExitStmt); anything else is 25P02.
  bool Aborted(std::string_view text) const { return txn_ == 'E' && text != "ROLLBACK" && text != "COMMIT"; }
  void Ready(std::string& out) { protocol::AppendFrame(out, 'Z', std::string_view(&txn_, 1)); }
  void Handle(const protocol::Frame& f, std::string& out) {
    if (f.tag == 'S') {
      received.push_back("S");
      skipping_ = false;
      Ready(out);
      return;
    }
    if (skipping_) {
      received.push_back(std::string("skipped ") + f.tag);
      return;
    }
    switch (f.tag) {
      case 'P': {
        auto p = protocol::DecodeParse(f.payload);
        REQUIRE(p.ok());
        received.push_back("P " + std::string(p->statement));
        if (p->statement.empty()) has_unnamed = false;
        if (p->query.substr(0, 4) == "FAIL") return Error(out, "42601");
        if (Aborted(p->query)) return Error(out, "25P02");
        if (!p->statement.empty() && statements.count(std::string(p->statement))) return Error(out, "42P05");
        if (p->statement.empty()) {
          has_unnamed = true;
          unnamed_text = std::string(p->query);
        } else {
          statements.insert(std::string(p->statement));
          stale.erase(std::string(p->statement));
          texts[std::string(p->statement)] = std::string(p->query);
          shapes[std::string(p->statement)] = columns[std::string(p->query)];
        }
        protocol::AppendFrame(out, '1', {});
        return;
      }
      case 'B': {
        auto b = protocol::DecodeBind(f.payload);
        REQUIRE(b.ok());
        received.push_back("B " + std::string(b->statement));
        std::string text;
        if (b->statement.empty()) {
          if (!has_unnamed) return Error(out, "26000");
          text = unnamed_text;
        } else {
          if (!statements.count(std::string(b->statement))) {
            return Error(out, "26000", "prepared statement \"" + std::string(b->statement) + "\" does not exist");
          }
          text = texts[std::string(b->statement)];
        }
        if (Aborted(text)) return Error(out, "25P02");
        if (stale.count(std::string(b->statement))) return Error(out, "0A000");
        portal_text_ = text;
        protocol::AppendFrame(out, '2', {});
        return;
      }
      case 'D': {
        auto d = protocol::DecodeDescribe(f.payload);
        REQUIRE(d.ok());
        received.push_back("D " + std::string(d->name));
        if (d->kind == protocol::ObjectKind::kStatement) {
          if (d->name.empty() ? !has_unnamed : !statements.count(std::string(d->name))) return Error(out, "26000");
          protocol::Encode(protocol::ParameterDescription{}, out);
          // (exec_describe_statement_message revalidates the plan after the ParameterDescription)
          if (stale.count(std::string(d->name))) return Error(out, "0A000");
          const std::string column = d->name.empty() ? std::string() : shapes[std::string(d->name)];
          if (!column.empty()) {
            protocol::RowDescription rd;
            rd.fields.push_back(
                protocol::FieldDescription{.name = column, .table_oid = table_oid, .column_attr = 1, .type_oid = 23});
            protocol::Encode(rd, out);
            return;
          }
        }
        protocol::AppendFrame(out, 'n', {});
        return;
      }
      case 'E':
        received.push_back("E");
        if (portal_text_.empty()) {
          protocol::AppendFrame(out, 'I', {});
        } else if (portal_text_.find("pg_prepared_statements") != std::string::npos) {
          protocol::Encode(protocol::CommandComplete{"SELECT " + std::to_string(statements.size())}, out);
        } else {
          protocol::Encode(protocol::CommandComplete{"SELECT 1"}, out);
        }
        return;
      case 'C': {
        auto c = protocol::DecodeClose(f.payload);
        REQUIRE(c.ok());
        received.push_back("C " + std::string(c->name));
        if (c->kind == protocol::ObjectKind::kStatement) {
          if (c->name.empty()) {
            has_unnamed = false;
          } else {
            statements.erase(std::string(c->name));
          }
        }
        protocol::AppendFrame(out, '3', {});
        return;
      }
      case 'H':
        received.push_back("H");
        return;
      case 'Q': {
        auto q = protocol::DecodeQuery(f.payload);
        REQUIRE(q.ok());
        received.push_back("Q " + std::string(q->query));
        has_unnamed = false;
        if (q->query.substr(0, 4) == "FAIL" || Aborted(q->query)) {
          Error(out, q->query.substr(0, 4) == "FAIL" ? "42601" : "25P02");
          skipping_ = false;  // (a Query's own error skips nothing)
        } else if (q->query == "BEGIN" || q->query == "ROLLBACK" || q->query == "COMMIT") {
          txn_ = q->query == "BEGIN" ? 'T' : 'I';
          protocol::Encode(protocol::CommandComplete{q->query}, out);
        } else if (q->query.empty()) {
          protocol::AppendFrame(out, 'I', {});
        } else if (q->query == "DEALLOCATE ALL" || q->query == "DISCARD ALL") {
          statements.clear();
          protocol::Encode(protocol::CommandComplete{q->query}, out);
        } else if (q->query.find("pg_prepared_statements") != std::string_view::npos) {
          protocol::Encode(protocol::CommandComplete{"SELECT " + std::to_string(statements.size())}, out);
        } else if (q->query.substr(0, 6) == "ALTER ") {
          protocol::Encode(protocol::CommandComplete{"ALTER TABLE"}, out);
        } else if (q->query.substr(0, 7) == "PREPARE") {
          protocol::Encode(protocol::CommandComplete{"PREPARE"}, out);
        } else {
          protocol::Encode(protocol::CommandComplete{"SELECT 1"}, out);
        }
        Ready(out);
        return;
      }
      default:
        FAIL("unexpected frontend tag " << f.tag);
    }
  }
  bool skipping_ = false;
  char txn_ = 'I';
  std::string portal_text_;
};

using testing::Bind;
using testing::CloseS;
using testing::DescribeS;
using testing::Execute;
using testing::Flush;
using testing::Parse;
using testing::Sync;
constexpr auto Query = testing::QueryBytes;

// What the client sees for one flight: tags, with the SQLSTATE for errors
// and the tag for CommandComplete ("1 2 C:SELECT 1 Z").
struct Harness {
  StatementCatalog catalog;
  struct Conn {
    ConnectionStatements statements{4};
    ModelBackend backend;
  };
  std::vector<std::unique_ptr<Conn>> conns;

  Harness(int n = 2) {
    for (int i = 0; i < n; ++i) conns.push_back(std::make_unique<Conn>());
  }

  // Sends `frontend` as one flight. Frames that MustWait wait as the
  // Endpoint holds them: what went before is answered first (`waits` counts them).
  std::string Run(StatementSession& session, int conn_index, std::string frontend, int* waits = nullptr,
                  bool messages = false) {
    Conn& conn = *conns[conn_index];
    std::string to_origin;
    protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
    std::string_view in = frontend;
    std::string to_client;
    while (!in.empty()) {
      auto r = reader.Read(in);
      REQUIRE(r.is_frame());
      if (session.MustWait(r.frame(), conn.statements)) {
        if (waits != nullptr) ++*waits;
        Answer(session, conn, conn.backend.Process(to_origin), to_client);
        to_origin.clear();
        REQUIRE_FALSE(session.MustWait(r.frame(), conn.statements));
      }
      if (session.StartShapeCheck(r.frame(), conn.statements, to_origin)) {
        // As the Endpoint does: send what is queued plus the check, wait for its answer.
        Answer(session, conn, conn.backend.Process(to_origin), to_client);
        to_origin.clear();
        REQUIRE_FALSE(session.shape_check_pending());
      }
      session.OnFrontend(r.frame(), conn.statements, to_origin);
      in.remove_prefix(r.frame().size());
    }
    Answer(session, conn, conn.backend.Process(to_origin), to_client);
    return Describe(to_client, messages);
  }

  // Sets what `query` returns (one column, or NoData for ""), on every connection.
  void SetColumns(const std::string& query, const std::string& column) {
    for (auto& c : conns) c->backend.columns[query] = column;
  }

  static void Answer(StatementSession& session, Conn& conn, std::string_view from_origin, std::string& to_client) {
    protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
    while (!from_origin.empty()) {
      auto r = reader.Read(from_origin);
      REQUIRE(r.is_frame());
      if (session.OnBackend(r.frame(), conn.statements, to_client) == StatementSession::Verdict::kForward) {
        protocol::AppendRawFrame(to_client, r.frame().raw);
      }
      from_origin.remove_prefix(r.frame().size());
    }
  }

  static std::string Describe(std::string_view bytes, bool messages = false) {
    std::string s;
    protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
    while (!bytes.empty()) {
      auto r = reader.Read(bytes);
      REQUIRE(r.is_frame());
      const protocol::Frame f = r.frame();
      if (!s.empty()) s += ' ';
      s += f.tag;
      if (f.tag == 'E') s += ":" + std::string(protocol::DecodeErrorResponse(f.payload)->sqlstate());
      if (f.tag == 'E' && messages) s += "(" + std::string(protocol::DecodeErrorResponse(f.payload)->message()) + ")";
      if (f.tag == 'C') s += ":" + std::string(protocol::DecodeCommandComplete(f.payload)->tag);
      if (f.tag == 'T' && messages) s += "(" + std::string(protocol::DecodeRowDescription(f.payload)->fields[0].name) + ")";
      bytes.remove_prefix(f.size());
    }
    return s;
  }
};

TEST_CASE("two clients use one statement name for different texts on one connection") {
  Harness h(1);
  StatementSession a(h.catalog), b(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT 1") + Bind("S_1") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  CHECK(h.Run(b, 0, Parse("S_1", "SELECT 2") + Bind("S_1") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  CHECK(h.Run(a, 0, Bind("S_1") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(h.conns[0]->backend.statements == std::set<std::string>{"hp_1", "hp_2"});
  CHECK(h.conns[0]->backend.received[0] == "P hp_1");
}

TEST_CASE("the same text from two clients shares one server statement: the second Parse is checked, then folded") {
  Harness h(1);
  StatementSession a(h.catalog), b(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT $1", {23}) + Sync()) == "1 Z");
  h.conns[0]->backend.received.clear();
  // b's Parse is the origin's (a candidate, described hidden) as a direct
  // Parse would be now; the same shape: b's name uses hp_1 from then on.
  CHECK(h.Run(b, 0, Parse("other", "SELECT $1", {23}) + Bind("other") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  CHECK(Join(h.conns[0]->backend.received) == "P hp_2, D hp_2, B hp_2, E, S");
  h.conns[0]->backend.received.clear();
  CHECK(h.Run(b, 0, Bind("other") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(Join(h.conns[0]->backend.received) == "C hp_2, B hp_1, E, S");
  CHECK(h.conns[0]->backend.statements == std::set<std::string>{"hp_1"});
}

TEST_CASE("a statement prepared on one connection is re-prepared (hidden) on another before its Bind") {
  Harness h(2);
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT 1") + Sync()) == "1 Z");
  CHECK(h.Run(a, 1, Bind("S_1") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(h.conns[1]->backend.received == std::vector<std::string>{"P hp_1", "D hp_1", "B hp_1", "E", "S"});
  CHECK(h.Run(a, 1, DescribeS("S_1") + Sync()) == "t n Z");
}

TEST_CASE("Close forgets only the client's name; re-Parse of the name with another text works") {
  Harness h(1);
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT 1") + Sync()) == "1 Z");
  CHECK(h.Run(a, 0, CloseS("S_1") + Sync()) == "3 Z");
  CHECK(h.conns[0]->backend.statements.count("hp_1") == 1);  // shared: stays
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT 2") + Bind("S_1") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  CHECK(h.Run(a, 0, Bind("S_9") + Execute() + Sync()) == "E:26000 Z");
}

TEST_CASE("synthetic answers keep their place in the response stream") {
  Harness h(1);
  StatementSession a(h.catalog);
  // S_4's text is S_1's, parsed just before (its shape not described
  // yet): answered here.
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT 1") + Parse("S_2", "SELECT 2") + Parse("S_4", "SELECT 1") + CloseS("S_4") +
                        Parse("S_3", "SELECT 3") + Sync()) == "1 1 1 3 1 Z");
  CHECK(Join(h.conns[0]->backend.received) == "P hp_1, D hp_1, P hp_2, D hp_2, P hp_3, D hp_3, S");
}

TEST_CASE("a Flush behind synthetic answers carries them out through a hidden no-op Close") {
  Harness h(1);
  StatementSession a(h.catalog);
  // S_4 (S_1's text, whose shape is not described yet) is answered here,
  // behind S_1's hidden Describe.
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT 1") + Parse("S_4", "SELECT 1") + Flush()) == "1 1");
  CHECK(Join(h.conns[0]->backend.received) == "P hp_1, D hp_1, C hp_noop, H");
  CHECK(h.Run(a, 0, Bind("S_4") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(a.pending() == 0);
}

TEST_CASE("several unnamed Parses in one pipeline, and the unnamed statement follows the client") {
  Harness h(2);
  StatementSession a(h.catalog), b(h.catalog);
  CHECK(h.Run(a, 0, Parse("", "SELECT 1") + Bind("") + Execute() + Parse("", "SELECT 2") + Bind("") + Execute() +
                        Sync()) == "1 2 C:SELECT 1 1 2 C:SELECT 1 Z");
  CHECK(h.conns[0]->backend.unnamed_text == "SELECT 2");
  // Another connection: re-Parsed before the Bind.
  CHECK(h.Run(a, 1, Bind("") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(h.conns[1]->backend.unnamed_text == "SELECT 2");
  // Another client on connection 0 may not bind a's unnamed statement.
  CHECK(h.Run(b, 0, Bind("") + Execute() + Sync()) == "E:26000 Z");
  // b's own unnamed statement replaces it; a's is re-Parsed when a comes back.
  CHECK(h.Run(b, 1, Parse("", "SELECT 3") + Sync()) == "1 Z");
  h.conns[1]->backend.received.clear();
  CHECK(h.Run(a, 1, DescribeS("") + Sync()) == "t n Z");
  CHECK(h.conns[1]->backend.received == std::vector<std::string>{"P ", "D ", "S"});
}

TEST_CASE("an error mid-pipeline skips its own Sync group only, and undoes the skipped Parses") {
  Harness h(1);
  StatementSession a(h.catalog);
  std::string flight = Parse("S_1", "FAIL here") + Bind("S_1") + Execute() + Parse("S_2", "SELECT 2") + Sync() +
                       Parse("S_3", "SELECT 3") + Bind("S_3") + Execute() + Sync();
  CHECK(h.Run(a, 0, flight) == "E:42601 Z 1 2 C:SELECT 1 Z");
  CHECK(a.pending() == 0);
  // S_2 was skipped by the backend: it does not exist, as directly.
  CHECK(h.Run(a, 0, Bind("S_2") + Execute() + Sync()) == "E:26000 Z");
  CHECK(h.conns[0]->backend.statements == std::set<std::string>{"hp_3"});
}

TEST_CASE("a synthetic ParseComplete after an error in its Sync group is dropped") {
  Harness h(1);
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT 1") + Sync()) == "1 Z");
  // S_2 (the same text: answered here) is skipped by the origin, so it is
  // not made: the next Parse of S_2 makes it, with no 42P05.
  CHECK(h.Run(a, 0, Bind("nope") + Parse("S_2", "SELECT 1") + Sync()) == "E:26000 Z");
  CHECK(h.Run(a, 0, Parse("S_2", "SELECT 1") + Sync()) == "1 Z");
  CHECK(h.Run(a, 0, Bind("nope") + Execute() + Parse("S_3", "SELECT 1") + Sync()) == "E:26000 Z");
  CHECK(h.Run(a, 0, Bind("S_3") + Execute() + Sync()) == "E:26000 Z");
  // A name the client holds: the origin's own 42P05, and the statement stays.
  CHECK(h.Run(a, 0, Parse("S_2", "SELECT 2") + Bind("S_2") + Execute() + Sync()) == "E:42P05 Z");
  CHECK(h.Run(a, 0, Bind("S_2") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(h.Run(a, 0, Bind("S_1") + Execute() + Sync()) == "2 C:SELECT 1 Z");
}

TEST_CASE("an injected Parse that fails reports its error in place of the Bind's answer") {
  Harness h(2);
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT 1") + Sync()) == "1 Z");
  // Connection 1 lacks it; make its Parse fail there (another 42P05-free failure).
  h.conns[1]->backend.statements.insert("hp_1");  // someone else's hp_1 (cannot happen; forces an error)
  CHECK(h.Run(a, 1, Bind("S_1") + Execute() + Sync()) == "E:42P05 Z");
}

TEST_CASE("cached plan must not change result type: the stale statement is closed; a re-Parse makes a new one") {
  Harness h(1);
  h.SetColumns("SELECT * FROM t", "a");
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT * FROM t") + Sync()) == "1 Z");
  h.conns[0]->backend.stale.insert("hp_1");  // ALTER TABLE t ...
  h.SetColumns("SELECT * FROM t", "b");
  CHECK(h.Run(a, 0, Bind("S_1") + Execute() + Sync()) == "E:0A000 Z");
  h.conns[0]->backend.received.clear();
  // While its result type differs from the one it was prepared with, S_1
  // keeps failing, as on a direct connection (each use checks it again).
  CHECK(h.Run(a, 0, Bind("S_1") + Execute() + Sync()) == "E:0A000 Z");
  CHECK(h.conns[0]->backend.received ==
        std::vector<std::string>{"C hp_1", "P hp_1", "D hp_1", "H", "C hp_1", "B hp_stale", "skipped E", "S"});
  h.conns[0]->backend.received.clear();
  CHECK(h.Run(a, 0, CloseS("S_1") + Parse("S_1", "SELECT * FROM t") + Bind("S_1") + Execute() + Sync()) ==
        "3 1 2 C:SELECT 1 Z");
  CHECK(h.conns[0]->backend.received == std::vector<std::string>{"P hp_2", "D hp_2", "B hp_2", "E", "S"});
}

TEST_CASE("after 0A000 a driver's re-Parse of the same text gets a new server statement on every connection") {
  // asyncpg and PgJDBC re-prepare once outside a transaction; the retry may
  // land on another pooled connection that still holds the stale statement.
  Harness h(2);
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT * FROM t") + Bind("S_1") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  CHECK(h.Run(a, 1, Bind("S_1") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  h.conns[0]->backend.stale.insert("hp_1");  // ALTER TABLE t ... outside hyperpool
  h.conns[1]->backend.stale.insert("hp_1");
  CHECK(h.Run(a, 0, Bind("S_1") + Execute() + Sync()) == "E:0A000 Z");  // as on a direct connection
  h.conns[1]->backend.received.clear();
  CHECK(h.Run(a, 1, Parse("S_2", "SELECT * FROM t") + Bind("S_2") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  CHECK(h.conns[1]->backend.received == std::vector<std::string>{"P hp_2", "D hp_2", "B hp_2", "E", "S"});
  StatementSession b(h.catalog);  // another client, later
  CHECK(h.Run(b, 1, Parse("X", "SELECT * FROM t") + Bind("X") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
}

TEST_CASE("a name mapped to a statement whose result type changed fails with 0A000 on every connection") {
  // Re-preparing it silently where the connection lacks it would hand a
  // driver rows of another shape than it described (asyncpg: "the number of
  // columns in the result row (3) is different from what was described (2)").
  Harness h(2);
  h.SetColumns("SELECT * FROM t", "a");
  StatementSession a(h.catalog);
  StatementSession b(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT * FROM t") + Bind("S_1") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  CHECK(h.Run(b, 0, Parse("B_1", "SELECT * FROM t") + DescribeS("B_1") + Sync()) == "1 t T Z");
  h.conns[0]->backend.stale.insert("hp_1");
  h.SetColumns("SELECT * FROM t", "b");
  CHECK(h.Run(a, 0, Bind("S_1") + Execute() + Sync()) == "E:0A000 Z");
  h.conns[1]->backend.received.clear();
  CHECK(h.Run(b, 1, Bind("B_1") + Execute() + Sync()) == "E:0A000 Z");
  // Checked in a flight of its own first (its shape is still another): the
  // Bind then names a statement that does not exist, so nothing of it runs.
  CHECK(h.conns[1]->backend.received ==
        std::vector<std::string>{"P hp_1", "D hp_1", "H", "C hp_1", "B hp_stale", "skipped E", "S"});
  CHECK(h.Run(b, 1, DescribeS("B_1") + Sync()) == "E:0A000 Z");
  // The driver re-prepares: a new statement, fine on both connections.
  CHECK(h.Run(b, 1, Parse("B_2", "SELECT * FROM t") + Bind("B_2") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  CHECK(h.Run(a, 0, Parse("S_2", "SELECT * FROM t") + Bind("S_2") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
}

TEST_CASE("DDL through the Endpoint: a later Parse of a known text gets a new server statement") {
  Harness h(2);
  StatementSession a(h.catalog);
  StatementSession b(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT * FROM t") + Bind("S_1") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  CHECK(h.Run(b, 1, Query("ALTER TABLE t ADD COLUMN c int")) == "C:ALTER TABLE Z");
  h.conns[0]->backend.stale.insert("hp_1");
  h.conns[0]->backend.received.clear();
  // b prepares the same text after the DDL: on a direct connection it would work.
  CHECK(h.Run(b, 0, Parse("Q_1", "SELECT * FROM t") + Bind("Q_1") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  CHECK(h.conns[0]->backend.received == std::vector<std::string>{"P hp_2", "D hp_2", "B hp_2", "E", "S"});
  // a prepared it before the DDL: it fails as it would directly.
  CHECK(h.Run(a, 0, Bind("S_1") + Execute() + Sync()) == "E:0A000 Z");
  // Statements parsed after the DDL are shared again.
  CHECK(h.Run(a, 0, Parse("S_3", "SELECT * FROM t") + Sync()) == "1 Z");
  CHECK(h.Run(a, 0, Bind("S_3") + Execute() + Sync()) == "2 C:SELECT 1 Z");
}

TEST_CASE("after DDL a replay whose result shape changed fails the Bind with 0A000 before it runs") {
  // postgres.js prepares `select * from t`, t is dropped and recreated with
  // other columns, the next execution lands on a connection that lacks the
  // statement: directly PostgreSQL answers 0A000 and the driver re-prepares;
  // re-Parsing it silently would hand the driver rows of another shape.
  Harness h(2);
  h.SetColumns("SELECT * FROM t", "a");
  StatementSession a(h.catalog);
  StatementSession b(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT * FROM t") + DescribeS("S_1") + Sync()) == "1 t T Z");
  CHECK(h.Run(b, 0, Parse("B_1", "SELECT * FROM t") + Sync()) == "1 Z");  // shares hp_1
  CHECK(h.Run(b, 1, Query("ALTER TABLE t RENAME a TO b")) == "C:ALTER TABLE Z");
  h.SetColumns("SELECT * FROM t", "b");
  h.conns[1]->backend.received.clear();
  CHECK(h.Run(a, 1, Bind("S_1") + Execute() + Sync()) == "E:0A000 Z");
  // The check ran in its own flight; the Bind named no statement, so nothing of it ran.
  CHECK(h.conns[1]->backend.received ==
        std::vector<std::string>{"P hp_1", "D hp_1", "H", "C hp_1", "B hp_stale", "skipped E", "S"});
  // Every client still holding the old shape fails the same way, also its Describe.
  CHECK(h.Run(b, 1, DescribeS("B_1") + Sync()) == "E:0A000 Z");
  CHECK(h.Run(b, 1, Bind("B_1") + Execute() + Sync()) == "E:0A000 Z");
  // The driver re-prepares: a new server statement, fine everywhere.
  CHECK(h.Run(a, 1, Parse("S_2", "SELECT * FROM t") + Bind("S_2") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  CHECK(h.Run(a, 0, Bind("S_2") + Execute() + Sync()) == "2 C:SELECT 1 Z");
}

TEST_CASE("the 0A000 for a changed shape is PostgreSQL's own (drivers match its routine)") {
  Harness h(2);
  h.SetColumns("SELECT * FROM t", "a");
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT * FROM t") + Bind("S_1") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  CHECK(h.Run(a, 0, Query("DROP TABLE t")) == "C:SELECT 1 Z");
  // (The model answers any other Query "SELECT 1": bump the epoch as DROP would.)
  h.catalog.SchemaChanged();
  h.SetColumns("SELECT * FROM t", "b");
  const StatementRef* s1 = a.client().Find("S_1");
  REQUIRE(s1 != nullptr);
  const StatementRef statement = *s1;
  CHECK(h.Run(a, 1, Bind("S_1") + Execute() + Sync()) == "E:0A000 Z");
  CHECK(statement->retired);
  auto error = protocol::DecodeErrorResponse(statement->stale_error);
  REQUIRE(error.ok());
  CHECK(error->sqlstate() == "0A000");
  CHECK(error->message() == "cached plan must not change result type");
  CHECK(error->Get('R') == "RevalidateCachedQuery");
}

TEST_CASE("after DDL a replay with the same result shape goes on (one check per statement)") {
  Harness h(2);
  h.SetColumns("SELECT * FROM t", "a");
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT * FROM t") + Bind("S_1") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  CHECK(h.Run(a, 0, Query("ALTER TABLE u ADD COLUMN c int")) == "C:ALTER TABLE Z");
  h.conns[1]->backend.received.clear();
  CHECK(h.Run(a, 1, Bind("S_1") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(h.conns[1]->backend.received == std::vector<std::string>{"P hp_1", "D hp_1", "H", "B hp_1", "E", "S"});
}

TEST_CASE("DDL that bypassed the Endpoint: a replay's changed shape found in flight replaces the unit's rows") {
  Harness h(2);
  h.SetColumns("SELECT * FROM t", "a");
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT * FROM t") + DescribeS("S_1") + Sync()) == "1 t T Z");
  h.SetColumns("SELECT * FROM t", "b");  // no epoch change: the Endpoint did not see it
  h.conns[1]->backend.received.clear();
  CHECK(h.Run(a, 1, Bind("S_1") + Execute() + Sync()) == "E:0A000 Z");
  CHECK(h.conns[1]->backend.received == std::vector<std::string>{"P hp_1", "D hp_1", "B hp_1", "E", "S"});
  // The session is in step again; the re-prepare works.
  CHECK(h.Run(a, 1, Parse("S_2", "SELECT * FROM t") + Bind("S_2") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
}

TEST_CASE("DDL that bypassed the Endpoint: a client that parses after it gets the new shape, never 0A000") {
  // A direct connection parses the client's statement when it asks: its
  // Describe and Bind cannot fail with "cached plan must not change result
  // type". Mapping the Parse onto the shared statement made before the DDL
  // did (asyncpg: InvalidCachedStatementError at prepare).
  Harness h(2);
  h.SetColumns("SELECT * FROM t", "a");
  StatementSession a(h.catalog), b(h.catalog), c(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT * FROM t") + Bind("S_1") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  // ALTER TABLE t ... on the origin, not through the Endpoint.
  h.conns[0]->backend.stale.insert("hp_1");
  h.SetColumns("SELECT * FROM t", "b");
  h.conns[0]->backend.received.clear();
  CHECK(h.Run(b, 0, Parse("X", "SELECT * FROM t") + DescribeS("X") + Sync(), nullptr, true) == "1 t T(b) Z");
  CHECK(Join(h.conns[0]->backend.received) == "P hp_2, D hp_2, D hp_2, S");
  CHECK(h.Run(b, 0, Bind("X") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  // a parsed before the DDL: its name fails as on a direct connection.
  CHECK(h.Run(a, 0, Bind("S_1") + Execute() + Sync()) == "E:0A000 Z");
  CHECK(h.Run(a, 1, Bind("S_1") + Execute() + Sync()) == "E:0A000 Z");
  // Later clients share b's statement: their own candidates fold into it
  // where the connection has it (here it does not: c keeps its own).
  h.conns[1]->backend.received.clear();
  CHECK(h.Run(c, 1, Parse("Y", "SELECT * FROM t") + DescribeS("Y") + Bind("Y") + Execute() + Sync(), nullptr, true) ==
        "1 t T(b) 2 C:SELECT 1 Z");
  CHECK(Join(h.conns[1]->backend.received) == "P hp_3, D hp_3, D hp_3, B hp_3, E, S");
  h.conns[1]->backend.received.clear();
  CHECK(h.Run(c, 1, Bind("Y") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(Join(h.conns[1]->backend.received) == "B hp_3, E, S");
  StatementSession d(h.catalog);
  h.conns[0]->backend.received.clear();
  CHECK(h.Run(d, 0, Parse("Z", "SELECT * FROM t") + Bind("Z") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  CHECK(h.Run(d, 0, Bind("Z") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(Join(h.conns[0]->backend.received) == "P hp_4, D hp_4, B hp_4, E, S, C hp_4, B hp_2, E, S");
}

TEST_CASE("a name a Parse-only unit answered without the origin is parsed as the client's own at its first use") {
  Harness h(1);
  h.SetColumns("SELECT * FROM t", "a");
  StatementSession a(h.catalog), b(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT * FROM t") + Bind("S_1") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
  // pgbench -M prepared's PQprepare, answered here (the statement is known).
  std::string frames = Parse("P_1", "SELECT * FROM t") + Sync();
  REQUIRE(b.IsParseOnlyUnit(frames, /*known_only=*/true));
  std::string answers;
  REQUIRE(testing::ForEachFrame(frames, [&](const protocol::Frame& f) { b.AnswerParseOnly(f, answers); }));
  CHECK(Harness::Describe(answers) == "1 Z");
  h.conns[0]->backend.stale.insert("hp_1");  // DDL that bypassed the Endpoint, after that Parse
  h.SetColumns("SELECT * FROM t", "b");
  h.conns[0]->backend.received.clear();
  CHECK(h.Run(b, 0, Bind("P_1") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(Join(h.conns[0]->backend.received) == "P hp_2, D hp_2, B hp_2, E, S");
  CHECK(h.Run(a, 0, Bind("S_1") + Execute() + Sync()) == "E:0A000 Z");  // parsed before it
  // Without DDL the first use folds into the shared statement.
  StatementSession c(h.catalog);
  frames = Parse("P_2", "SELECT * FROM t") + Sync();
  answers.clear();
  REQUIRE(testing::ForEachFrame(frames, [&](const protocol::Frame& f) { c.AnswerParseOnly(f, answers); }));
  CHECK(h.Run(c, 0, Bind("P_2") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  h.conns[0]->backend.received.clear();
  CHECK(h.Run(c, 0, Bind("P_2") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(Join(h.conns[0]->backend.received) == "C hp_3, B hp_2, E, S");
}

TEST_CASE("the LRU bound closes evicted statements on the connection, hidden from the client") {
  Harness h(1);  // capacity 4
  StatementSession a(h.catalog);
  std::string flight;
  for (int i = 0; i < 6; ++i) flight += Parse("S_" + std::to_string(i), "SELECT " + std::to_string(i));
  flight += Sync();
  CHECK(h.Run(a, 0, flight) == "1 1 1 1 1 1 Z");
  CHECK(h.conns[0]->backend.statements.size() == 4);
  CHECK(h.conns[0]->statements.size() == 4);
  CHECK(h.Run(a, 0, Bind("S_0") + Execute() + Sync()) == "2 C:SELECT 1 Z");
}

TEST_CASE("SQL-level PREPARE pins; DEALLOCATE ALL and DISCARD ALL unpin and clear the statements") {
  Harness h(1);
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT 1") + Sync()) == "1 Z");
  CHECK(h.Run(a, 0, Query("PREPARE q AS SELECT 1")) == "C:PREPARE Z");
  CHECK(a.pinned());
  auto which = GENERATE(as<std::string>{}, "DEALLOCATE ALL", "DISCARD ALL");
  CHECK(h.Run(a, 0, Query(which)) == "C:" + which + " Z");
  CHECK_FALSE(a.pinned());
  CHECK(a.client().size() == 0);
  CHECK(h.conns[0]->statements.size() == 0);
  // A new Parse of the old name prepares again (no 42P05).
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT 1") + Bind("S_1") + Execute() + Sync()) == "1 2 C:SELECT 1 Z");
}

TEST_CASE("DEALLOCATE of a protocol-level name (psycopg's eviction) forgets it, as Query or unnamed Parse") {
  Harness h(1);
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("_pg3_0", "SELECT 1") + Parse("_pg3_1", "SELECT 2") + Sync()) == "1 1 Z");
  CHECK(h.Run(a, 0, Query("DEALLOCATE _pg3_0")) == "C:DEALLOCATE Z");
  CHECK(a.client().Find("_pg3_0") == nullptr);
  CHECK(h.Run(a, 0, Parse("", "DEALLOCATE _pg3_1") + Bind("") + Execute() + Sync()) == "1 2 C:DEALLOCATE Z");
  CHECK(a.client().size() == 0);
  CHECK_FALSE(a.pinned());
  CHECK(h.conns[0]->backend.statements.size() == 2);  // the shared server statements stay
}


TEST_CASE("a table re-created with the same columns keeps its statements: table OIDs are not the result type") {
  // psycopg 3 prepared `select * from t`; another connection drops t and
  // creates it again with the same columns. PostgreSQL re-plans and runs it
  // (its RowDescription now names another table OID).
  Harness h(2);
  h.SetColumns("SELECT * FROM t", "a");
  for (auto& c : h.conns) c->backend.table_oid = 16384;
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("_pg3_0", "SELECT * FROM t") + DescribeS("_pg3_0") + Sync()) == "1 t T Z");
  CHECK(h.Run(a, 1, Query("DROP TABLE t")) == "C:SELECT 1 Z");
  h.catalog.SchemaChanged();  // (the model answers "SELECT 1": as DROP would)
  for (auto& c : h.conns) c->backend.table_oid = 16390;
  CHECK(h.Run(a, 1, Bind("_pg3_0") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  // The same when the DDL bypassed the Endpoint (checked in flight).
  for (auto& c : h.conns) c->backend.table_oid = 16400;
  StatementSession b(h.catalog);
  CHECK(h.Run(b, 1, Parse("S_1", "SELECT * FROM t") + Sync()) == "1 Z");
  h.conns[1]->backend.statements.clear();  // conn 1 lost it (as after an eviction elsewhere)
  h.conns[1]->statements.Clear();
  for (auto& c : h.conns) c->backend.table_oid = 16410;
  CHECK(h.Run(b, 1, Bind("S_1") + Execute() + Sync()) == "2 C:SELECT 1 Z");
}

TEST_CASE("a statement whose result type changed works again once its query has its original result type") {
  // Directly: 0A000 while the table has other columns, rows again once it is
  // re-created as it was (the plan cache compares with the original type).
  Harness h(2);
  h.SetColumns("SELECT * FROM t", "a");
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT * FROM t") + DescribeS("S_1") + Sync()) == "1 t T Z");
  CHECK(h.Run(a, 1, Query("ALTER TABLE t RENAME a TO b")) == "C:ALTER TABLE Z");
  h.SetColumns("SELECT * FROM t", "b");
  CHECK(h.Run(a, 1, Bind("S_1") + Execute() + Sync()) == "E:0A000 Z");
  CHECK(h.Run(a, 1, Bind("S_1") + Execute() + Sync()) == "E:0A000 Z");
  CHECK(h.Run(a, 0, Query("ALTER TABLE t RENAME b TO a")) == "C:ALTER TABLE Z");
  h.SetColumns("SELECT * FROM t", "a");
  h.conns[1]->backend.received.clear();
  CHECK(h.Run(a, 1, Bind("S_1") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(h.conns[1]->backend.received == std::vector<std::string>{"P hp_1", "D hp_1", "H", "B hp_1", "E", "S"});
}

TEST_CASE("a client reading pg_prepared_statements sees its own statements only, in its order") {
  // The model answers a read of the view with "SELECT <statements on the backend>".
  Harness h(1);
  StatementSession other(h.catalog);
  StatementSession a(h.catalog);
  const std::string view = "select count(*) from pg_prepared_statements";
  CHECK(h.Run(other, 0, Parse("o1", "SELECT 1") + Parse("o2", "SELECT 2") + Sync()) == "1 1 Z");
  CHECK(h.conns[0]->backend.statements.size() == 2);
  // A fresh client: none of the other session's statements.
  CHECK(h.Run(a, 0, Query(view)) == "C:SELECT 0 Z");
  CHECK(h.Run(a, 0, Parse("", view) + Bind("") + Execute() + Sync()) == "1 2 C:SELECT 0 Z");
  // Its own (one shares its text with the other session's, whose
  // statement the connection no longer has: its candidate hp_3 stays its
  // own), prepared on the connection only now, in its order.
  CHECK(h.Run(a, 0, Parse("s2", "SELECT 2") + Parse("s3", "SELECT 3") + Sync()) == "1 1 Z");
  h.conns[0]->backend.received.clear();
  CHECK(h.Run(a, 0, Query(view)) == "C:SELECT 2 Z");
  CHECK(Join(h.conns[0]->backend.received) ==
        "C hp_4, C hp_3, P hp_3, D hp_3, P hp_4, D hp_4, S, Q " + view);
  // Its own statement reading the view counts itself (psycopg's 6th run of it).
  CHECK(h.Run(a, 0, Parse("_pg3_0", view) + Bind("_pg3_0") + Execute() + Sync()) == "1 2 C:SELECT 3 Z");
  CHECK(h.Run(a, 0, Bind("_pg3_0") + Execute() + Sync()) == "2 C:SELECT 3 Z");
  // Forgotten names are gone from the view too (psycopg's DEALLOCATE).
  CHECK(h.Run(a, 0, Query("DEALLOCATE s3")) == "C:DEALLOCATE Z");
  CHECK(h.Run(a, 0, Bind("_pg3_0") + Execute() + Sync()) == "2 C:SELECT 2 Z");
  // The other session's statements are replayed where it needs them.
  CHECK(h.Run(other, 0, Bind("o1") + Execute() + Sync()) == "2 C:SELECT 1 Z");
}

TEST_CASE("a statement of the client's that no longer parses is missing from the view, not an error") {
  Harness h(1);
  StatementSession a(h.catalog);
  const std::string view = "select count(*) from pg_prepared_statements";
  // Prepared without a connection (a parse-only unit): its error would come at its first Bind.
  std::string answers;
  REQUIRE(testing::ForEachFrame(Parse("s1", "FAIL later") + Parse("s2", "SELECT 2") + Sync(),
                                [&](const protocol::Frame& f) { a.AnswerParseOnly(f, answers); }));
  CHECK(Harness::Describe(answers) == "1 1 Z");
  CHECK(h.Run(a, 0, Query(view)) == "C:SELECT 0 Z");  // s1's Parse failed: its group skipped s2 too
  CHECK(h.Run(a, 0, Parse("", view) + Bind("") + Execute() + Sync()) == "1 2 C:SELECT 0 Z");
  CHECK(h.Run(a, 0, Bind("s2") + Execute() + Sync()) == "2 C:SELECT 1 Z");
}

// ---------------------------------------------------------------------------
// Pipelined Sync groups and failed transactions (fuzzer findings, 2026-12-07)
// ---------------------------------------------------------------------------

TEST_CASE("a Parse of a text the connection holds fails inside a failed transaction block as directly (25P02)") {
  Harness h(1);
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT 1") + Sync()) == "1 Z");
  CHECK(h.Run(a, 0, Query("BEGIN")) == "C:BEGIN Z");
  CHECK(h.Run(a, 0, Query("FAIL") ) == "E:42601 Z");
  // The connection holds SELECT 1 (hp_1): S_2 is parsed as the client's
  // own (a candidate), and PostgreSQL answers 25P02.
  CHECK(h.Run(a, 0, Parse("S_2", "SELECT 1") + Sync()) == "E:25P02 Z");
  const std::vector<std::string>& received = h.conns[0]->backend.received;
  CHECK(std::vector<std::string>(received.end() - 3, received.end()) ==
        std::vector<std::string>{"P hp_2", "skipped D", "S"});
  // COMMIT / ROLLBACK parse in a failed block: the probe says so, and closes itself.
  CHECK(h.Run(a, 0, Parse("S_3", "ROLLBACK") + Sync()) == "1 Z");
  CHECK(h.Run(a, 0, Parse("S_4", "ROLLBACK") + Sync()) == "1 Z");
  CHECK(h.conns[0]->backend.statements.count("hp_probe") == 0);
  CHECK(h.Run(a, 0, Query("ROLLBACK")) == "C:ROLLBACK Z");
  CHECK(h.Run(a, 0, Bind("S_2") + Execute() + Sync()) == "E:26000 Z");  // never made, as directly
  CHECK(h.Run(a, 0, Bind("S_1") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(h.Run(a, 0, Parse("S_2", "SELECT 1") + Sync()) == "1 Z");  // outside the block: made
}

TEST_CASE("a later group's Parse of a name waits for an earlier group behind a hidden Close of that name") {
  // The fuzzer's f01928: the first group fails before its Parses of S_2 (so
  // S_2 never exists, as directly); its 42P05 path left a hidden Close of
  // the raw name S_2 for the next message, which the second group's Bind
  // sends. The second group's Parse of S_2 must still wait for the first
  // group's answers: deciding on the name before them sent it the 42P05
  // path (PostgreSQL: "prepared statement "S_2" already exists").
  Harness h(1);
  StatementSession a(h.catalog);
  int waits = 0;
  CHECK(h.Run(a, 0, Bind("nope") + Parse("S_2", "SELECT 1") + Parse("S_2", "SELECT 2") + Sync() +
                        Parse("S_3", "SELECT 3") + Bind("S_3") + Execute() + Parse("S_2", "SELECT 4") + Bind("S_2") +
                        Execute() + Sync(), &waits) == "E:26000 Z 1 2 C:SELECT 1 1 2 C:SELECT 1 Z");
  CHECK(waits == 1);
  CHECK(h.Run(a, 0, Bind("S_2") + Execute() + Sync()) == "2 C:SELECT 1 Z");
}

TEST_CASE("an error names the client's statement also when a Close of the name follows it in its group") {
  // The fuzzer's soft01421 (there a DEALLOCATE): the Close, answered here,
  // took the name before the error came; it is named after the skipped
  // messages are undone.
  Harness h(1);
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("s1", "SELECT 1") + Parse("s2", "SELECT 1") + Sync()) == "1 1 Z");
  h.conns[0]->backend.statements.erase("hp_1");  // gone behind the session's back: the origin's error names hp_1
  CHECK(h.Run(a, 0, Bind("s2") + Execute() + CloseS("s2") + Sync(), nullptr, true) ==
        "E:26000(prepared statement \"s2\" does not exist) Z");
}

TEST_CASE("DEALLOCATE of a protocol-level name inside a failed transaction block is 25P02 and keeps it") {
  Harness h(1);
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT 1") + Sync()) == "1 Z");
  CHECK(h.Run(a, 0, Query("BEGIN") + Query("FAIL")) == "C:BEGIN Z E:42601 Z");
  CHECK(h.Run(a, 0, Query("DEALLOCATE S_1")) == "E:25P02 Z");
  CHECK(h.Run(a, 0, Query("ROLLBACK")) == "C:ROLLBACK Z");
  CHECK(h.Run(a, 0, Bind("S_1") + Execute() + Sync()) == "2 C:SELECT 1 Z");
}

TEST_CASE("pipelined Sync groups: a later group that names an earlier group's statement waits for its answer") {
  Harness h(1);
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT 1") + Sync()) == "1 Z");
  int waits = 0;
  // S_2 (a text the connection holds, parsed as the client's own) is
  // skipped after the error, so the next group's Bind of it fails, as
  // directly; it needs no wait: the origin lacks its server statement
  // exactly when the name would not exist directly.
  CHECK(h.Run(a, 0, Bind("nope") + Parse("S_2", "SELECT 1") + Sync() + Bind("S_2") + Execute() + Sync(), &waits) ==
        "E:26000 Z E:26000 Z");
  CHECK(waits == 0);
  // A re-Parse of a name whose Parse failed in an earlier group: no 42P05.
  waits = 0;
  CHECK(h.Run(a, 0, Parse("S_3", "FAIL") + Sync() + Parse("S_3", "SELECT 3") + Sync(), &waits) == "E:42601 Z 1 Z");
  CHECK(waits == 1);
  // DEALLOCATE ALL in a Query, then a Parse of a text the connection held.
  waits = 0;
  CHECK(h.Run(a, 0, Query("DEALLOCATE ALL") + Parse("S_4", "SELECT 1") + Bind("S_4") + Execute() + Sync(), &waits) ==
        "C:DEALLOCATE ALL Z 1 2 C:SELECT 1 Z");
  CHECK(waits == 1);
  // The client's own Parse, sent: the origin answers the later Bind as
  // directly (no wait); the error names the client's statement.
  waits = 0;
  CHECK(h.Run(a, 0, Parse("S_5", "FAIL") + Sync() + Bind("S_5") + Execute() + Sync(), &waits, true) ==
        "E:42601(model error) Z E:26000(prepared statement \"S_5\" does not exist) Z");
  CHECK(waits == 0);
  // Nothing of an earlier group pending: nothing waits.
  waits = 0;
  CHECK(h.Run(a, 0, Parse("S_6", "SELECT 6") + Bind("S_6") + Execute() + Sync(), &waits) == "1 2 C:SELECT 1 Z");
  CHECK(h.Run(a, 0, Bind("S_6") + Execute() + Sync() + Bind("S_6") + Execute() + Sync(), &waits) ==
        "2 C:SELECT 1 Z 2 C:SELECT 1 Z");
  CHECK(waits == 0);
}

TEST_CASE("the unnamed statement after a failed or skipped Parse('') is what PostgreSQL has") {
  Harness h(2);
  StatementSession a(h.catalog);
  // Failed: PostgreSQL dropped the one before as it began the new one.
  CHECK(h.Run(a, 0, Parse("", "SELECT 1") + Sync()) == "1 Z");
  CHECK(h.Run(a, 0, Parse("", "FAIL") + Sync()) == "E:42601 Z");
  CHECK(h.Run(a, 1, Bind("") + Execute() + Sync()) == "E:26000 Z");
  // Skipped: the one before stays (re-Parsed on another connection).
  CHECK(h.Run(a, 0, Parse("", "SELECT 1") + Sync()) == "1 Z");
  CHECK(h.Run(a, 0, Bind("nope") + Parse("", "SELECT 2") + Sync()) == "E:26000 Z");
  CHECK(h.Run(a, 1, Bind("") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(h.conns[1]->backend.unnamed_text == "SELECT 1");
  // A skipped Query does not drop it either, even with a Parse('') skipped before it.
  CHECK(h.Run(a, 0, Bind("nope") + Parse("", "SELECT 3") + Query("SELECT 4") + Sync()) == "E:26000 Z");
  CHECK(h.Run(a, 1, Bind("") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  // ...nor a Parse('') after a Query the origin skips (the Query ends no Sync group).
  CHECK(h.Run(a, 0, Bind("nope") + Query("SELECT 4") + Parse("", "SELECT 5") + Sync()) == "E:26000 Z");
  CHECK(h.Run(a, 1, DescribeS("") + Sync()) == "t n Z");
  CHECK(h.conns[1]->backend.unnamed_text == "SELECT 1");
  // Two skips in one write: a Query of the second group dropped the
  // statement the first group's skipped Parse('') would have made.
  CHECK(h.Run(a, 0, Query("SELECT 0") + Bind("nope") + Parse("", "SELECT 6") + Sync() + Bind("nope") +
                        Query("SELECT 7") + Sync()) == "C:SELECT 1 Z E:26000 Z E:26000 Z");
  CHECK(h.Run(a, 1, Bind("") + Execute() + Sync()) == "E:26000 Z");
}

TEST_CASE("a Close('S') or DEALLOCATE the origin skipped keeps the client's name") {
  Harness h(1);
  StatementSession a(h.catalog);
  CHECK(h.Run(a, 0, Parse("S_1", "SELECT 1") + Sync()) == "1 Z");
  CHECK(h.Run(a, 0, Bind("nope") + CloseS("S_1") + Sync()) == "E:26000 Z");
  CHECK(h.Run(a, 0, Bind("S_1") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  // The same for a DEALLOCATE answered here (a Query the origin skips).
  CHECK(h.Run(a, 0, Bind("nope") + Query("DEALLOCATE S_1") + Sync()) == "E:26000 Z");
  CHECK(h.Run(a, 0, Bind("S_1") + Execute() + Sync()) == "2 C:SELECT 1 Z");
  CHECK(h.Run(a, 0, CloseS("S_1") + Sync()) == "3 Z");
  CHECK(h.Run(a, 0, Bind("S_1") + Execute() + Sync()) == "E:26000 Z");
}

}  // namespace
}  // namespace hyperpool::endpoint
