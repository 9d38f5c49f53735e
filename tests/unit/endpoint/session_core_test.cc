// SessionCore (src/endpoint/session_core.h) without sockets: the test is the
// driver. It feeds client bytes (OnClientBytes), answers the core's commands
// by hand (kAcquire -> OnAcquired / OnAcquireFailed, kCapture -> OnCaptured,
// kCancelOrigin -> OnCancelDelivered, ...), feeds origin frames the way the
// driver's origin reader does (the connection's own bookkeeping first, as
// ReadFrame does, then OnOriginFrame) and asserts on state(), the outbox
// bytes (decoded with protocol::FrameReader) and the commands.
//
// The lent connections are stream-less OriginConnection objects; what
// ReadFrame would record about a frame (transaction status, backend key,
// ParameterStatus) is recorded with OriginConnection::ObserveFrameForTesting.
// The Endpoint tier's query cache is disabled (CacheOptions::enabled=false);
// its invalidation control frames (link::kControlTag), which it emits even
// then, are left out of the decoded client output.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <asio/io_context.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "endpoint/endpoint_cache.h"
#include "endpoint/endpoint_impl.h"
#include "endpoint/origin_connection.h"
#include "endpoint/origin_stream.h"  // OriginConnection::Stream complete: a null one is destroyed here
#include "endpoint/session_core.h"
#include "endpoint/settings_replay.h"
#include "protocol/codec.h"
#include "protocol/frame_reader.h"
#include "protocol/link_protocol.h"
#include "protocol/sqlstate.h"
#include "unit/endpoint/frontend_builders.h"

namespace Catch {
template <>
struct StringMaker<hyperpool::endpoint::SessionCore::State> {
  static std::string convert(hyperpool::endpoint::SessionCore::State s) {
    return std::string(hyperpool::endpoint::SessionCore::StateName(s));
  }
};
template <>
struct StringMaker<hyperpool::ReleaseDecision> {
  static std::string convert(hyperpool::ReleaseDecision d) { return std::string(hyperpool::ReleaseDecisionName(d)); }
};
}  // namespace Catch

namespace hyperpool::endpoint {
namespace {

using testing::Bind;
using testing::Encoded;
using testing::Execute;
using testing::Parse;
using testing::QueryBytes;
using testing::Sync;
using Kind = SessionCommand::Kind;
using State = SessionCore::State;

constexpr std::int32_t kBackendPid = 4242;
constexpr std::string_view kBackendSecret = "abcd";

// ----- Protocol helpers ------------------------------------------------------

struct Msg {
  char tag = 0;
  std::string payload;
};

// Every frame of `bytes` (which must be whole frames), control frames of
// the query cache left out.
std::vector<Msg> Decode(std::string_view bytes) {
  std::vector<Msg> out;
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  while (!bytes.empty()) {
    auto r = reader.Read(bytes);
    REQUIRE(r.is_frame());
    if (r.frame().tag != link::kControlTag) out.push_back(Msg{r.frame().tag, std::string(r.frame().payload)});
    bytes.remove_prefix(r.frame().size());
  }
  return out;
}

// The tags of `bytes`' frames, in order ("TDCZ").
std::string Tags(std::string_view bytes) {
  std::string tags;
  for (const Msg& m : Decode(bytes)) tags.push_back(m.tag);
  return tags;
}

// The statuses of `bytes`' ReadyForQuery frames, in order ("IIT").
std::string ReadyStatuses(std::string_view bytes) {
  std::string statuses;
  for (const Msg& m : Decode(bytes)) {
    if (m.tag == 'Z') statuses.push_back(m.payload.empty() ? '?' : m.payload[0]);
  }
  return statuses;
}

// The SQL texts of `bytes`' simple Query frames, in order.
std::vector<std::string> QueriesIn(std::string_view bytes) {
  std::vector<std::string> out;
  for (const Msg& m : Decode(bytes)) {
    if (m.tag != 'Q') continue;
    auto q = protocol::DecodeQuery(m.payload);
    REQUIRE(q.ok());
    out.emplace_back(q->query);
  }
  return out;
}

struct Error {
  std::string severity;
  std::string sqlstate;
  std::string message;
};

std::vector<Error> ErrorsIn(std::string_view bytes) {
  std::vector<Error> out;
  for (const Msg& m : Decode(bytes)) {
    if (m.tag != 'E') continue;
    auto e = protocol::DecodeErrorResponse(m.payload);
    REQUIRE(e.ok());
    out.push_back(Error{std::string(e->severity()), std::string(e->sqlstate()), std::string(e->message())});
  }
  return out;
}

std::string Terminate() { return Encoded(protocol::Terminate{}); }

// Backend messages.
std::string RowDesc() {
  protocol::RowDescription rd;
  protocol::FieldDescription f;
  f.name = "?column?";
  f.type_oid = 23;
  f.type_size = 4;
  rd.fields.push_back(f);
  return Encoded(rd);
}
std::string DataRow(std::string_view value) {
  std::vector<protocol::NullableValue> cols{protocol::NullableValue(value)};
  std::string out;
  protocol::EncodeDataRow(cols, out);
  return out;
}
std::string Complete(std::string_view tag) { return Encoded(protocol::CommandComplete{tag}); }
std::string Ready(char status) {
  return Encoded(protocol::ReadyForQuery{static_cast<protocol::TransactionStatus>(status)});
}
std::string ParseOk() { return Encoded(protocol::ParseComplete{}); }
std::string BindOk() { return Encoded(protocol::BindComplete{}); }
std::string CloseOk() { return Encoded(protocol::CloseComplete{}); }
std::string ParamDesc() { return Encoded(protocol::ParameterDescription{{23}}); }
std::string ErrorFrame(std::string_view severity, std::string_view sqlstate, std::string_view message) {
  std::string out;
  protocol::EncodeErrorResponse(out, severity, sqlstate, message);
  return out;
}
std::string ParamStatus(std::string_view name, std::string_view value) {
  return Encoded(protocol::ParameterStatus{name, value});
}
// A one-row SELECT's answer, up to its ReadyForQuery.
std::string SelectAnswer(char status = 'I') { return RowDesc() + DataRow("1") + Complete("SELECT 1") + Ready(status); }

// ----- Commands --------------------------------------------------------------

std::string_view KindName(Kind k) {
  switch (k) {
    case Kind::kAcquire: return "acquire";
    case Kind::kCancelAcquire: return "cancel-acquire";
    case Kind::kIntercept: return "intercept";
    case Kind::kPrepare: return "prepare";
    case Kind::kMoveOutOfCap: return "move-out-of-cap";
    case Kind::kCapture: return "capture";
    case Kind::kUnlisten: return "unlisten";
    case Kind::kRelease: return "release";
    case Kind::kCancelOrigin: return "cancel-origin";
    case Kind::kListenSet: return "listen-set";
    case Kind::kBarrier: return "barrier";
    case Kind::kWatchPinnedIdle: return "watch-pinned-idle";
    case Kind::kTimeoutsChanged: return "timeouts-changed";
    case Kind::kWaitPin: return "wait-pin";
    case Kind::kCancelPinWait: return "cancel-pin-wait";
    case Kind::kSignalSession: return "signal-session";
  }
  return "?";
}

// What one or more events produced (the outbox, taken).
struct Out {
  std::string to_client;
  std::string to_origin;
  std::vector<SessionCommand> commands;
  bool flush_client = false;

  // "acquire", "release(return)", "cancel-origin release(close)", ...
  std::string Commands() const {
    std::string s;
    for (const SessionCommand& c : commands) {
      if (!s.empty()) s += ' ';
      s += KindName(c.kind);
      if (c.kind == Kind::kRelease) s += "(" + std::string(ReleaseDecisionName(c.decision)) + ")";
    }
    return s;
  }
  const SessionCommand* Find(Kind kind) const {
    for (const SessionCommand& c : commands) {
      if (c.kind == kind) return &c;
    }
    return nullptr;
  }
  void Append(Out&& o) {
    to_client += o.to_client;
    to_origin += o.to_origin;
    for (SessionCommand& c : o.commands) commands.push_back(std::move(c));
    flush_client = flush_client || o.flush_client;
  }
};

// ----- The hand-made Endpoint and session ------------------------------------

class Harness {
 public:
  explicit Harness(PoolMode mode = PoolMode::kTransaction) {
    impl_ = std::make_shared<Endpoint::Impl>();
    impl_->executor = io_.get_executor();
    impl_->options.pool.mode = mode;
    CacheOptions cache_options;
    cache_options.enabled = false;
    // The core never asks the pool itself (kAcquire is ours to answer), nor
    // does a disabled cache: no Acquire callback.
    impl_->cache = std::make_shared<EndpointCache>(io_.get_executor(), cache_options, "testdb", "tester",
                                                   impl_->options.pool.max_size, EndpointCache::Acquire{});
    session_cache_ = std::make_unique<SessionCache>(impl_->cache,
                                                    [this](std::string bytes) { delivered_ += bytes; });
    SessionCore::Identity id;
    id.session_id = "0123456789abcdef";
    id.app_pid = 777;
    id.hello = {{"application_name", "session_core_test"}};
    core_ = std::make_unique<SessionCore>(*impl_, *session_cache_, std::move(id));
  }
  ~Harness() {
    core_.reset();  // before the SessionCache it tracks
    session_cache_.reset();
  }

  SessionCore& core() { return *core_; }
  Endpoint::Impl& impl() { return *impl_; }
  SessionCache& cache() { return *session_cache_; }

  // A logged-in origin connection (stream-less): its BackendKeyData and
  // ReadyForQuery 'I' recorded as a login would; by default it already
  // carries the session's settings (no replay needed).
  OriginConnection* NewConnection(bool carries_session_settings = true, std::int32_t pid = kBackendPid) {
    // No stream: nothing here reads or writes the connection (its destructor
    // and the bookkeeping accept a null one).
    auto c = std::make_unique<OriginConnection>(std::unique_ptr<OriginConnection::Stream>(),
                                                protocol::kDefaultMaxMessageLength);
    std::string login;
    protocol::Encode(protocol::BackendKeyData{pid, kBackendSecret}, login);
    login += Ready('I');
    Observe(*c, login);
    if (carries_session_settings) c->carried_settings() = core_->settings().desired();
    conns_.push_back(std::move(c));
    return conns_.back().get();
  }

  // Records `bytes` (whole backend frames) in `conn`'s bookkeeping only.
  static void Observe(OriginConnection& conn, std::string_view bytes) {
    protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
    while (!bytes.empty()) {
      auto r = reader.Read(bytes);
      REQUIRE(r.is_frame());
      conn.ObserveFrameForTesting(r.frame());
      bytes.remove_prefix(r.frame().size());
    }
  }

