// Unit tests of the Client's statement metadata (src/client/statement_metadata.h)
// and its extended-protocol forwarding (src/client/extended_session.h): local
// Parse/Describe answers, deferred Parses, the result-shape check at Bind.

#include <catch2/catch_test_macros.hpp>

#include "client/extended_session.h"
#include "client/session_key.h"
#include "client/statement_metadata.h"
#include "cache/tier.h"
#include "protocol/codec.h"
#include "unit/endpoint/frontend_builders.h"

namespace hyperpool::client {
namespace {

namespace pr = protocol;
using hyperpool::testing::Bind;
using testing::DescribeS;
using testing::Execute;
using testing::Flush;
using testing::Parse;
using testing::QueryBytes;
using testing::Sync;

const std::string kDb = "db";
const std::string kFp = "fp";

std::string Frame(char tag, std::string_view payload = {}) {
  std::string out;
  pr::AppendFrame(out, tag, payload);
  return out;
}
std::string ParamDesc(std::vector<uint32_t> types) {
  std::string p;
  p.push_back(static_cast<char>(types.size() >> 8));
  p.push_back(static_cast<char>(types.size()));
  for (uint32_t t : types) {
    for (int i = 3; i >= 0; --i) p.push_back(static_cast<char>(t >> (8 * i)));
  }
  return Frame('t', p);
}
// A RowDescription of one column `name` of type `type`, format `format`.
std::string RowDesc(std::string_view name, uint32_t type, int16_t format = 0) {
  pr::RowDescription r;
  pr::FieldDescription f;
  f.name = name;
  f.type_oid = type;
  f.type_size = 4;
  f.format = format;
  r.fields.push_back(f);
  std::string out;
  pr::Encode(r, out);
  return out;
}
std::string DescribeP(std::string_view portal = "") {
  std::string out;
  pr::Encode(pr::Describe{pr::ObjectKind::kPortal, portal}, out);
  return out;
}
const std::string kParseComplete = Frame('1');
const std::string kBindComplete = Frame('2');
const std::string kReadyIdle = std::string("Z\0\0\0\5I", 6);
std::string DataRow() { return Frame('D', std::string("\0\1\0\0\0\1x", 7)); }
std::string Complete(std::string_view tag) { return Frame('C', std::string(tag) + std::string(1, '\0')); }

// Feeds `bytes` frame by frame, as the Client's AppToLink does.
struct Driver {
  ExtendedSession& ext;
  ExtendedContext ctx{true, 'I', true};
  std::string to_link;
  std::string local;
  size_t answered_locally = 0;

