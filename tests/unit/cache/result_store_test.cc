#include "cache/result_store.h"

#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "protocol/codec.h"

namespace hyperpool::cache {
namespace {

namespace p = hyperpool::protocol;

std::string Frame(const p::BackendMessage& m) {
  std::string out;
  p::Encode(m, out);
  return out;
}
std::string RowDesc(int16_t format = p::kFormatText) {
  p::RowDescription rd;
  rd.fields.push_back(p::FieldDescription{"id", 1234, 1, 23, 4, -1, format});
  rd.fields.push_back(p::FieldDescription{"name", 1234, 2, 25, -1, -1, format});
  return Frame(rd);
}
std::string Row(int i) {
  std::string out;
  std::string id = std::to_string(i);
  std::vector<p::NullableValue> cols = {id, std::nullopt};
  p::EncodeDataRow(cols, out);
  return out;
}
std::string Tags(std::string_view bytes) {
  std::string tags;
  p::FrameReader reader;
  while (!bytes.empty()) {
    p::FrameReader::Result r = reader.Read(bytes);
    REQUIRE(r.is_frame());
    tags.push_back(r.frame().tag);
    bytes.remove_prefix(r.frame().size());
  }
  return tags;
}

// Feeds every frame of `stream` into a capture.
ResultCapture::State FeedAll(ResultCapture& c, std::string_view stream) {
  p::FrameReader reader;
  ResultCapture::State s = c.state();
  while (!stream.empty()) {
    p::FrameReader::Result r = reader.Read(stream);
    REQUIRE(r.is_frame());
    s = c.Feed(r.frame().tag, r.frame().raw);
    stream.remove_prefix(r.frame().size());
  }
  return s;
}

const std::string kZ = Frame(p::ReadyForQuery{p::TransactionStatus::kIdle});
const std::string kC = Frame(p::CommandComplete{"SELECT 2"});

TEST_CASE("capture outcomes") {
  using R = ResultCapture::Reject;
  struct Case {
    std::string name;
    std::string stream;
    R reject;  // kNone = complete
    std::string stored_tags;
  };
  std::string rows = Row(1) + Row(2);
  auto c = GENERATE_COPY(values<Case>({
      {"simple", RowDesc() + rows + kC + kZ, R::kNone, "TDDC"},
      {"extended with describe portal",
       Frame(p::ParseComplete{}) + Frame(p::BindComplete{}) + RowDesc() + rows + kC + kZ, R::kNone,
       "TDDC"},
      {"extended with describe statement",
       Frame(p::ParseComplete{}) + Frame(p::ParameterDescription{{23}}) + RowDesc() +
           Frame(p::BindComplete{}) + rows + kC + kZ,
       R::kNone, "tTDDC"},
      {"extended without describe", Frame(p::BindComplete{}) + rows + kC + kZ, R::kNone, "DDC"},
      {"no rows", RowDesc() + Frame(p::CommandComplete{"SELECT 0"}) + kZ, R::kNone, "TC"},
      {"notification ignored", RowDesc() + Frame(p::NotificationResponse{1, "c", "x"}) + rows + kC + kZ,
       R::kNone, "TDDC"},
      {"error", RowDesc() + Row(1) + Frame(p::ErrorResponse{}) + kZ, R::kError, ""},
      {"notice", Frame(p::NoticeResponse{}) + RowDesc() + rows + kC + kZ, R::kNotice, ""},
      {"parameter status", RowDesc() + rows + kC + Frame(p::ParameterStatus{"TimeZone", "UTC"}) + kZ,
       R::kParameterStatus, ""},
      {"portal suspended", RowDesc() + rows + Frame(p::PortalSuspended{}) + kZ, R::kSuspended, ""},
      {"empty query", Frame(p::EmptyQueryResponse{}) + kZ, R::kEmptyQuery, ""},
      {"two results", RowDesc() + rows + kC + RowDesc() + kC + kZ, R::kMultipleResults, ""},
      {"in transaction", RowDesc() + rows + kC + Frame(p::ReadyForQuery{p::TransactionStatus::kInBlock}),
       R::kNotIdle, ""},
      {"ready without complete", RowDesc() + rows + kZ, R::kUnexpected, ""},
      {"copy", Frame(p::CopyOutResponse{}) + kC + kZ, R::kUnexpected, ""},
  }));
  INFO(c.name);
  ResultCapture cap(1 << 20);
  ResultCapture::State s = FeedAll(cap, c.stream);
  if (c.reject == R::kNone) {
    REQUIRE(s == ResultCapture::State::kComplete);
    CHECK(Tags(cap.TakeMessages()) == c.stored_tags);
  } else {
    CHECK(s == ResultCapture::State::kRejected);
    CHECK(cap.reject_reason() == c.reject);
    CHECK(cap.TakeMessages().empty());
  }
}

TEST_CASE("capture stops at max bytes") {
  std::string head = RowDesc() + Row(1);
  ResultCapture cap(head.size() + 3);
  CHECK(FeedAll(cap, head) == ResultCapture::State::kCapturing);
  CHECK(FeedAll(cap, Row(2)) == ResultCapture::State::kRejected);
  CHECK(cap.reject_reason() == ResultCapture::Reject::kOversized);
  CHECK(RejectName(cap.reject_reason()) == "oversizedresult");
  CHECK(FeedAll(cap, kC + kZ) == ResultCapture::State::kRejected);
}

std::string Stored(bool param_desc, bool row_desc) {
  std::string s;
  if (param_desc) s += Frame(p::ParameterDescription{{23}});
  if (row_desc) s += RowDesc(p::kFormatBinary);
  return s + Row(1) + Row(2) + kC;
}

TEST_CASE("replay produces the messages the client's request calls for") {
  using D = ReplayRequest::Describe;
  struct Case {
    std::string name;
    ReplayRequest req;
    bool param_desc, row_desc;
    std::string tags;  // "" = FailedPrecondition
  };
  auto c = GENERATE(values<Case>({
      {"simple", {ProtocolForm::kSimple}, false, true, "TDDCZ"},
      {"simple without RowDescription", {ProtocolForm::kSimple}, false, false, ""},
      {"parse bind describe-portal execute sync",
       {ProtocolForm::kExtended, true, true, D::kPortal, true, true}, false, true, "12TDDCZ"},
      {"bind execute sync", {ProtocolForm::kExtended, false, true, D::kNone, true, true}, false,
       false, "2DDCZ"},
      {"describe statement",
       {ProtocolForm::kExtended, true, true, D::kStatement, true, true}, true, true, "1tT2DDCZ"},
      {"describe statement without ParameterDescription",
       {ProtocolForm::kExtended, true, true, D::kStatement, true, true}, false, true, ""},
      {"describe portal without RowDescription",
       {ProtocolForm::kExtended, false, true, D::kPortal, true, true}, false, false, ""},
      {"no sync (Flush)", {ProtocolForm::kExtended, false, true, D::kPortal, true, false}, true,
       true, "2TDDC"},
  }));
  INFO(c.name);
  std::string stored = Stored(c.param_desc, c.row_desc);
  std::string out = "x";
  absl::Status st = AppendReplay(stored, c.req, out);
  if (c.tags.empty()) {
    CHECK(absl::IsFailedPrecondition(st));
    CHECK(out == "x");  // nothing half-written
  } else {
    REQUIRE(st.ok());
    CHECK(Tags(std::string_view(out).substr(1)) == c.tags);
  }
}

TEST_CASE("a limited Execute is answered as PostgreSQL answers it") {
  // Two stored rows; PostgreSQL suspends once the limit is reached.
  auto [limit, tags] = GENERATE(table<int32_t, std::string>({
      {0, "2DDCZ"}, {1, "2DsZ"}, {2, "2DDsZ"}, {3, "2DDCZ"}, {100, "2DDCZ"}}));
  CAPTURE(limit);
  ReplayRequest req{ProtocolForm::kExtended, false, true, ReplayRequest::Describe::kNone, true, true};
  req.max_rows = limit;
  std::string out;
  REQUIRE(AppendReplay(Stored(false, false), req, out).ok());
  CHECK(Tags(out) == tags);
  std::string empty;  // no rows: complete within any limit
  REQUIRE(AppendReplay(kC, req, empty).ok());
  CHECK(Tags(empty) == "2CZ");
}

TEST_CASE("replayed rows are the captured bytes, and Z is idle") {
  std::string stream = RowDesc() + Row(7) + kC + kZ;
  ResultCapture cap(1 << 20);
  REQUIRE(FeedAll(cap, stream) == ResultCapture::State::kComplete);
  std::string stored = cap.TakeMessages();
  std::string out;
  REQUIRE(AppendReplay(stored, ReplayRequest{}, out).ok());
  CHECK(out == stream);
}

TEST_CASE("describe statement replay zeroes result format codes") {
  std::string stored = Stored(true, true);
  std::string out;
  ReplayRequest req{ProtocolForm::kExtended, false, false, ReplayRequest::Describe::kStatement,
                    false, false};
  REQUIRE(AppendReplay(stored, req, out).ok());
  p::FrameReader reader;
  std::string_view rest = out;
  rest.remove_prefix(reader.Read(rest).frame().size());  // ParameterDescription
  p::FrameReader::Result r = reader.Read(rest);
  REQUIRE(r.is_frame());
  REQUIRE(r.frame().tag == 'T');
  absl::StatusOr<p::RowDescription> rd = p::DecodeRowDescription(r.frame().payload);
  REQUIRE(rd.ok());
  REQUIRE(rd->fields.size() == 2);
  for (const auto& f : rd->fields) CHECK(f.format == p::kFormatText);
  CHECK(rd->fields[1].name == "name");
}

TEST_CASE("SplitStored rejects garbage") {
  auto s = GENERATE(as<std::string>{}, "", "Zxxxx", "T\0\0\0\4");
  CHECK_FALSE(SplitStored(s).ok());
}

}  // namespace
}  // namespace hyperpool::cache