  // Feeds `bytes` (whole backend frames) from the lent connection, one frame
  // at a time, as the driver's origin reader does: only while the core wants
  // origin frames; ReadFrame's bookkeeping first, then OnOriginFrame.
  void Origin(std::string_view bytes) {
    OriginConnection* conn = core_->connection();
    REQUIRE(conn != nullptr);
    protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
    while (!bytes.empty()) {
      auto r = reader.Read(bytes);
      REQUIRE(r.is_frame());
      REQUIRE(core_->wants_origin());
      conn->ObserveFrameForTesting(r.frame());
      REQUIRE(core_->OnOriginFrame(r.frame()));
      bytes.remove_prefix(r.frame().size());
    }
  }

  void Client(std::string_view bytes) { core_->OnClientBytes(bytes); }

  // The idle sweep's MaybeSleep and the next event's wake (Session::Core):
  // the core is destroyed and made again from what it kept.
  void SleepAndWake() {
    REQUIRE(core_->CanSleep());
    SessionCore::Dormant dormant = core_->Sleep();
    core_.reset();
    core_ = std::make_unique<SessionCore>(*impl_, *session_cache_, std::move(dormant));
  }

  // The outbox, taken (emptied).
  Out Take() {
    SessionCore::Outbox& o = core_->outbox();
    Out out;
    out.to_client.swap(o.to_client);
    out.to_origin.swap(o.to_origin);
    while (!o.commands.empty()) {
      out.commands.push_back(std::move(o.commands.front()));
      o.commands.pop_front();
    }
    out.flush_client = o.flush_client;
    o.flush_client = false;
    return out;
  }

  // `sql` parsed and described on the origin, as a first PQprepare of it
  // is: a later parse-only unit of it is answered here
  // (StatementSession::IsParseOnlyUnit).
  void ParsedOnOrigin(std::string_view sql) {
    StartUnit(testing::Parse("origin_parsed" + std::to_string(++parsed_on_origin_), sql) + testing::Sync());
    Origin(ParseOk() + ParamDesc() + RowDesc() + Ready('I'));
    (void)Take();
  }

  // Sends `bytes`, expects kAcquire, lends a fresh connection: the outbox
  // of both events.
  Out StartUnit(std::string_view bytes, OriginConnection** lent = nullptr) {
    Client(bytes);
    Out out = Take();
    REQUIRE(out.Commands() == "acquire");
    REQUIRE(core_->state() == State::kAcquiring);
    OriginConnection* conn = NewConnection();
    core_->OnAcquired(conn);
    out.Append(Take());
    if (lent != nullptr) *lent = conn;
    return out;
  }

 private:
  asio::io_context io_;  // an executor for the cache's timers; never run
  std::shared_ptr<Endpoint::Impl> impl_;
  std::unique_ptr<SessionCache> session_cache_;
  std::vector<std::unique_ptr<OriginConnection>> conns_;
  std::unique_ptr<SessionCore> core_;
  std::string delivered_;
  int parsed_on_origin_ = 0;  // ParsedOnOrigin's names
};

// ===== 1. A simple Query ======================================================

TEST_CASE("SessionCore: a simple Query borrows a connection for its unit and returns it at 'I'",
          "[endpoint][session_core]") {
  // Whether the lent connection needs the settings replay first.
  const bool needs_replay = GENERATE(false, true);
  CAPTURE(needs_replay);
  Harness h;
  SessionCore& core = h.core();
  REQUIRE(core.state() == State::kIdle);
  REQUIRE(core.wants_client());

  h.Client(QueryBytes("SELECT 1"));
  Out out = h.Take();
  CHECK(out.Commands() == "acquire");
  CHECK(out.to_origin.empty());
  CHECK(out.to_client.empty());
  CHECK(core.state() == State::kAcquiring);
  CHECK_FALSE(core.wants_client());
  CHECK(core.connection() == nullptr);

  OriginConnection* conn = h.NewConnection(/*carries_session_settings=*/!needs_replay);
  core.OnAcquired(conn);
  out = h.Take();
  if (needs_replay) {
    // The replay runs on the connection before the unit: nothing of it yet.
    CHECK(out.Commands() == "prepare");
    CHECK(core.state() == State::kPreparing);
    CHECK(out.to_origin.empty());
    CHECK_FALSE(core.wants_origin());
    conn->carried_settings() = core.settings().desired();  // what ApplySettings does
    core.OnPrepared(absl::OkStatus());
    out = h.Take();
  }
  CHECK(out.Commands().empty());
  CHECK(core.state() == State::kActive);
  CHECK(core.connection() == conn);
  CHECK(Tags(out.to_origin) == "Q");
  CHECK(QueriesIn(out.to_origin) == std::vector<std::string>{"SELECT 1"});
  CHECK(core.busy());
  CHECK(core.wants_origin());

  // The answers go to the client frame by frame; the connection is kept
  // until the ReadyForQuery.
  h.Origin(RowDesc() + DataRow("1") + Complete("SELECT 1"));
  out = h.Take();
  CHECK(Tags(out.to_client) == "TDC");
  CHECK(out.Commands().empty());
  CHECK_FALSE(out.flush_client);
  CHECK(core.connection() == conn);

  h.Origin(Ready('I'));
  out = h.Take();
  CHECK(Tags(out.to_client) == "Z");
  CHECK(ReadyStatuses(out.to_client) == "I");
  CHECK(out.flush_client);
  REQUIRE(out.Commands() == "release(return)");
  CHECK(core.state() == State::kIdle);
  CHECK(core.connection() == nullptr);
  CHECK_FALSE(conn->broken());
  CHECK(core.wants_client());
  CHECK_FALSE(core.wants_origin());
}

// ===== 2. Pipelined units =====================================================

TEST_CASE("SessionCore: Parse/Bind/Execute/Sync in one read run as one unit", "[endpoint][session_core]") {
  Harness h;
  SessionCore& core = h.core();
  OriginConnection* conn = nullptr;
  Out out = h.StartUnit(Parse("", "SELECT $1::int") + Bind("", {"7"}) + Execute() + Sync(), &conn);
  CHECK(Tags(out.to_origin) == "PBES");
  CHECK(core.state() == State::kActive);

  // Nothing is released before the Sync's ReadyForQuery.
  h.Origin(ParseOk() + BindOk() + DataRow("7") + Complete("SELECT 1"));
  out = h.Take();
  CHECK(Tags(out.to_client) == "12DC");
  CHECK(out.Commands().empty());
  CHECK(core.connection() == conn);

  h.Origin(Ready('I'));
  out = h.Take();
  CHECK(Tags(out.to_client) == "Z");
  CHECK(out.Commands() == "release(return)");
  CHECK(core.state() == State::kIdle);
}

TEST_CASE("SessionCore: pipelined requests keep the connection until the last ReadyForQuery",
          "[endpoint][session_core]") {
  struct Row {
    const char* name;
    std::string input;
    std::string origin_tags;  // what reaches the origin
    std::vector<std::string> answers;  // one per request, in order
  };
  const Row row = GENERATE(values<Row>({
      {"two Queries", QueryBytes("SELECT 1") + QueryBytes("SELECT 2"), "QQ", {SelectAnswer(), SelectAnswer()}},
      {"three Queries", QueryBytes("SELECT 1") + QueryBytes("SELECT 2") + QueryBytes("SELECT 3"), "QQQ",
       {SelectAnswer(), SelectAnswer(), SelectAnswer()}},
      {"a Query then an extended unit", QueryBytes("SELECT 1") + Parse("", "SELECT 2") + Bind("") + Execute() + Sync(),
       "QPBES", {SelectAnswer(), ParseOk() + BindOk() + DataRow("2") + Complete("SELECT 1") + Ready('I')}},
      {"two extended units", Parse("", "SELECT 1") + Bind("") + Execute() + Sync() + Bind("") + Execute() + Sync(),
       "PBESBES",
       {ParseOk() + BindOk() + DataRow("1") + Complete("SELECT 1") + Ready('I'),
        BindOk() + DataRow("1") + Complete("SELECT 1") + Ready('I')}},
  }));
  CAPTURE(row.name);
  Harness h;
  SessionCore& core = h.core();
  OriginConnection* conn = nullptr;
  Out out = h.StartUnit(row.input, &conn);
  CHECK(Tags(out.to_origin) == row.origin_tags);
  for (std::size_t i = 0; i < row.answers.size(); ++i) {
    CAPTURE(i);
    h.Origin(row.answers[i]);
    out = h.Take();
    CHECK(ReadyStatuses(out.to_client) == "I");
    if (i + 1 < row.answers.size()) {
      CHECK(out.Commands().empty());
      CHECK(core.connection() == conn);
      CHECK(core.state() == State::kActive);
      CHECK_FALSE(out.flush_client);  // more answers are due
    } else {
      CHECK(out.Commands() == "release(return)");
      CHECK(core.connection() == nullptr);
      CHECK(core.state() == State::kIdle);
      CHECK(out.flush_client);
    }
  }
}

// ===== 3. A transaction block ================================================

TEST_CASE("SessionCore: a transaction block keeps its connection until it ends at 'I'", "[endpoint][session_core]") {
  struct Step {
    std::string sql;
    std::string answer;  // the origin's, up to its ReadyForQuery
    char status;
  };
  struct Row {
    const char* name;
    std::vector<Step> steps;
  };
  const Row row = GENERATE(values<Row>({
      {"BEGIN; SELECT; COMMIT",
       {{"BEGIN", Complete("BEGIN") + Ready('T'), 'T'},
        {"SELECT 1", SelectAnswer('T'), 'T'},
        {"COMMIT", Complete("COMMIT") + Ready('I'), 'I'}}},
      {"a failed block ended by ROLLBACK",
       {{"BEGIN", Complete("BEGIN") + Ready('T'), 'T'},
        {"SELECT 1/0", ErrorFrame("ERROR", "22012", "division by zero") + Ready('E'), 'E'},
        {"SELECT 1", ErrorFrame("ERROR", "25P02", "current transaction is aborted") + Ready('E'), 'E'},
        {"ROLLBACK", Complete("ROLLBACK") + Ready('I'), 'I'}}},
      {"START TRANSACTION; two statements; END",
       {{"START TRANSACTION", Complete("START TRANSACTION") + Ready('T'), 'T'},
        {"SELECT 1", SelectAnswer('T'), 'T'},
        {"SELECT 2", SelectAnswer('T'), 'T'},
        {"END", Complete("COMMIT") + Ready('I'), 'I'}}},
  }));
  CAPTURE(row.name);
  Harness h;
  SessionCore& core = h.core();
  OriginConnection* conn = nullptr;
  for (std::size_t i = 0; i < row.steps.size(); ++i) {
    const Step& step = row.steps[i];
    CAPTURE(i, step.sql);
    Out out;
    if (i == 0) {
      out = h.StartUnit(QueryBytes(step.sql), &conn);
    } else {
      // Inside the block: straight to the same connection, no acquire.
      h.Client(QueryBytes(step.sql));
      out = h.Take();
      CHECK(out.Commands().empty());
    }
    CHECK(QueriesIn(out.to_origin) == std::vector<std::string>{step.sql});
    CHECK(core.connection() == conn);
    h.Origin(step.answer);
    out = h.Take();
    CHECK(ReadyStatuses(out.to_client) == std::string(1, step.status));
    CHECK(conn->transaction_status() == step.status);
    if (step.status != 'I') {
      CHECK(out.Commands().empty());  // no release inside the block
      CHECK(core.state() == State::kActive);
      CHECK(core.connection() == conn);
      CHECK_FALSE(core.busy());
      CHECK(core.wants_client());
    } else {
      CHECK(i + 1 == row.steps.size());
      CHECK(out.Commands() == "release(return)");
      CHECK(core.state() == State::kIdle);
      CHECK(core.connection() == nullptr);
    }
  }
}

// ===== 4. Acquire failure =====================================================

TEST_CASE("SessionCore: a failed acquire answers every pending request and the session goes on",
          "[endpoint][session_core]") {
  struct Row {
    const char* name;
    std::string input;
    std::size_t readies;  // one per Query / Sync pending
  };
  const Row row = GENERATE(values<Row>({
      {"one Query", QueryBytes("SELECT 1"), 1},
      {"two Queries", QueryBytes("SELECT 1") + QueryBytes("SELECT 2"), 2},
      {"an extended unit", Parse("", "SELECT 1") + Bind("") + Execute() + Sync(), 1},
      {"Query, extended unit, Query",
       QueryBytes("SELECT 1") + Parse("", "SELECT 2") + Bind("") + Execute() + Sync() + QueryBytes("SELECT 3"), 3},
      {"two extended units", Parse("", "SELECT 1") + Bind("") + Execute() + Sync() + Bind("") + Execute() + Sync(), 2},
  }));
  CAPTURE(row.name);
  Harness h;
  SessionCore& core = h.core();
  h.Client(row.input);
  REQUIRE(h.Take().Commands() == "acquire");
  REQUIRE(core.state() == State::kAcquiring);

  core.OnAcquireFailed(absl::ResourceExhaustedError("pool timeout"));
  Out out = h.Take();
  CHECK(out.to_origin.empty());
  CHECK(out.Commands().empty());
  const std::vector<Error> errors = ErrorsIn(out.to_client);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].severity == "ERROR");
  CHECK(errors[0].sqlstate == kSqlStateTooManyConnections);
  CHECK(Tags(out.to_client) == "E" + std::string(row.readies, 'Z'));
  CHECK(ReadyStatuses(out.to_client) == std::string(row.readies, 'I'));
  CHECK(core.state() == State::kIdle);
  CHECK(core.connection() == nullptr);
  CHECK(core.wants_client());
  CHECK(h.impl().acquire_timeouts.load() == 1);