  void Send(const std::string& bytes) {
    size_t pos = 0;
    while (pos < bytes.size()) {
      pr::FrameReader reader(pr::FrameReader::Mode::kTagged);
      pr::FrameReader::Result r = reader.Read(std::string_view(bytes).substr(pos));
      REQUIRE(r.is_frame());
      pos += r.frame().size();
      ctx.nothing_sent = to_link.empty();
      auto res = ext.OnFrontend(r.frame(), std::string_view(bytes).substr(pos), ctx, to_link, local);
      pos += res.rest_consumed;
      if (!res.forwarded) ++answered_locally;
    }
  }
  std::string Receive(const std::string& backend) {
    std::string out;
    size_t pos = 0;
    while (pos < backend.size()) {
      pr::FrameReader reader(pr::FrameReader::Mode::kTagged);
      pr::FrameReader::Result r = reader.Read(std::string_view(backend).substr(pos));
      REQUIRE(r.is_frame());
      ext.OnBackend(r.frame().tag, r.frame().raw, out);
      pos += r.frame().size();
    }
    return out;
  }
};

const std::string kSql = "SELECT v FROM t WHERE k = $1";

// Teaches `store` the statement as the origin described it.
void Learn(StatementMetadataStore& store, std::string_view sql = kSql, std::string row = RowDesc("v", 25)) {
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  d.Send(Parse("s1", sql) + DescribeS("s1") + Flush());
  REQUIRE(d.answered_locally == 0);
  std::string out = d.Receive(kParseComplete + ParamDesc({23}) + row);
  REQUIRE(out == kParseComplete + ParamDesc({23}) + row);
  REQUIRE(ext.idle());
  REQUIRE(ext.unsynced());  // the origin is inside the implicit transaction the Parse began
  d.Send(Sync());
  d.Receive(kReadyIdle);
  REQUIRE_FALSE(ext.unsynced());
}

TEST_CASE("a statement never seen goes to the origin, and its Describe answer is learnt") {
  StatementMetadataStore store;
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  const std::string flight = Parse("s1", kSql) + DescribeS("s1") + Flush();
  d.Send(flight);
  CHECK(d.to_link == flight);
  CHECK(d.local.empty());
  CHECK_FALSE(ext.idle());
  d.Receive(kParseComplete + ParamDesc({23}) + RowDesc("v", 25));
  CHECK(ext.idle());
  auto m = store.Get(StatementMetadataKey(kDb, kFp, {}, kSql));
  REQUIRE(m);
  CHECK(m->row_description == RowDesc("v", 25));
  CHECK(m->deferrable);
  CHECK(store.Stats().stores == 1);
}

TEST_CASE("Parse + Describe + Flush of a known statement is answered at once; the Parse goes with the Bind") {
  StatementMetadataStore store;
  Learn(store);
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  d.Send(Parse("s9", kSql) + DescribeS("s9") + Flush());
  CHECK(d.answered_locally == 1);
  CHECK(d.to_link.empty());
  CHECK(d.local == kParseComplete + ParamDesc({23}) + RowDesc("v", 25));
  CHECK(store.Stats().local_answers == 1);

  d.local.clear();
  d.Send(Bind("s9", {"1"}) + Execute() + Sync());
  // The deferred Parse declares the types the driver was told, then the
  // Bind, then a Describe(portal) that checks the promised shape.
  CHECK(d.to_link == Parse("s9", kSql, {23}) + Bind("s9", {"1"}) + DescribeP() + Execute() + Sync());
  std::string out = d.Receive(kParseComplete + kBindComplete + RowDesc("v", 25, 1) + DataRow() + Complete("SELECT 1") +
                              kReadyIdle);
  CHECK(out == kBindComplete + DataRow() + Complete("SELECT 1") + kReadyIdle);
  CHECK(ext.idle());

  // Once checked, later Binds go unchanged.
  d.to_link.clear();
  d.Send(Bind("s9", {"2"}) + Execute() + Sync());
  CHECK(d.to_link == Bind("s9", {"2"}) + Execute() + Sync());
}

TEST_CASE("after a forwarded Parse + Describe + Flush nothing is answered locally until a Sync") {
  // asyncpg's prepare() sends Parse + Describe + Flush: the Parse began an
  // implicit transaction at the origin (holding its locks) that only the
  // driver's next Sync ends, so its Bind + Execute + Sync must reach the
  // origin: neither the Client tier nor a local answer may take it.
  StatementMetadataStore store;
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  d.Send(Parse("s1", kSql) + DescribeS("s1") + Flush());
  d.Receive(kParseComplete + ParamDesc({23}) + RowDesc("v", 25));
  CHECK(ext.unsynced());
  // A known statement's Parse + Describe is not answered locally meanwhile.
  d.Send(Parse("s2", kSql) + DescribeS("s2") + Flush());
  CHECK(d.answered_locally == 0);
  d.Receive(kParseComplete + ParamDesc({23}) + RowDesc("v", 25));
  d.Send(Bind("s1", {"1"}) + Execute());
  CHECK(ext.unsynced());
  d.Send(Sync());
  CHECK_FALSE(ext.unsynced());
  d.Receive(kBindComplete + DataRow() + Complete("SELECT 1") + kReadyIdle);
  CHECK(ext.idle());
  // A Parse answered locally begins nothing at the origin.
  ExtendedSession other(&store, kDb, kFp);
  Driver o{other};
  o.Send(Parse("s3", kSql) + DescribeS("s3") + Flush());
  CHECK(o.answered_locally == 1);
  CHECK_FALSE(other.unsynced());
}

TEST_CASE("Parse + Describe + Sync (asyncpg's prepare) is answered with ReadyForQuery too") {
  StatementMetadataStore store;
  Learn(store);
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  d.Send(Parse("__asyncpg_1__", kSql) + DescribeS("__asyncpg_1__") + Sync());
  CHECK(d.to_link.empty());
  CHECK(d.local == kParseComplete + ParamDesc({23}) + RowDesc("v", 25) + kReadyIdle);
}

TEST_CASE("no local answers inside a transaction, for an unkeyable session or with answers outstanding") {
  StatementMetadataStore store;
  Learn(store);
  const std::string flight = Parse("s1", kSql) + DescribeS("s1") + Flush();
  {
    ExtendedSession ext(&store, kDb, kFp);
    Driver d{ext};
    d.ctx.txn_status = 'T';
    d.Send(flight);
    CHECK(d.to_link == flight);
  }
  {
    ExtendedSession ext(&store, kDb, kFp);
    Driver d{ext};
    d.ctx.keyable = false;
    d.Send(flight);
    CHECK(d.to_link == flight);
  }
  {
    ExtendedSession ext(&store, kDb, kFp);
    Driver d{ext};
    d.Send(QueryBytes("SELECT 1"));
    d.to_link.clear();
    d.ctx.nothing_sent = true;
    d.Send(flight);  // the Query's answers have not come yet
    CHECK(d.to_link == flight);
  }
  {
    // Another database or startup fingerprint: another key.
    ExtendedSession ext(&store, "other", kFp);
    Driver d{ext};
    d.Send(flight);
    CHECK(d.to_link == flight);
  }
  {
    // Declared parameter types are part of the key.
    ExtendedSession ext(&store, kDb, kFp);
    Driver d{ext};
    const std::string typed = Parse("s1", kSql, {20}) + DescribeS("s1") + Flush();
    d.Send(typed);
    CHECK(d.to_link == typed);
  }
}

TEST_CASE("a changed result type at the Bind gives 0A000, skips to ReadyForQuery and drops the metadata") {
  StatementMetadataStore store;
  Learn(store);
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  d.Send(Parse("s1", kSql) + DescribeS("s1") + Flush());
  d.Send(Bind("s1", {"1"}) + Execute() + Sync());
  // DDL elsewhere: the column is now an int.
  std::string out = d.Receive(kParseComplete + kBindComplete + RowDesc("v", 23) + DataRow() + Complete("SELECT 1") +
                              kReadyIdle);
  std::string want;
  AppendCachedPlanChanged(want);
  CHECK(out == want + kReadyIdle);
  auto e = pr::DecodeErrorResponse(std::string_view(want).substr(5));
  REQUIRE(e.ok());
  CHECK(e->sqlstate() == "0A000");
  CHECK(e->Get(pr::FieldCode::kRoutine) == "RevalidateCachedQuery");
  CHECK(store.Get(StatementMetadataKey(kDb, kFp, {}, kSql)) == nullptr);
  CHECK(store.Stats().mismatches == 1);
  CHECK(ext.idle());
  // The driver re-prepares: the origin is asked again.
  d.to_link.clear();
  d.Send(Parse("s2", kSql) + DescribeS("s2") + Flush());
  CHECK(d.to_link == Parse("s2", kSql) + DescribeS("s2") + Flush());
}

TEST_CASE("a cache candidate without a Describe(portal) travels with a swallowed one") {
  StatementMetadataStore store;
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  d.ctx.describe_portal = true;
  d.Send(Parse("S_1", kSql) + Bind("S_1", {"1"}) + Execute() + Sync());
  CHECK(d.to_link == Parse("S_1", kSql) + Bind("S_1", {"1"}) + DescribeP() + Execute() + Sync());
  std::string out =
      d.Receive(kParseComplete + kBindComplete + RowDesc("v", 25) + DataRow() + Complete("SELECT 1") + kReadyIdle);
  CHECK(out == kParseComplete + kBindComplete + DataRow() + Complete("SELECT 1") + kReadyIdle);
  // The driver's own Describe is not doubled.
  d.to_link.clear();
  d.Send(Bind("S_1", {"2"}) + DescribeP() + Execute() + Sync());
  CHECK(d.to_link == Bind("S_1", {"2"}) + DescribeP() + Execute() + Sync());
}

TEST_CASE("each statement knows the result type its driver was shown (the Client tier's key part)") {
  const uint64_t v_text = ResultTypeOfFrame(RowDesc("v", 25));
  const uint64_t v_int = ResultTypeOfFrame(RowDesc("v", 23));
  REQUIRE(v_text != 0);
  REQUIRE(v_text != v_int);
  CHECK(ResultTypeOfFrame(RowDesc("v", 25, 1)) == v_text);  // format codes are the Bind's, not the type's
  CHECK(ResultTypeOfFrame(Frame('n')) != 0);
  CHECK(ResultTypeOfFrame(kParseComplete) == 0);
  StatementMetadataStore store;
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  // Parsed at the origin: unknown until described.
  d.Send(Parse("s1", kSql) + Flush());
  REQUIRE(ext.Find("s1") != nullptr);
  CHECK(ext.Find("s1")->result_type == 0);
  d.Receive(kParseComplete);
  // Its Describe(statement) answer is what the driver holds.
  d.Send(DescribeS("s1") + Sync());
  d.Receive(ParamDesc({23}) + RowDesc("v", 25) + kReadyIdle);
  CHECK(ext.Find("s1")->result_type == v_text);
  // Parsed again under the same name after a Close: a new statement, whose
  // first Describe(portal) answer (here a swallowed one) tells its type.
  d.Send(testing::CloseS("s1") + Parse("s1", kSql) + Sync());
  d.Receive(Frame('3') + kParseComplete + kReadyIdle);
  CHECK(ext.Find("s1")->result_type == 0);
  d.ctx.describe_portal = true;
  d.Send(Bind("s1", {"1"}) + Execute() + Sync());
  d.Receive(kBindComplete + RowDesc("v", 23) + DataRow() + Complete("SELECT 1") + kReadyIdle);
  CHECK(ext.Find("s1")->result_type == v_int);
  // The driver's own Describe(portal) teaches it too, and a later one
  // does not overwrite what the driver already holds.
  d.ctx.describe_portal = false;
  d.Send(Parse("s2", kSql) + Sync());
  d.Receive(kParseComplete + kReadyIdle);
  d.Send(Bind("s2", {"1"}) + DescribeP() + Execute() + Sync());
  d.Receive(kBindComplete + RowDesc("v", 25) + DataRow() + Complete("SELECT 1") + kReadyIdle);
  CHECK(ext.Find("s2")->result_type == v_text);
  // An answer to a Describe sent before the name was parsed again is not
  // about the new statement.
  d.Send(DescribeS("s2") + testing::CloseS("s2") + Parse("s2", kSql) +
         Sync());
  d.Receive(ParamDesc({23}) + RowDesc("v", 23) + Frame('3') + kParseComplete + kReadyIdle);
  CHECK(ext.Find("s2")->result_type == 0);
  // Answered locally from the store (which learnt the Describe answers
  // above): what it promised.
  ExtendedSession ext2(&store, kDb, kFp);
  Driver d2{ext2};
  d2.Send(Parse("a1", kSql) + DescribeS("a1") + Sync());
  REQUIRE(d2.answered_locally == 1);
  auto promised = store.Get(StatementMetadataKey(kDb, kFp, {}, kSql));
  REQUIRE(promised);
  CHECK(ext2.Find("a1")->result_type == ResultTypeOfFrame(promised->row_description));
}

TEST_CASE("the driver's own Describe(portal) is the check, and is forwarded") {
  StatementMetadataStore store;
  Learn(store);
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  d.Send(Parse("", kSql) + DescribeS("") + Flush());
  REQUIRE(d.answered_locally == 1);
  d.Send(Bind("", {"1"}) + DescribeP() + Execute() + Sync());
  CHECK(d.to_link == Parse("", kSql, {23}) + Bind("", {"1"}) + DescribeP() + Execute() + Sync());
  std::string out = d.Receive(kParseComplete + kBindComplete + RowDesc("v", 25) + Complete("SELECT 0") + kReadyIdle);
  CHECK(out == kBindComplete + RowDesc("v", 25) + Complete("SELECT 0") + kReadyIdle);
}

TEST_CASE("a deferred Parse that fails reports at the Bind and drops the metadata") {
  StatementMetadataStore store;
  Learn(store);
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  d.Send(Parse("s1", kSql) + DescribeS("s1") + Flush());
  d.Send(Bind("s1", {"1"}) + Execute() + Sync());
  std::string err;
  pr::EncodeErrorResponse(err, "ERROR", "42P01", "relation \"t\" does not exist");
  std::string out = d.Receive(err + kReadyIdle);
  CHECK(out == err + kReadyIdle);
  CHECK(ext.idle());
  CHECK(store.Get(StatementMetadataKey(kDb, kFp, {}, kSql)) == nullptr);
  CHECK(store.Stats().deferred_failures == 1);
}

TEST_CASE("the origin's own 0A000 drops every shape the Client knows: the driver's re-prepare reaches the origin") {
  StatementMetadataStore store;
  Learn(store);
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  d.Send(Bind("known", {"1"}) + Execute() + Sync());
  std::string err;
  AppendCachedPlanChanged(err);
  CHECK(d.Receive(err + kReadyIdle) == err + kReadyIdle);
  CHECK(store.Get(StatementMetadataKey(kDb, kFp, {}, kSql)) == nullptr);
  d.to_link.clear();
  d.Send(Parse("s2", kSql) + DescribeS("s2") + Flush());
  CHECK(d.to_link == Parse("s2", kSql) + DescribeS("s2") + Flush());
}

TEST_CASE("one error for a pipeline the Endpoint could not start, then a ReadyForQuery per Sync") {
  StatementMetadataStore store;
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  d.Send(Parse("", "SELECT 1") + Bind("") + Execute() + Sync() + Parse("", "SELECT 2") + Bind("") + Execute() +
         Sync() + QueryBytes("SELECT 3"));
  std::string err;
  pr::EncodeErrorResponse(err, "ERROR", "53300", "Failed to acquire a connection from the pool");
  CHECK(d.Receive(err + kReadyIdle + kReadyIdle + kReadyIdle) == err + kReadyIdle + kReadyIdle + kReadyIdle);
  CHECK(ext.idle());
  CHECK_FALSE(ext.lost());
}

TEST_CASE("a deferred Parse is not sent while the origin skips to Sync; it goes with the next Bind") {
  StatementMetadataStore store;
  Learn(store);
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  d.Send(Parse("s1", kSql) + DescribeS("s1") + Flush());
  REQUIRE(d.answered_locally == 1);
  d.Send(Bind("missing") + Execute() + Bind("s1", {"1"}) + Execute() + Sync());
  std::string err;
  pr::EncodeErrorResponse(err, "ERROR", "26000", "prepared statement \"missing\" does not exist");
  // The origin skipped the deferred Parse with the rest of the unit.
  CHECK(d.Receive(err + kReadyIdle) == err + kReadyIdle);
  CHECK(ext.idle());
  d.to_link.clear();
  d.Send(Bind("s1", {"1"}) + Execute() + Sync());
  // ... and checked, since its check was skipped too.
  CHECK(d.to_link == Parse("s1", kSql, {23}) + Bind("s1", {"1"}) + DescribeP() + Execute() + Sync());
  // While the origin skips (an error, no Sync yet), it is not sent at all.
  CHECK(d.Receive(kParseComplete + kBindComplete + RowDesc("v", 25) + Complete("SELECT 0") + kReadyIdle) ==
        kBindComplete + Complete("SELECT 0") + kReadyIdle);
  d.to_link.clear();
  d.Send(Parse("s3", kSql) + DescribeS("s3") + Flush());
  REQUIRE(d.answered_locally == 2);
  d.Send(Bind("missing") + Flush());
  CHECK(d.Receive(err) == err);
  d.to_link.clear();
  d.Send(Bind("s3", {"1"}) + Execute() + Sync());
  CHECK(d.to_link == Bind("s3", {"1"}) + Execute() + Sync());
  CHECK(d.Receive(kReadyIdle) == kReadyIdle);
  d.to_link.clear();
  d.Send(Bind("s3", {"1"}) + Execute() + Sync());
  CHECK(d.to_link.rfind(Parse("s3", kSql, {23}), 0) == 0);
}

TEST_CASE("after an error the origin skips to Sync: messages sent meanwhile expect nothing") {
  StatementMetadataStore store;
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  d.Send(Parse("s1", "SELEC 1") + DescribeS("s1") + Flush());
  std::string err;
  pr::EncodeErrorResponse(err, "ERROR", "42601", "syntax error");
  CHECK(d.Receive(err) == err);
  d.Send(Bind("s1") + Execute() + Sync());
  CHECK(d.Receive(kReadyIdle) == kReadyIdle);
  CHECK(ext.idle());
  CHECK_FALSE(ext.lost());
}

TEST_CASE("a Close or a re-Parse of a deferred statement, and a Query replacing the unnamed one") {
  StatementMetadataStore store;
  Learn(store);
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  d.Send(Parse("s1", kSql) + Flush());
  REQUIRE(d.answered_locally == 1);
  // Parse of the same name: the deferred one goes first, so the origin
  // reports 42P05 exactly as it would.
  d.Send(Parse("s1", kSql));
  CHECK(d.to_link == Parse("s1", kSql, {23}) + Parse("s1", kSql));
  d.to_link.clear();
  d.Send(testing::CloseS("s1") + Sync());
  CHECK(d.to_link == testing::CloseS("s1") + Sync());
  CHECK(ext.Find("s1") == nullptr);
  std::string err;
  pr::EncodeErrorResponse(err, "ERROR", "42P05", "prepared statement \"s1\" already exists");
  CHECK(d.Receive(kParseComplete + err + kReadyIdle) == err + kReadyIdle);
  CHECK(ext.idle());

  d.to_link.clear();
  d.Send(Parse("", kSql) + Sync());
  REQUIRE(d.to_link.empty());
  REQUIRE(ext.Find("") != nullptr);
  d.Send(QueryBytes("SELECT 1"));
  CHECK(ext.Find("") == nullptr);
}

TEST_CASE("writes with RETURNING are not deferred; plain writes (NoData) are") {
  StatementMetadataStore store;
  Learn(store, "UPDATE t SET v = $1 RETURNING v", RowDesc("v", 25));
  Learn(store, "UPDATE t SET v = $1", Frame('n'));
  CHECK_FALSE(store.Get(StatementMetadataKey(kDb, kFp, {}, "UPDATE t SET v = $1 RETURNING v"))->deferrable);
  CHECK(store.Get(StatementMetadataKey(kDb, kFp, {}, "UPDATE t SET v = $1"))->deferrable);
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  const std::string returning = Parse("a", "UPDATE t SET v = $1 RETURNING v") + DescribeS("a") + Flush();
  d.Send(returning);
  CHECK(d.to_link == returning);
}

TEST_CASE("unmatched answers make the session lost: everything is forwarded verbatim from then on") {
  StatementMetadataStore store;
  Learn(store);
  ExtendedSession ext(&store, kDb, kFp);
  Driver d{ext};
  CHECK(d.Receive(kBindComplete) == kBindComplete);
  CHECK(ext.lost());
  const std::string flight = Parse("s1", kSql) + DescribeS("s1") + Flush();
  d.Send(flight);
  CHECK(d.to_link == flight);
}

TEST_CASE("the metadata store refuses answers older than an invalidation and evicts beyond its bound") {
  StatementMetadataStore store(2);
  const uint64_t g = store.generation();
  store.InvalidateAll();
  store.Put("a", StatementMetadata{"t", "n", true}, g);
  CHECK(store.Get("a") == nullptr);
  const uint64_t now = store.generation();
  store.Put("a", StatementMetadata{"t", "n", true}, now);
  store.Put("b", StatementMetadata{"t", "n", true}, now);
  store.Put("c", StatementMetadata{"t", "n", true}, now);
  CHECK(store.Get("a") == nullptr);
  CHECK(store.Get("c") != nullptr);
  store.InvalidateAll();
  CHECK(store.Get("c") == nullptr);
  CHECK(store.Stats().entries == 0);
  CHECK(StatementMetadataKey("d", "f", {1}, "x") != StatementMetadataKey("d", "f", {}, "x"));
  CHECK(StatementMetadataKey("d", "f", {}, "x") != StatementMetadataKey("d", "", {}, "x"));
}

TEST_CASE("row shapes compare columns, not format codes") {
  CHECK(SameRowShape(RowDesc("v", 25, 0), RowDesc("v", 25, 1)));
  // A table dropped and re-created with the same columns: new table OID and
  // attribute numbers, the same result type.
  pr::RowDescription before;
  before.fields.push_back(pr::FieldDescription{.name = "v", .table_oid = 16384, .column_attr = 2, .type_oid = 25});
  pr::RowDescription after = before;
  after.fields[0].table_oid = 16390;
  after.fields[0].column_attr = 1;
  std::string b1, b2;
  pr::Encode(before, b1);
  pr::Encode(after, b2);
  CHECK(SameRowShape(b1, b2));
  after.fields[0].type_modifier = 14;
  b2.clear();
  pr::Encode(after, b2);
  CHECK_FALSE(SameRowShape(b1, b2));
  CHECK_FALSE(SameRowShape(RowDesc("v", 25), RowDesc("v", 23)));
  CHECK_FALSE(SameRowShape(RowDesc("v", 25), RowDesc("w", 25)));
  CHECK_FALSE(SameRowShape(RowDesc("v", 25), Frame('n')));
  CHECK(SameRowShape(Frame('n'), Frame('n')));
  CHECK_FALSE(SameRowShape("garbage", Frame('n')));
}

}  // namespace
}  // namespace hyperpool::client