  // Still usable: the next Query borrows again and only it is sent.
  OriginConnection* conn = nullptr;
  out = h.StartUnit(QueryBytes("SELECT 42"), &conn);
  CHECK(QueriesIn(out.to_origin) == std::vector<std::string>{"SELECT 42"});
  CHECK(Tags(out.to_origin) == "Q");
  CHECK(out.to_client.empty());
  h.Origin(SelectAnswer());
  out = h.Take();
  CHECK(Tags(out.to_client) == "TDCZ");
  CHECK(out.Commands() == "release(return)");
  CHECK(core.state() == State::kIdle);
}

// A read boundary may cut a frame in two: the part that came with the
// failed unit is the start of the next request, not part of the failure.
// (FailHeadUnit once cleared all of its input, the partial frame included:
// its rest was then read as a frame of its own, a garbage header the
// session waited for forever, or FATAL 08P01. The same FailHeadUnit answers
// a failed settings replay and a cancelled acquire.)
TEST_CASE("SessionCore: a failed acquire keeps a request cut by the read boundary", "[endpoint][session_core]") {
  // Where the second Query is cut.
  const std::size_t cut = GENERATE(1, 3, 5, 9);
  CAPTURE(cut);
  Harness h;
  SessionCore& core = h.core();
  const std::string second = QueryBytes("SELECT 2");
  h.Client(QueryBytes("SELECT 1") + second.substr(0, cut));
  REQUIRE(h.Take().Commands() == "acquire");
  core.OnAcquireFailed(absl::ResourceExhaustedError("pool timeout"));
  Out out = h.Take();
  CHECK(Tags(out.to_client) == "EZ");  // the first Query only
  CHECK(core.state() == State::kIdle);

  h.Client(second.substr(cut));
  out = h.Take();
  // The second Query is whole again and starts a unit of its own.
  std::string errors;
  for (const Error& e : ErrorsIn(out.to_client)) errors += e.severity + " " + e.sqlstate + " " + e.message + "; ";
  CHECK(errors == "");
  CHECK(out.Commands() == "acquire");
  CHECK(core.state() == State::kAcquiring);
  if (core.state() == State::kAcquiring) {
    core.OnAcquired(h.NewConnection());
    out = h.Take();
    CHECK(QueriesIn(out.to_origin) == std::vector<std::string>{"SELECT 2"});
  }
}

TEST_CASE("SessionCore: a failed settings replay answers the unit with the origin's error",
          "[endpoint][session_core]") {
  Harness h;
  SessionCore& core = h.core();
  h.Client(QueryBytes("SELECT 1") + QueryBytes("SELECT 2"));
  REQUIRE(h.Take().Commands() == "acquire");
  OriginConnection* conn = h.NewConnection(/*carries_session_settings=*/false);
  core.OnAcquired(conn);
  REQUIRE(h.Take().Commands() == "prepare");
  REQUIRE(core.state() == State::kPreparing);
  // What ApplySettings reports for an ErrorResponse.
  absl::Status failed = absl::AbortedError("invalid value for parameter \"application_name\"");
  failed.SetPayload(protocol::kSqlStatePayload, absl::Cord("22023"));
  core.OnPrepared(failed);
  Out out = h.Take();
  CHECK(out.to_origin.empty());
  CHECK(out.Commands() == "release(close)");  // its state is unknown
  CHECK(conn->broken());
  const std::vector<Error> errors = ErrorsIn(out.to_client);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].sqlstate == "22023");
  CHECK(errors[0].message == "invalid value for parameter \"application_name\"");
  CHECK(ReadyStatuses(out.to_client) == "II");  // both pending Queries answered
  CHECK(core.state() == State::kIdle);
  CHECK(core.connection() == nullptr);
}

TEST_CASE("SessionCore: a cancel during the settings replay ends the unit with 57014 before any of it is sent",
          "[endpoint][session_core]") {
  Harness h;
  SessionCore& core = h.core();
  h.Client(QueryBytes("SELECT pg_sleep(10)"));
  REQUIRE(h.Take().Commands() == "acquire");
  OriginConnection* conn = h.NewConnection(/*carries_session_settings=*/false);
  core.OnAcquired(conn);
  REQUIRE(h.Take().Commands() == "prepare");
  REQUIRE(core.state() == State::kPreparing);

  // The replay owns the connection: nothing to cancel on the origin, the
  // unit just never starts.
  REQUIRE(core.OnCancelRequest());
  CHECK(h.Take().Commands().empty());
  core.OnPrepared(absl::OkStatus());
  Out out = h.Take();
  CHECK(out.to_origin.empty());
  const std::vector<Error> errors = ErrorsIn(out.to_client);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].sqlstate == kSqlStateQueryCanceled);
  CHECK(ReadyStatuses(out.to_client) == "I");
  CHECK(out.Commands() == "release(return)");  // replayed, idle, healthy
  CHECK_FALSE(conn->broken());
  CHECK(core.state() == State::kIdle);

  // The cancel belonged to that unit: the next one runs.
  h.Client(QueryBytes("SELECT 1"));
  REQUIRE(h.Take().Commands() == "acquire");
  core.OnAcquired(h.NewConnection());
  CHECK(QueriesIn(h.Take().to_origin) == std::vector<std::string>{"SELECT 1"});
}

// ===== 5. Terminate ===========================================================

TEST_CASE("SessionCore: Terminate while a unit is outstanding drains it, then ends", "[endpoint][session_core]") {
  // Terminate in the same read as the Query, or after the Query went out;
  // and whether the client then closes its end of the link.
  const bool pipelined = GENERATE(false, true);
  const bool link_closed = GENERATE(false, true);
  CAPTURE(pipelined, link_closed);
  Harness h;
  SessionCore& core = h.core();
  OriginConnection* conn = nullptr;
  Out out = h.StartUnit(pipelined ? QueryBytes("SELECT 1") + Terminate() : QueryBytes("SELECT 1"), &conn);
  if (!pipelined) {
    CHECK(core.state() == State::kActive);
    h.Client(Terminate());
    out.Append(h.Take());
  }
  CHECK(Tags(out.to_origin) == "Q");  // the Terminate is ours, never the origin's
  CHECK(out.Commands() == "acquire");  // no release while the unit runs
  CHECK(core.state() == State::kDraining);
  CHECK(core.terminated());
  CHECK(core.connection() == conn);
  CHECK(core.wants_origin());
  CHECK_FALSE(core.wants_client());
  if (link_closed) {
    core.OnClientGone();
    CHECK(core.state() == State::kDraining);  // its unit still finishes
    CHECK(core.discard_output());
    CHECK(h.Take().Commands().empty());
  }

  h.Origin(RowDesc() + DataRow("1") + Complete("SELECT 1"));
  out = h.Take();
  CHECK(Tags(out.to_client) == "TDC");
  CHECK(core.state() == State::kDraining);
  CHECK(out.Commands().empty());

  h.Origin(Ready('I'));
  out = h.Take();
  CHECK(Tags(out.to_client) == "Z");
  CHECK(out.Commands() == "release(return)");
  CHECK(core.state() == State::kEnding);
  CHECK(core.ending());
  CHECK(core.connection() == nullptr);
  CHECK_FALSE(conn->broken());
  core.OnFlushedForEnd();
  CHECK(core.state() == State::kClosed);
}

TEST_CASE("SessionCore: Terminate with nothing outstanding ends the session at once", "[endpoint][session_core]") {
  struct Row {
    const char* name;
    bool in_block;      // a transaction block is open (the connection is held)
    std::string release;  // the expected commands
  };
  const Row row = GENERATE(values<Row>({
      {"idle, no connection", false, ""},
      {"idle inside a transaction block", true, "release(rollback-then-return)"},
  }));
  CAPTURE(row.name);
  Harness h;
  SessionCore& core = h.core();
  if (row.in_block) {
    h.StartUnit(QueryBytes("BEGIN"));
    h.Origin(Complete("BEGIN") + Ready('T'));
    REQUIRE(h.Take().Commands().empty());
    REQUIRE(core.connection() != nullptr);
  }
  h.Client(Terminate());
  Out out = h.Take();
  CHECK(core.state() == State::kEnding);
  CHECK(core.terminated());
  CHECK(out.to_origin.empty());
  CHECK(out.to_client.empty());
  CHECK(out.Commands() == row.release);
  CHECK(core.connection() == nullptr);
  // Anything after the Terminate is ignored.
  h.Client(QueryBytes("SELECT 1"));
  out = h.Take();
  CHECK(out.Commands().empty());
  CHECK(out.to_client.empty());
}

// ===== 6. The client vanishes =================================================

TEST_CASE("SessionCore: a client gone mid-unit cancels the origin's work and closes the connection",
          "[endpoint][session_core]") {
  // How far the unit got.
  const int answered_frames = GENERATE(0, 2);
  CAPTURE(answered_frames);
  Harness h;
  SessionCore& core = h.core();
  OriginConnection* conn = nullptr;
  h.StartUnit(QueryBytes("SELECT pg_sleep(10)"), &conn);
  if (answered_frames > 0) {
    h.Origin(RowDesc() + DataRow("1"));
    (void)h.Take();
  }
  REQUIRE(core.busy());

  core.OnClientGone();
  Out out = h.Take();
  CHECK(core.state() == State::kEnding);
  CHECK(core.discard_output());
  CHECK(out.Commands() == "cancel-origin release(close)");
  const SessionCommand* cancel = out.Find(Kind::kCancelOrigin);
  REQUIRE(cancel != nullptr);
  CHECK(cancel->key.process_id == kBackendPid);
  CHECK(cancel->key.secret_key == kBackendSecret);
  CHECK_FALSE(cancel->notify);
  CHECK(core.connection() == nullptr);
  CHECK(conn->broken());  // closed, never handed to another client
  CHECK_FALSE(core.wants_origin());
}

// ===== 7. The origin is lost ==================================================

TEST_CASE("SessionCore: a lost origin connection ends the session with one FATAL", "[endpoint][session_core]") {
  // Whether the origin said why first (pg_terminate_backend: FATAL 57P01).
  const bool origin_fatal_first = GENERATE(false, true);
  CAPTURE(origin_fatal_first);
  Harness h;
  SessionCore& core = h.core();
  OriginConnection* conn = nullptr;
  h.StartUnit(QueryBytes("SELECT 1"), &conn);
  Out out;
  if (origin_fatal_first) {
    h.Origin(ErrorFrame("FATAL", kSqlStateAdminShutdown, "terminating connection due to administrator command"));
    out = h.Take();
    CHECK(Tags(out.to_client) == "E");
    CHECK(out.Commands().empty());
  }
  core.OnOriginLost(absl::UnavailableError("the origin closed the connection"));
  out.Append(h.Take());
  const std::vector<Error> errors = ErrorsIn(out.to_client);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].severity == "FATAL");
  CHECK(errors[0].sqlstate == (origin_fatal_first ? kSqlStateAdminShutdown : kSqlStateConnectionFailure));
  CHECK(ReadyStatuses(out.to_client).empty());  // the session ends: no ReadyForQuery
  CHECK(out.Commands() == "release(close)");
  CHECK(core.state() == State::kEnding);
  CHECK(core.connection() == nullptr);
  CHECK(conn->broken());
  // A late frame from the lost connection is ignored.
  const std::string late = Ready('I');
  auto r = protocol::FrameReader(protocol::FrameReader::Mode::kTagged).Read(late);
  REQUIRE(r.is_frame());
  CHECK(core.OnOriginFrame(r.frame()));
  CHECK(h.Take().to_client.empty());
}

// ===== 8. Cancel ==============================================================

TEST_CASE("SessionCore: a cancel while acquiring leaves the pool's queue with 57014", "[endpoint][session_core]") {
  // Whether the connection was lent anyway (the pool handed it over before
  // the cancel reached it).
  const bool lent_anyway = GENERATE(false, true);
  CAPTURE(lent_anyway);
  Harness h;
  SessionCore& core = h.core();
  h.Client(QueryBytes("SELECT pg_sleep(10)"));
  REQUIRE(h.Take().Commands() == "acquire");

  REQUIRE(core.OnCancelRequest());
  Out out = h.Take();
  REQUIRE(out.Commands() == "cancel-acquire");
  const absl::Status status = out.commands[0].status;
  CHECK(status.code() == absl::StatusCode::kAborted);
  CHECK(core.state() == State::kAcquiring);

  OriginConnection* conn = nullptr;
  if (lent_anyway) {
    conn = h.NewConnection();
    core.OnAcquired(conn);
  } else {
    core.OnAcquireFailed(status);  // what the pool reports for kCancelAcquire
  }
  out = h.Take();
  CHECK(out.to_origin.empty());  // nothing of the unit was sent
  const std::vector<Error> errors = ErrorsIn(out.to_client);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].sqlstate == kSqlStateQueryCanceled);
  CHECK(errors[0].severity == "ERROR");
  CHECK(ReadyStatuses(out.to_client) == "I");
  CHECK(out.Commands() == (lent_anyway ? "release(return)" : ""));
  CHECK(core.state() == State::kIdle);
  CHECK(core.connection() == nullptr);
  if (conn != nullptr) CHECK_FALSE(conn->broken());

  // The next unit is not affected by the old cancel.
  h.Client(QueryBytes("SELECT 1"));
  CHECK(h.Take().Commands() == "acquire");
}

TEST_CASE("SessionCore: a cancel of a running unit gates the input until it is delivered",
          "[endpoint][session_core]") {
  // Whether the origin answers the cancelled unit before the cancel's
  // delivery is reported, or after.
  const bool answered_first = GENERATE(true, false);
  CAPTURE(answered_first);
  Harness h;
  SessionCore& core = h.core();
  OriginConnection* conn = nullptr;
  h.StartUnit(QueryBytes("SELECT pg_sleep(10)"), &conn);
  REQUIRE(core.busy());

  REQUIRE(core.OnCancelRequest());
  Out out = h.Take();
  REQUIRE(out.Commands() == "cancel-origin");
  CHECK(out.commands[0].notify);
  CHECK(out.commands[0].key.process_id == kBackendPid);
  CHECK(out.commands[0].key.secret_key == kBackendSecret);
  CHECK(h.impl().pending_cancels.load() == 1);
  CHECK_FALSE(core.wants_client());  // gated

  // The client's next request waits (a driver may pipeline it).
  h.Client(QueryBytes("SELECT 2"));
  out = h.Take();
  CHECK(out.to_origin.empty());
  CHECK(out.Commands().empty());

  const std::string cancelled =
      ErrorFrame("ERROR", kSqlStateQueryCanceled, "canceling statement due to user request") + Ready('I');
  if (answered_first) {
    h.Origin(cancelled);
    out = h.Take();
    CHECK(Tags(out.to_client) == "EZ");
    // Still gated: the connection stays (kept) and nothing new goes out.
    CHECK(out.to_origin.empty());
    CHECK(out.Commands().empty());
    CHECK(core.connection() == conn);
    CHECK_FALSE(core.wants_client());

    core.OnCancelDelivered();
    out = h.Take();
    // Now it is released at 'I' and the waiting Query starts a unit of its own.
    CHECK(out.Commands() == "release(return) acquire");
    CHECK(out.to_origin.empty());
    CHECK(core.state() == State::kAcquiring);
    OriginConnection* next = h.NewConnection();
    core.OnAcquired(next);
    out = h.Take();
    CHECK(QueriesIn(out.to_origin) == std::vector<std::string>{"SELECT 2"});
  } else {
    core.OnCancelDelivered();
    out = h.Take();
    // The gate opens: the waiting Query follows on the same connection.
    CHECK(out.Commands().empty());
    CHECK(QueriesIn(out.to_origin) == std::vector<std::string>{"SELECT 2"});
    CHECK(core.connection() == conn);
    h.Origin(cancelled);
    out = h.Take();
    CHECK(Tags(out.to_client) == "EZ");
    CHECK(out.Commands().empty());  // SELECT 2 is outstanding
    h.Origin(SelectAnswer());
    out = h.Take();
    CHECK(Tags(out.to_client) == "TDCZ");
    CHECK(out.Commands() == "release(return)");
    CHECK(core.state() == State::kIdle);
  }
}

// ===== 9. The settings capture ================================================

TEST_CASE("SessionCore: a unit that may change settings is captured at 'I' before the release",
          "[endpoint][session_core]") {
  struct Cause {
    const char* name;
    std::string sql;
    std::string extra;  // what the origin adds to the answer
  };
  const Cause cause = GENERATE(values<Cause>({
      {"SET", "SET work_mem = '64MB'", ""},
      {"a ParameterStatus from the origin", "SELECT 1", ParamStatus("TimeZone", "UTC")},
  }));
  struct Outcome {
    const char* name;
    absl::StatusOr<CaptureOutcome> result;
    std::string commands;  // after OnCaptured
    State state;
  };
  const Outcome outcome = GENERATE(values<Outcome>({
      {"captured", CaptureOutcome{}, "release(return)", State::kIdle},
      {"capture failed", absl::UnavailableError("origin gone"), "release(close)", State::kIdle},
      // SET ROLE hidden from the analysis: the connection stays pinned.
      {"role changed", CaptureOutcome{.role_changed = true}, "", State::kActive},
  }));
  CAPTURE(cause.name, outcome.name);
  Harness h;
  SessionCore& core = h.core();
  OriginConnection* conn = nullptr;
  h.StartUnit(QueryBytes(cause.sql), &conn);
  h.Origin(cause.extra + Complete(cause.sql == "SELECT 1" ? "SELECT 1" : "SET") + Ready('I'));
  Out out = h.Take();
  CHECK(ReadyStatuses(out.to_client) == "I");
  REQUIRE(out.Commands() == "capture");
  CHECK(core.state() == State::kOwnQuery);
  CHECK(core.connection() == conn);
  CHECK_FALSE(core.wants_origin());  // the capture reads the connection itself
  CHECK_FALSE(core.wants_client());

  // A request that arrives meanwhile waits for the capture.
  h.Client(QueryBytes("SELECT 2"));
  out = h.Take();
  CHECK(out.to_origin.empty());
  CHECK(out.Commands().empty());

  if (outcome.result.ok()) {
    // What CaptureSettings stores before it reports.
    SettingMap captured;
    if (cause.sql != "SELECT 1") captured["work_mem"] = "64MB";
    conn->carried_settings() = captured;
    core.settings().OnCaptured(captured);
  }
  // A completion of another own query is not this one's: ignored.
  core.OnUnlistened(/*ok=*/true, {});
  CHECK(core.state() == State::kOwnQuery);
  CHECK(h.Take().Commands().empty());
  core.OnCaptured(outcome.result);
  out = h.Take();
  if (outcome.state == State::kIdle) {
    // Released, then the waiting Query borrows again.
    CHECK(out.Commands() == outcome.commands + " acquire");
    CHECK(core.state() == State::kAcquiring);
    CHECK(conn->broken() == (outcome.commands == "release(close)"));
    CHECK(out.to_origin.empty());
  } else {
    // Pinned: the waiting Query goes to the same connection.
    CHECK(out.Commands() == outcome.commands);
    CHECK(core.state() == outcome.state);
    CHECK(core.connection() == conn);
    CHECK(QueriesIn(out.to_origin) == std::vector<std::string>{"SELECT 2"});
    CHECK(h.impl().pinned_sessions.load() == 1);
  }
  if (cause.sql != "SELECT 1" && outcome.result.ok()) {
    CHECK(core.settings().desired().at("work_mem") == "64MB");
  }
}