namespace hyperpool::client {
namespace {

TEST_CASE("a session's key: its lasting plain SETs join the fingerprint; other state changes end keys") {
  SessionKey a;
  a.Start({{"TimeZone", "UTC"}});
  const std::string base = a.fingerprint();
  CHECK(a.keyable());
  const std::string set_tz = "SET TimeZone = 'Asia/Tokyo'";
  CHECK(a.Note(set_tz, cache::ClassifyStatements(set_tz, nullptr), /*lasts=*/true));
  CHECK(a.keyable());
  CHECK(a.fingerprint() != base);
  SessionKey b;
  b.Start({{"TimeZone", "UTC"}});
  b.Note(set_tz, cache::ClassifyStatements(set_tz, nullptr), true);
  CHECK(b.fingerprint() == a.fingerprint());  // the same SETs: shared keys
  // application_name: no key depends on it.
  const std::string app = "SET application_name = 'x'";
  CHECK_FALSE(b.Note(app, cache::ClassifyStatements(app, nullptr), true));
  CHECK(b.fingerprint() == a.fingerprint());
  // A SET that may be rolled back, SET ROLE, DISCARD: no keys any more.
  SessionKey c;
  c.Start({});
  c.Note(set_tz, cache::ClassifyStatements(set_tz, nullptr), /*lasts=*/false);
  CHECK_FALSE(c.keyable());
  SessionKey d;
  d.Start({});
  d.Note("SET ROLE r", cache::ClassifyStatements("SET ROLE r", nullptr), true);
  CHECK_FALSE(d.keyable());
  SessionKey e;
  e.Start({{"search_path", "s"}});
  CHECK_FALSE(e.keyable());
}

TEST_CASE("a statement is its own unit: one statement, and a Parse's frames up to Sync are only B/D/E/H") {
  CHECK(OwnUnit('Q', "SET a = 1", ""));
  CHECK_FALSE(OwnUnit('Q', "SET a = 1; SELECT 1", ""));
  CHECK(OwnUnit('P', "SET a = 1", Bind("") + Execute() + Sync()));
  CHECK_FALSE(OwnUnit('P', "SET a = 1", Bind("") + Execute() + Parse("", "SELECT 1") + Sync()));
  CHECK_FALSE(OwnUnit('P', "SET a = 1", Bind("") + Execute()));  // no Sync yet
}

}  // namespace
}  // namespace hyperpool::client