TEST_CASE("SessionCore: a plain read owes no capture", "[endpoint][session_core]") {
  Harness h;
  SessionCore& core = h.core();
  h.StartUnit(QueryBytes("SELECT 1"));
  h.Origin(SelectAnswer());
  Out out = h.Take();
  CHECK(out.Find(Kind::kCapture) == nullptr);
  CHECK(out.Commands() == "release(return)");
  CHECK(core.state() == State::kIdle);
}

// ===== 10. Random sequences ===================================================

// SplitMix64: the same numbers on every platform and standard library.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // In [0, n).
  std::size_t Below(std::size_t n) { return static_cast<std::size_t>(Next() % n); }
  bool Chance(std::size_t percent) { return Below(100) < percent; }

 private:
  std::uint64_t state_;
};

// A PostgreSQL backend that answers each frontend message as PostgreSQL
// would (for the statements the random sessions use): transaction blocks
// ('I', 'T', 'E'), errors (a division by zero; 25P02 in a failed block;
// skipping to Sync after an error in extended-query mode), named and
// unnamed statements that exist or not (42P05, 26000).
struct ScriptedBackend {
  char status = 'I';
  bool skipping = false;      // an extended-query error: discard until Sync
  bool portal_fails = false;  // the unnamed portal's Execute divides by zero
  bool unnamed = false;       // the unnamed statement exists
  bool open_unit = false;     // extended-query messages received since the last Sync
  std::set<std::string> statements;
  std::size_t statement_describes = 0;  // Describe('S'): the session's own, for a replayed Parse
  std::size_t requests = 0;  // Query / Sync / FunctionCall received
  std::size_t readies_fed = 0;
  char last_ready_fed = 'I';
  std::deque<std::string> answers;  // frames not yet fed, in order

  void Fail(std::string_view sqlstate, bool extended) {
    answers.push_back(ErrorFrame("ERROR", sqlstate, "scripted error"));
    if (status == 'T') status = 'E';
    if (extended) skipping = true;
  }

  void Receive(std::string_view bytes) {
    REQUIRE(testing::ForEachFrame(bytes, [&](const protocol::Frame& f) {
      // (A Close starts no transaction: PostgreSQL closes at once, and a
      // Close before a simple Query leaves nothing open.)
      if (f.tag != 'Q' && f.tag != 'S' && f.tag != 'C') open_unit = true;
      if (skipping && f.tag != 'S') return;
      switch (f.tag) {
        case 'Q': {
          ++requests;
          unnamed = false;  // a simple Query destroys the unnamed statement
          auto q = protocol::DecodeQuery(f.payload);
          REQUIRE(q.ok());
          const std::string_view sql = q->query;
          if (status == 'E') {
            if (sql == "COMMIT" || sql == "ROLLBACK") {
              answers.push_back(Complete("ROLLBACK"));
              status = 'I';
            } else {
              Fail("25P02", false);
            }
          } else if (sql == "BEGIN") {
            REQUIRE(status == 'I');
            status = 'T';
            answers.push_back(Complete("BEGIN"));
          } else if (sql == "COMMIT") {
            REQUIRE(status == 'T');
            status = 'I';
            answers.push_back(Complete("COMMIT"));
          } else if (sql == "SELECT 1/0") {
            Fail("22012", false);
          } else {
            answers.push_back(RowDesc());
            answers.push_back(DataRow("1"));
            answers.push_back(Complete("SELECT 1"));
          }
          answers.push_back(Ready(status));
          break;
        }
        case 'P': {
          auto p = protocol::DecodeParse(f.payload);
          REQUIRE(p.ok());
          const std::string name(p->statement);
          if (status == 'E') {
            Fail("25P02", true);
          } else if (!name.empty() && statements.count(name) != 0) {
            Fail("42P05", true);  // duplicate_prepared_statement
          } else {
            if (name.empty()) {
              unnamed = true;
            } else {
              statements.insert(name);  // not transactional: survives errors and ROLLBACK
            }
            answers.push_back(ParseOk());
          }
          break;
        }
        case 'B': {
          auto b = protocol::DecodeBind(f.payload);
          REQUIRE(b.ok());
          const std::string name(b->statement);
          const bool exists = name.empty() ? unnamed : statements.count(name) != 0;
          if (status == 'E') {
            Fail("25P02", true);
          } else if (!exists) {
            Fail("26000", true);  // invalid_sql_statement_name
          } else {
            portal_fails = !b->parameters.empty() && b->parameters[0] && *b->parameters[0] == "0";
            answers.push_back(BindOk());
          }
          break;
        }
        case 'D': {
          auto d = protocol::DecodeDescribe(f.payload);
          REQUIRE(d.ok());
          if (d->kind == protocol::ObjectKind::kStatement) {
            ++statement_describes;
            const std::string name(d->name);
            const bool exists = name.empty() ? unnamed : statements.count(name) != 0;
            if (status == 'E') {
              Fail("25P02", true);
            } else if (!exists) {
              Fail("26000", true);
            } else {
              answers.push_back(ParamDesc());
              answers.push_back(RowDesc());
            }
          } else if (status == 'E') {
            Fail("25P02", true);
          } else {
            answers.push_back(RowDesc());
          }
          break;
        }
        case 'E':
          if (status == 'E') {
            Fail("25P02", true);
          } else if (portal_fails) {
            Fail("22012", true);
          } else {
            answers.push_back(DataRow("1"));
            answers.push_back(Complete("SELECT 1"));
          }
          break;
        case 'C': {
          auto c = protocol::DecodeClose(f.payload);
          REQUIRE(c.ok());
          if (c->kind == protocol::ObjectKind::kStatement) {
            if (c->name.empty()) {
              unnamed = false;
            } else {
              statements.erase(std::string(c->name));
            }
          }
          answers.push_back(CloseOk());
          break;
        }
        case 'H':
          break;
        case 'S':
          ++requests;
          skipping = false;
          open_unit = false;
          answers.push_back(Ready(status));
          break;
        default:
          FAIL("unexpected frontend message '" << f.tag << "' at the origin");
      }
    }));
  }
};

// A random session: units of work as a driver sends them, and what a
// correct server answers them with: the ReadyForQuery statuses in order and
// how many ErrorResponses.
struct Script {
  std::string bytes;
  std::string statuses;
  std::size_t errors = 0;
  std::string description;
  // Unit boundaries: where each unit's bytes end, and how many
  // ReadyForQuery the client has by then once all is answered.
  std::vector<std::size_t> unit_end;
  std::vector<std::size_t> readies_after;
};

Script MakeScript(Rng& rng) {
  Script s;
  std::set<std::string> prepared;  // named statements the client has parsed
  char status = 'I';               // the session's transaction status
  const std::size_t units = 1 + rng.Below(14);
  // A request that fails: one ErrorResponse; a block becomes failed.
  auto fail = [&] {
    ++s.errors;
    if (status == 'T') status = 'E';
  };
  // An extended unit binding `name` with parameter `param` ("0" divides by zero).
  auto bind_unit = [&](const std::string& name, const std::string& param) {
    s.bytes += Bind(name, {param}) + Execute();
    if (rng.Chance(25)) s.bytes += testing::Flush();  // results wanted before the Sync
    s.bytes += Sync();
    if (status == 'E' || param == "0") fail();
    s.statuses += status;
  };
  for (std::size_t u = 0; u < units || status != 'I'; ++u) {
    std::size_t kind = rng.Below(10);
    if (u >= units) kind = 5;  // end an open block
    switch (kind) {
      case 0:
      case 1:
        s.bytes += QueryBytes("SELECT 1");
        if (status == 'E') fail();
        s.statuses += status;
        s.description += "Q ";
        break;
      case 2: {
        const std::string param = rng.Chance(20) ? "0" : "1";
        s.bytes += Parse("", "SELECT 1/$1::int");
        s.description += "P('')B(" + param + ")ES ";
        bind_unit("", param);
        break;
      }
      case 3: {
        // A named statement: parsed once (as PQprepare does, a unit of its
        // own; not in a failed block, where it would fail), then bound by
        // name, on whichever connection the session has then.
        const std::string name = "s" + std::to_string(rng.Below(2));
        if (prepared.count(name) == 0) {
          if (status == 'E') break;
          prepared.insert(name);
          s.bytes += Parse(name, "SELECT 1/$1::int") + Sync();
          s.statuses += status;
          s.description += "P(" + name + ")S ";
        }
        const std::string param = rng.Chance(20) ? "0" : "1";
        s.description += "B(" + name + "," + param + ")ES ";
        bind_unit(name, param);
        break;
      }
      case 4:
        // Sync alone (an empty extended unit).
        s.bytes += Sync();
        s.statuses += status;
        s.description += "S ";
        break;
      case 5:
      case 6:
        if (status == 'I') {
          s.bytes += QueryBytes("BEGIN");
          status = 'T';
          s.description += "BEGIN ";
        } else {
          s.bytes += QueryBytes("COMMIT");  // in a failed block: ROLLBACK
          status = 'I';
          s.description += "COMMIT ";
        }
        s.statuses += status;
        break;
      case 7:
        s.bytes += QueryBytes("SELECT 1/0");
        fail();
        s.statuses += status;
        s.description += "Q(1/0) ";
        break;
      case 8: {
        // Describe a prepared statement (its shape), in a unit of its own.
        if (prepared.empty()) break;
        const std::string name = *prepared.begin();
        s.bytes += testing::DescribeS(name) + Sync();
        if (status == 'E') fail();
        s.statuses += status;
        s.description += "D(" + name + ")S ";
        break;
      }
      case 9: {
        // Close a prepared statement; it must be parsed again before use.
        if (prepared.empty()) break;
        const std::string name = *prepared.rbegin();
        prepared.erase(name);
        s.bytes += testing::CloseS(name) + Sync();
        s.statuses += status;
        s.description += "C(" + name + ")S ";
        break;
      }
    }
    if (s.unit_end.empty() || s.unit_end.back() != s.bytes.size()) {
      s.unit_end.push_back(s.bytes.size());
      s.readies_after.push_back(s.statuses.size());
    }
  }
  return s;
}

TEST_CASE("SessionCore: random sessions release only at rest and end idle", "[endpoint][session_core]") {
  constexpr std::uint64_t kSequences = 300;
  // What the sequences exercised (checked at the end, so that a change to the
  // generator cannot quietly make this test trivial).
  std::size_t releases_checked = 0;
  std::size_t reuses = 0;            // a returned connection lent again
  std::size_t failed_blocks = 0;     // sequences with a ReadyForQuery 'E'
  std::size_t errors = 0;            // ErrorResponses answered
  std::size_t replays = 0;           // statements re-Parsed on another connection
  std::size_t multi_connection = 0;  // sequences that used several connections
  for (std::uint64_t seed = 1; seed <= kSequences; ++seed) {
    Rng rng(seed * 7919);
    const Script script = MakeScript(rng);
    // A driver that waits for each unit's answers before it sends the next
    // one, or one that pipelines.
    const bool waits = rng.Chance(50);
    INFO("seed " << seed << (waits ? " (waits): " : " (pipelines): ") << script.description);
    Harness h;
    SessionCore& core = h.core();

    std::size_t sent = 0;  // client bytes handed to the core
    std::string client_seen;
    bool acquire_pending = false;
    OriginConnection* lent = nullptr;
    std::vector<OriginConnection*> idle_pool;
    std::map<OriginConnection*, ScriptedBackend> backends;

    // Carries out what an event produced; checks the release invariant.
    auto execute = [&] {
      Out out = h.Take();
      client_seen += out.to_client;
      for (const SessionCommand& c : out.commands) {
        switch (c.kind) {
          case Kind::kAcquire:
            REQUIRE_FALSE(acquire_pending);
            REQUIRE(lent == nullptr);
            acquire_pending = true;
            break;
          case Kind::kRelease: {
            REQUIRE(lent != nullptr);
            ScriptedBackend& b = backends[lent];
            if (!out.to_origin.empty()) b.Receive(out.to_origin);  // written before the release ran
            out.to_origin.clear();
            if (c.decision != ReleaseDecision::kKeep && c.decision != ReleaseDecision::kClose) {
              ++releases_checked;
              CAPTURE(c.decision);
              REQUIRE(b.last_ready_fed == 'I');
              REQUIRE(b.readies_fed == b.requests);  // every Query/Sync sent was answered
              REQUIRE(b.answers.empty());
              REQUIRE_FALSE(b.open_unit);  // not in the middle of an extended unit
              REQUIRE(lent->transaction_status() == 'I');
              idle_pool.push_back(lent);
            } else {
              REQUIRE(c.decision == ReleaseDecision::kClose);  // kKeep is never sent as a command
              REQUIRE(lent->broken());
            }
            lent = nullptr;
            break;
          }
          default:
            FAIL("unexpected command " << KindName(c.kind));
        }
      }
      if (!out.to_origin.empty()) {
        REQUIRE(lent != nullptr);  // bytes for the origin only while a connection is lent
        backends[lent].Receive(out.to_origin);
      }
      REQUIRE(core.connection() == lent);
      if (core.state() == State::kIdle) REQUIRE(lent == nullptr);
      // (kShapeChecking: a frame waits for an earlier Sync group's answers,
      // StatementSession::MustWait.)
      REQUIRE((core.state() == State::kIdle || core.state() == State::kAcquiring || core.state() == State::kActive ||
               core.state() == State::kShapeChecking));
    };

    for (int steps = 0;; ++steps) {
      REQUIRE(steps < 100000);
      enum Choice { kClient, kLend, kOrigin };
      std::vector<Choice> choices;
      // How far the client may send now.
      std::size_t limit = script.bytes.size();
      if (waits) {
        const std::size_t readies = ReadyStatuses(client_seen).size();
        for (std::size_t u = 0; u < script.unit_end.size(); ++u) {
          if (script.readies_after[u] > readies) {
            limit = script.unit_end[u];
            break;
          }
        }
      }
      if (sent < limit && core.wants_client()) choices.push_back(kClient);
      if (acquire_pending) choices.push_back(kLend);
      if (lent != nullptr && !backends[lent].answers.empty() && core.wants_origin()) choices.push_back(kOrigin);
      if (choices.empty()) break;
      switch (choices[rng.Below(choices.size())]) {
        case kClient: {
          // A random piece of the stream: often whole, sometimes cut mid-frame.
          const std::size_t rest = limit - sent;
          const std::size_t n = rng.Chance(30) ? rest : 1 + rng.Below(rest);
          h.Client(std::string_view(script.bytes).substr(sent, n));
          sent += n;
          break;
        }
        case kLend: {
          acquire_pending = false;
          OriginConnection* conn = nullptr;
          if (!idle_pool.empty() && rng.Chance(70)) {
            const std::size_t i = rng.Below(idle_pool.size());
            conn = idle_pool[i];
            idle_pool.erase(idle_pool.begin() + static_cast<std::ptrdiff_t>(i));
            ++reuses;
          } else {
            conn = h.NewConnection(true, static_cast<std::int32_t>(1000 + backends.size()));
            backends[conn];
          }
          lent = conn;
          core.OnAcquired(conn);
          break;
        }
        case kOrigin: {
          ScriptedBackend& b = backends[lent];
          const std::string frame = std::move(b.answers.front());
          b.answers.pop_front();
          if (frame[0] == 'Z') {
            ++b.readies_fed;
            b.last_ready_fed = frame[5];
          }
          h.Origin(frame);
          break;
        }
      }
      execute();
    }

    // Everything sent was answered, in order, and the session is at rest.
    CHECK(sent == script.bytes.size());
    CHECK(ReadyStatuses(client_seen) == script.statuses);
    CHECK(ErrorsIn(client_seen).size() == script.errors);
    CHECK(core.state() == State::kIdle);
    CHECK(core.connection() == nullptr);
    CHECK(lent == nullptr);
    CHECK_FALSE(acquire_pending);
    for (auto& [conn, b] : backends) {
      CHECK(b.answers.empty());
      CHECK(b.readies_fed == b.requests);
      CHECK_FALSE(conn->broken());
      replays += b.statement_describes;
    }
    if (ReadyStatuses(client_seen).find('E') != std::string::npos) ++failed_blocks;
    errors += script.errors;
    if (backends.size() > 1) ++multi_connection;
  }
  CHECK(releases_checked >= kSequences);
  CHECK(reuses > 0);
  CHECK(failed_blocks > 0);
  CHECK(errors > 0);
  CHECK(replays > 0);
  CHECK(multi_connection > 0);
}

TEST_CASE("SessionCore: beyond the pinned budget a pinning statement waits; a grant lets it go on",
          "[endpoint][session_core]") {
  Harness h;
  REQUIRE(h.impl().on_executor.pin_budget.TryTake());  // another session holds the only unit
  h.Client(QueryBytes("CREATE TEMP TABLE t (x int)"));
  Out waiting = h.Take();
  CHECK(waiting.Commands() == "wait-pin");
  CHECK(waiting.to_client.empty());
  CHECK(h.core().wants_client());  // reads on, to see a client that leaves
  h.Client(QueryBytes("SELECT 1"));  // queued behind it
  CHECK(h.Take().Commands().empty());
  h.core().OnPinGranted();
  Out granted = h.Take();
  CHECK(granted.Find(Kind::kAcquire) != nullptr);
  CHECK(h.impl().pinned_sessions.load() == 1);
}

TEST_CASE("SessionCore: a failed wait for the pinned budget answers like a failed acquire; a cancel ends it",
          "[endpoint][session_core]") {
  Harness h;
  REQUIRE(h.impl().on_executor.pin_budget.TryTake());
  h.Client(QueryBytes("SELECT pg_advisory_lock(1)"));
  CHECK(h.Take().Commands() == "wait-pin");
  REQUIRE(h.core().OnCancelRequest());
  Out cancel = h.Take();
  const SessionCommand* c = cancel.Find(Kind::kCancelPinWait);
  REQUIRE(c != nullptr);
  h.core().OnPinWaitFailed(c->status);
  Out answered = h.Take();
  CHECK(answered.to_client.find("57014") != std::string::npos);
  CHECK(answered.to_client.back() == 'I');  // ReadyForQuery 'I'
  CHECK(h.impl().pins_rejected.load() == 1);
  // The next statement waits again (FIFO behind nobody, the unit still held).
  h.Client(QueryBytes("SELECT pg_advisory_lock(2)"));
  CHECK(h.Take().Commands() == "wait-pin");
  h.core().OnPinWaitFailed(absl::ResourceExhaustedError("no pinned slot"));
  CHECK(h.Take().to_client.find("Failed to acquire a connection from the pool") != std::string::npos);
}

TEST_CASE("SessionCore: pg_terminate_backend of a constant pid asks the driver; found: answered t here",
          "[endpoint][session_core]") {
  Harness h;
  h.Client(QueryBytes("SELECT pg_terminate_backend(5000123)"));
  Out asked = h.Take();
  const SessionCommand* c = asked.Find(Kind::kSignalSession);
  REQUIRE(c != nullptr);
  CHECK(c->signal_pid == 5000123);
  CHECK(c->signal_terminate);
  h.core().OnSignalled(true);
  Out answered = h.Take();
  CHECK(answered.Commands().empty());  // no origin connection needed
  CHECK(answered.to_client.find("pg_terminate_backend") != std::string::npos);
  CHECK(answered.to_client.back() == 'I');
  // Not found: the statement goes to the origin unchanged.
  h.Client(QueryBytes("SELECT pg_cancel_backend(42)"));
  REQUIRE(h.Take().Find(Kind::kSignalSession) != nullptr);
  h.core().OnSignalled(false);
  CHECK(h.Take().Commands() == "acquire");
}

TEST_CASE("SessionCore: a Bind in a later batch of a prepared pg_terminate_backend($1) is answered here when found",
          "[endpoint][session_core]") {
  Harness h;
  h.ParsedOnOrigin("SELECT pg_terminate_backend($1)");
  // asyncpg's prepare (here a parse-only unit, answered without the origin).
  h.Client(Parse("__asyncpg_stmt_1__", "SELECT pg_terminate_backend($1)") + Sync());
  Out prepared = h.Take();
  REQUIRE(prepared.Commands().empty());
  REQUIRE(Tags(prepared.to_client) == "1Z");
  // A transaction block on a lent connection: the answer keeps its status.
  h.StartUnit(QueryBytes("BEGIN"));
  h.Origin(Complete("BEGIN") + Ready('T'));
  (void)h.Take();
  // Its Bind (binary int4 pid, binary results), Describe portal, Execute, Sync.
  const std::string batch =
      Encoded(protocol::Bind{"", "__asyncpg_stmt_1__", {1}, {std::string_view("\x00\x4c\x4b\x5b", 4)}, {1}}) +
      Encoded(protocol::Describe{protocol::ObjectKind::kPortal, ""}) + Execute() + Sync();
  h.Client(batch);
  Out asked = h.Take();
  const SessionCommand* c = asked.Find(Kind::kSignalSession);
  REQUIRE(c != nullptr);
  CHECK(c->signal_pid == 0x004c4b5b);
  CHECK(c->signal_terminate);
  CHECK(asked.to_origin.empty());
  h.core().OnSignalled(true);
  Out answered = h.Take();
  CHECK(answered.to_origin.empty());  // nothing of it reaches the origin
  CHECK(Tags(answered.to_client) == "2TDCZ");
  CHECK(ReadyStatuses(answered.to_client) == "T");
  for (const Msg& m : Decode(answered.to_client)) {
    if (m.tag == 'D') CHECK(m.payload == std::string("\x00\x01\x00\x00\x00\x01\x01", 7));  // binary true
  }
  // Not found (an origin pid nobody else used): the batch goes to the origin.
  h.Client(batch);
  REQUIRE(h.Take().Find(Kind::kSignalSession) != nullptr);
  h.core().OnSignalled(false);
  Out forwarded = h.Take();
  CHECK(Tags(forwarded.to_origin).find("BDES") != std::string::npos);
  // The pid of the backend this session holds now: straight to the origin
  // (it ends the caller's own backend, as directly).
  h.Origin(BindOk() + RowDesc() + DataRow("t") + Complete("SELECT 1") + Ready('T'));
  (void)h.Take();
  h.Client(Bind("__asyncpg_stmt_1__", {std::to_string(kBackendPid)}) + Execute() + Sync());
  Out own = h.Take();
  CHECK(own.Find(Kind::kSignalSession) == nullptr);
  CHECK(Tags(own.to_origin).find("BES") != std::string::npos);
}

TEST_CASE("SessionCore: asyncpg's Parse + Describe + Flush, then Bind + Execute + Sync: answered here but the Sync",
          "[endpoint][session_core]") {
  Harness h;
  OriginConnection* conn = nullptr;
  Out prepared = h.StartUnit(Parse("__asyncpg_stmt_2__", "SELECT pg_terminate_backend($1)") +
                                 testing::DescribeS("__asyncpg_stmt_2__") + testing::Flush(),
                             &conn);
  CHECK(Tags(prepared.to_origin) == "PDDH");  // with the hidden Describe that records its shape
  h.Origin(ParseOk() + ParamDesc() + RowDesc() + ParamDesc() + RowDesc());
  CHECK(Tags(h.Take().to_client) == "1tT");
  // The pid is that of the backend lent for this unit (the pool's choice,
  // not the caller's own): still looked for among the other sessions.
  h.Client(Encoded(protocol::Bind{"", "__asyncpg_stmt_2__", {1}, {std::string_view("\x00\x00\x10\x92", 4)}, {1}}) +
           Encoded(protocol::Describe{protocol::ObjectKind::kPortal, ""}) + Execute() + Sync());
  Out asked = h.Take();
  const SessionCommand* c = asked.Find(Kind::kSignalSession);
  REQUIRE(c != nullptr);
  CHECK(c->signal_pid == kBackendPid);
  // Nor does the caller count as that backend's user for this unit's lend.
  CHECK(h.core().origin_lease().pid == kBackendPid);
  CHECK(h.core().SignalLease().serial == 0);
  h.core().OnSignalled(true);
  Out answered = h.Take();
  CHECK(Tags(answered.to_client) == "2TDC");
  CHECK(Tags(answered.to_origin) == "S");  // ends the origin's implicit transaction
  h.Origin(Ready('I'));
  Out ended = h.Take();
  CHECK(Tags(ended.to_client) == "Z");
  CHECK(ended.Commands() == "release(return)");
}

TEST_CASE("SessionCore: a named pg_terminate_backend($1) parsed and bound in one batch keeps its text for later Binds",
          "[endpoint][session_core]") {
  Harness h;
  h.Client(Parse("S_1", "select pg_terminate_backend($1)") + Bind("S_1", {"5000123"}) + Execute() + Sync());
  Out asked = h.Take();
  const SessionCommand* c = asked.Find(Kind::kSignalSession);
  REQUIRE(c != nullptr);
  CHECK(c->signal_pid == 5000123);
  h.core().OnSignalled(true);
  Out answered = h.Take();
  CHECK(answered.Commands().empty());  // answered here, no stand-in on the origin
  CHECK(answered.to_origin.empty());
  CHECK(Tags(answered.to_client) == "12DCZ");
  CHECK(ReadyStatuses(answered.to_client) == "I");
  // The next execution binds the name only (PgJDBC, node-postgres): still a signal.
  h.Client(Bind("S_1", {"5000124"}) + Execute() + Sync());
  Out again = h.Take();
  c = again.Find(Kind::kSignalSession);
  REQUIRE(c != nullptr);
  CHECK(c->signal_pid == 5000124);
  h.core().OnSignalled(false);  // no session holds it: the origin runs the statement itself
  CHECK(h.Take().Commands() == "acquire");
}

TEST_CASE("SessionCore: a closed or re-parsed signal statement is no longer one", "[endpoint][session_core]") {
  Harness h;
  const std::string bind_execute = Bind("s1", {"5000123"}) + Execute() + Sync();
  const bool close = GENERATE(true, false);
  CAPTURE(close);
  h.ParsedOnOrigin("SELECT pg_cancel_backend($1)");
  h.Client(Parse("s1", "SELECT pg_cancel_backend($1)") + Sync());
  REQUIRE(Tags(h.Take().to_client) == "1Z");
  // Close, or a Parse of the name with another text (after Close: PostgreSQL
  // refuses a name in use), each in a unit of its own on the origin.
  OriginConnection* conn = nullptr;
  h.StartUnit(testing::CloseS("s1") + Sync(), &conn);
  h.Origin(Ready('I'));
  (void)h.Take();
  if (!close) {
    h.ParsedOnOrigin("SELECT $1::int");
    h.Client(Parse("s1", "SELECT $1::int") + Sync());
    (void)h.Take();
  }
  h.Client(bind_execute);
  Out out = h.Take();
  CHECK(out.Find(Kind::kSignalSession) == nullptr);
  CHECK(out.Commands() == "acquire");
}

TEST_CASE("SessionCore: each lend records the backend and a newer lease serial", "[endpoint][session_core]") {
  Harness h;
  CHECK(h.core().origin_lease().serial == 0);
  h.StartUnit(QueryBytes("SELECT 1"));
  const SessionCore::OriginLease first = h.core().origin_lease();
  CHECK(first.pid == kBackendPid);
  CHECK(first.serial != 0);
  h.Origin(SelectAnswer());
  (void)h.Take();
  CHECK(h.core().SignalLease().serial == first.serial);  // at rest: its latest lend counts
  h.StartUnit(QueryBytes("SELECT 1"));
  CHECK(static_cast<std::int32_t>(h.core().origin_lease().serial - first.serial) > 0);
}

// ===== Dormancy: an idle core is given back and made again ===================

TEST_CASE("SessionCore: an idle core sleeps and wakes with its identity, settings and latest lend",
          "[endpoint][session_core]") {
  Harness h;
  CHECK(h.core().CanSleep());  // a new session
  OriginConnection* conn = nullptr;
  h.StartUnit(QueryBytes("SET work_mem = '64MB'"), &conn);
  CHECK_FALSE(h.core().CanSleep());  // a connection is lent
  h.Origin(Complete("SET") + Ready('I'));
  Out out = h.Take();
  REQUIRE(out.Commands() == "capture");
  CHECK_FALSE(h.core().CanSleep());  // the capture runs on the connection
  SettingMap captured;
  captured["work_mem"] = "64MB";
  conn->carried_settings() = captured;
  h.core().settings().OnCaptured(captured);
  h.core().OnCaptured(CaptureOutcome{});
  out = h.Take();
  REQUIRE(out.Commands() == "release(return)");
  const SessionCore::OriginLease lease = h.core().origin_lease();
  const std::uint64_t captures = h.core().settings().captures();

  h.SleepAndWake();
  CHECK(h.core().session_id() == "0123456789abcdef");
  CHECK(h.core().state() == State::kIdle);
  CHECK(h.core().settings().desired().at("work_mem") == "64MB");
  CHECK(h.core().settings().captures() == captures);  // the cache's key of the settings holds
  CHECK(h.core().origin_lease().pid == lease.pid);
  CHECK(h.core().origin_lease().serial == lease.serial);
  CHECK(h.core().SignalLease().serial == lease.serial);

  // It goes on as before: the next unit borrows, carrying work_mem.
  h.Client(QueryBytes("SELECT 1"));
  out = h.Take();
  REQUIRE(out.Commands() == "acquire");
  OriginConnection* fresh = h.NewConnection(/*carries_session_settings=*/false);
  h.core().OnAcquired(fresh);
  out = h.Take();
  const SessionCommand* prepare = out.Find(Kind::kPrepare);
  REQUIRE(prepare != nullptr);  // the replay brings work_mem to the new connection
}

TEST_CASE("SessionCore: a core that holds more than a new one's state does not sleep", "[endpoint][session_core]") {
  struct Case {
    const char* name;
    std::string unit;    // the client's unit
    std::string answer;  // the origin's answer
    bool releases;       // the unit ends with the connection returned (when it borrows one)
  };
  const Case c = GENERATE(values<Case>({
      {"an SQL-level PREPARE", QueryBytes("PREPARE q AS SELECT 1"), Complete("PREPARE") + Ready('I'), false},
      {"an open transaction", QueryBytes("BEGIN"), Complete("BEGIN") + Ready('T'), false},
      {"a temporary table", QueryBytes("CREATE TEMP TABLE t (a int)"), Complete("CREATE TABLE") + Ready('I'), false},
  }));
  CAPTURE(c.name);
  Harness h;
  h.Client(c.unit);
  if (h.Take().Find(Kind::kAcquire) != nullptr) {
    h.core().OnAcquired(h.NewConnection());
    (void)h.Take();
    h.Origin(c.answer);
    Out out = h.Take();
    if (c.releases) CHECK(out.Find(Kind::kRelease) != nullptr);
  }
  CHECK_FALSE(h.core().CanSleep());
}

TEST_CASE("SessionCore: a core with the driver's prepared statements sleeps and wakes with them",
          "[endpoint][session_core]") {
  Harness h;
  h.StartUnit(Parse("s1", "SELECT 1") + Sync());
  h.Origin(ParseOk() + ParamDesc() + RowDesc() + Ready('I'));
  (void)h.Take();
  h.StartUnit(Parse("", "SELECT 2") + Bind("") + Execute() + Sync());
  h.Origin(ParseOk() + BindOk() + DataRow("2") + Complete("SELECT 1") + Ready('I'));
  (void)h.Take();
  CHECK_FALSE(h.core().Releasable());  // they are the session's: its half stays
  h.SleepAndWake();                     // (REQUIREs CanSleep)
  CHECK_FALSE(h.core().Releasable());
  // Both run again on the next connection lent, replayed there.
  Out out = h.StartUnit(Bind("s1") + Execute() + Sync());
  CHECK(Tags(out.to_origin) == "PDBES");
  h.Origin(ParseOk() + ParamDesc() + RowDesc() + BindOk() + DataRow("1") + Complete("SELECT 1") + Ready('I'));
  CHECK(Tags(h.Take().to_client) == "2DCZ");
  out = h.StartUnit(Bind("") + Execute() + Sync());
  CHECK(Tags(out.to_origin) == "PBES");
  h.Origin(ParseOk() + BindOk() + DataRow("2") + Complete("SELECT 1") + Ready('I'));
  CHECK(Tags(h.Take().to_client) == "2DCZ");
}

TEST_CASE("SessionCore: an idle core whose state is a new one's may let its session go; one with more may not",
          "[endpoint][session_core]") {
  Harness h;
  CHECK(h.core().Releasable());  // a new session
  OriginConnection* conn = nullptr;
  h.StartUnit(QueryBytes("SELECT now()"), &conn);
  CHECK_FALSE(h.core().Releasable());  // a connection is lent
  h.Origin(RowDesc() + DataRow("x") + Complete("SELECT 1") + Ready('I'));
  REQUIRE(h.Take().Commands() == "release(return)");
  h.cache().ReleaseIdleBuffers();
  CHECK(h.core().Releasable());
  CHECK(h.cache().Releasable());
  CHECK(h.cache().wrote());  // (a function call: no stale-if-error; the offer says so)

  // An unnamed statement is the session's until a simple Query destroys it
  // (as directly: a Bind('') after the Query fails): then it may go again.
  h.StartUnit(Parse("", "SELECT 1") + Bind("") + Execute() + Sync(), &conn);
  h.Origin(ParseOk() + BindOk() + DataRow("1") + Complete("SELECT 1") + Ready('I'));
  (void)h.Take();
  h.cache().ReleaseIdleBuffers();
  CHECK(h.core().CanSleep());  // (asleep, it keeps the statement)
  CHECK_FALSE(h.core().Releasable());
  h.StartUnit(QueryBytes("SELECT 2"), &conn);
  h.Origin(RowDesc() + DataRow("2") + Complete("SELECT 1") + Ready('I'));
  (void)h.Take();
  h.cache().ReleaseIdleBuffers();
  CHECK(h.core().CanSleep());
  CHECK(h.core().Releasable());

  // A pid shown: a later pg_terminate_backend of it names this session.
  h.StartUnit(QueryBytes("SELECT pg_backend_pid()"), &conn);
  h.Origin(RowDesc() + DataRow("4242") + Complete("SELECT 1") + Ready('I'));
  (void)h.Take();
  h.cache().ReleaseIdleBuffers();
  CHECK(h.core().CanSleep());
  CHECK_FALSE(h.core().Releasable());
}

TEST_CASE("SessionCore: after a settings capture a session sleeps; it is let go only if the capture found the "
          "startup settings",
          "[endpoint][session_core]") {
  // RESET: the capture finds the settings as they started; SET: it does not.
  const bool changed = GENERATE(false, true);
  Harness h;
  OriginConnection* conn = nullptr;
  h.StartUnit(QueryBytes(changed ? "SET work_mem = '64MB'" : "RESET work_mem"), &conn);
  h.Origin(Complete(changed ? "SET" : "RESET") + Ready('I'));
  REQUIRE(h.Take().Commands() == "capture");
  SettingMap captured = h.core().settings().startup();
  if (changed) captured["work_mem"] = "64MB";
  conn->carried_settings() = captured;
  h.core().settings().OnCaptured(captured);
  h.core().OnCaptured(CaptureOutcome{});
  REQUIRE(h.Take().Commands() == "release(return)");
  h.cache().ReleaseIdleBuffers();
  CHECK(h.core().settings().captures() == 1);
  CHECK(h.core().CanSleep());
  CHECK(h.core().settings().AsStarted() == !changed);
  CHECK(h.core().Releasable() == !changed);
}

TEST_CASE("SessionCache: the idle sweep gives back the per-unit state; a transaction's writes keep it",
          "[endpoint][session_core]") {
  Harness h;
  OriginConnection* conn = nullptr;
  h.StartUnit(QueryBytes("SELECT 1"), &conn);
  CHECK(h.cache().holds_unit_state());
  h.Origin(RowDesc() + DataRow("1") + Complete("SELECT 1") + Ready('I'));
  REQUIRE(h.Take().Commands() == "release(return)");
  h.cache().ReleaseIdleBuffers();  // the sweep (Session::ReleaseIdleBuffers)
  CHECK_FALSE(h.cache().holds_unit_state());

  // The next unit makes it again; a write in an open transaction is held
  // for the invalidation at its end, through a sweep in between.
  h.StartUnit(QueryBytes("BEGIN"), &conn);
  h.Origin(Complete("BEGIN") + Ready('T'));
  (void)h.Take();
  h.Client(QueryBytes("UPDATE accounts SET balance = 0 WHERE id = 1"));
  (void)h.Take();
  h.Origin(Complete("UPDATE 1") + Ready('T'));
  (void)h.Take();
  h.cache().ReleaseIdleBuffers();
  CHECK(h.cache().holds_unit_state());
  const std::uint64_t invalidations = h.impl().cache->Report(0).invalidations;
  h.Client(QueryBytes("COMMIT"));
  (void)h.Take();
  h.Origin(Complete("COMMIT") + Ready('I'));
  (void)h.Take();
  // The transaction's writes invalidate once more at its end (the write
  // the sweep kept).
  CHECK(h.impl().cache->Report(0).invalidations == invalidations + 1);
  h.cache().ReleaseIdleBuffers();
  CHECK_FALSE(h.cache().holds_unit_state());
}

TEST_CASE("SessionCache: simple Queries make no statement state; the sweep gives it back once nothing is in it",
          "[endpoint][session_core]") {
  Harness h;
  OriginConnection* conn = nullptr;
  h.StartUnit(QueryBytes("SELECT 1"), &conn);
  h.Origin(RowDesc() + DataRow("1") + Complete("SELECT 1") + Ready('I'));
  (void)h.Take();
  CHECK_FALSE(h.cache().holds_statements());  // simple Queries only

  // The unnamed statement, parsed and run: known until a Query replaces it.
  h.StartUnit(Parse("", "SELECT 1") + Bind("") + Execute() + Sync(), &conn);
  CHECK(h.cache().holds_statements());
  h.Origin(ParseOk() + BindOk() + DataRow("1") + Complete("SELECT 1") + Ready('I'));
  (void)h.Take();
  h.cache().ReleaseIdleBuffers();
  CHECK(h.cache().holds_statements());  // a Bind('') may still key on its text
  h.StartUnit(QueryBytes("SELECT 2"), &conn);
  h.Origin(RowDesc() + DataRow("2") + Complete("SELECT 1") + Ready('I'));
  (void)h.Take();
  h.cache().ReleaseIdleBuffers();
  CHECK_FALSE(h.cache().holds_statements());

  // A named statement is kept across the sweep.
  h.ParsedOnOrigin("SELECT 3");
  h.Client(Parse("s1", "SELECT 3") + Sync());  // parse-only: answered here
  REQUIRE(Tags(h.Take().to_client) == "1Z");
  h.cache().ReleaseIdleBuffers();
  CHECK(h.cache().holds_statements());
}

TEST_CASE("SessionCore: input that waits keeps the core awake", "[endpoint][session_core]") {
  Harness h;
  h.Client(QueryBytes("SELECT 1"));
  Out out = h.Take();
  REQUIRE(out.Commands() == "acquire");
  CHECK_FALSE(h.core().CanSleep());  // acquiring, the Query buffered
}

TEST_CASE("SessionCore: a named Parse-only unit waits for the origin unless the origin parsed its statement",
          "[endpoint][session_core]") {
  // libpq's PQprepare: its error belongs at the Parse, as directly.
  Harness h;
  h.Client(Parse("s1", "SELECT 41") + Sync());
  CHECK(h.Take().Commands() == "acquire");
  h.core().OnAcquired(h.NewConnection());
  CHECK(Tags(h.Take().to_origin) == "PDS");  // (with the hidden Describe that records its shape)
  h.Origin(ParseOk() + ParamDesc() + RowDesc() + Ready('I'));
  CHECK(Tags(h.Take().to_client) == "1Z");
  CHECK(h.core().connection() == nullptr);
  // Known now: another name for it needs no connection.
  h.Client(Parse("s2", "SELECT 41") + Sync());
  Out out = h.Take();
  CHECK(out.Commands().empty());
  CHECK(Tags(out.to_client) == "1Z");
}

TEST_CASE("SessionCore: a Query the origin skips after a failed extended message leaves nothing lent",
          "[endpoint][session_core]") {
  Harness h;
  // Parse (fails) + Query + Sync: one ReadyForQuery, for the Sync.
  h.StartUnit(Parse("bad", "selec") + QueryBytes("SELECT 1") + Sync());
  h.Origin(ErrorFrame("ERROR", "42601", "syntax error at end of input") + Ready('I'));
  Out out = h.Take();
  CHECK(Tags(out.to_client) == "EZ");
  CHECK(h.core().connection() == nullptr);  // back in the pool
  CHECK(h.core().CanSleep());

  // The error arrives before the Sync is sent: the unit stays open, a
  // Query sent meanwhile is not sent (the origin would ignore it), the Sync is.
  h.StartUnit(Parse("bad", "selec") + Encoded(protocol::Flush{}) + QueryBytes("SELECT 2"));
  h.Origin(ErrorFrame("ERROR", "42601", "syntax error at end of input"));
  CHECK(Tags(h.Take().to_client) == "E");
  REQUIRE(h.core().connection() != nullptr);  // the origin still owes the Sync's answer
  h.Client(QueryBytes("SELECT 3"));
  CHECK(h.Take().to_origin.empty());
  h.Client(Sync());
  CHECK(Tags(h.Take().to_origin) == "S");
  h.Origin(Ready('I'));
  CHECK(Tags(h.Take().to_client) == "Z");
  CHECK(h.core().connection() == nullptr);
  CHECK(h.core().CanSleep());
}

TEST_CASE("SessionCore: a session that leaves with a settings change not yet captured closes its connection",
          "[endpoint][session_core]") {
  // SET then BEGIN in one flight, then gone inside the block: a ROLLBACK
  // would not undo the SET (it committed before the BEGIN), and the next
  // borrower would get it (the fuzzer's finding, 2026-12-07).
  Harness h;
  h.StartUnit(QueryBytes("SET work_mem = '7MB'") + QueryBytes("BEGIN"));
  h.Origin(Complete("SET") + Ready('I') + Complete("BEGIN") + Ready('T'));
  (void)h.Take();
  h.Client(Terminate());
  CHECK(h.Take().Commands().find("release(close)") != std::string::npos);
}

}  // namespace
}  // namespace hyperpool::endpoint
