#include "protocol/logical_replication.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "protocol/frame_reader.h"

namespace hyperpool::protocol {
namespace {

using namespace std::literals;
using Kind = TestDecodingLine::Kind;

std::string Int64(uint64_t v) {
  std::string out;
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(v >> shift));
  return out;
}

TEST_CASE("LSNs parse and format as PostgreSQL writes them") {
  auto [text, value] = GENERATE(table<std::string, Lsn>({
      {"0/0", 0},
      {"0/194DFA0", 0x194DFA0},
      {"16/B374D848", (Lsn{0x16} << 32) | 0xB374D848},
      {"FFFFFFFF/FFFFFFFF", ~Lsn{0}},
  }));
  REQUIRE(ParseLsn(text) == value);
  REQUIRE(FormatLsn(value) == text);
}

TEST_CASE("malformed LSNs are refused") {
  auto text = GENERATE("", "0", "/1", "1/", "G/1", "1/123456789", "1/2/3", "-1/0");
  REQUIRE_FALSE(ParseLsn(text).has_value());
}

TEST_CASE("XLogData carries its WAL positions and the plugin's bytes") {
  std::string payload = "w" + Int64(0x1950B60) + Int64(0x1950B60) + Int64(12345) + "COMMIT";
  auto m = DecodeReplicationMessage(payload);
  REQUIRE(m.ok());
  const auto& x = std::get<XLogData>(*m);
  REQUIRE(x.wal_start == 0x1950B60);
  REQUIRE(x.wal_end == 0x1950B60);
  REQUIRE(x.send_time == 12345);
  REQUIRE(x.data == "COMMIT");
}

TEST_CASE("a primary keepalive says how far the walsender is and whether to answer") {
  auto reply = GENERATE(0, 1);
  std::string payload = "k" + Int64(0x2000000) + Int64(7) + std::string(1, static_cast<char>(reply));
  auto m = DecodeReplicationMessage(payload);
  REQUIRE(m.ok());
  const auto& k = std::get<PrimaryKeepalive>(*m);
  REQUIRE(k.wal_end == 0x2000000);
  REQUIRE(k.send_time == 7);
  REQUIRE(k.reply_requested == (reply == 1));
}

TEST_CASE("short, long or unknown replication messages are errors, not crashes") {
  auto payload = GENERATE(""s, "w"s, "w" + Int64(1) + Int64(2), "k" + Int64(1) + Int64(2),
                          "k" + Int64(1) + Int64(2) + "\1\1", "x123"s);
  REQUIRE_FALSE(DecodeReplicationMessage(payload).ok());
}

TEST_CASE("a standby status update is one CopyData frame the server can read") {
  std::string out;
  AppendStandbyStatusUpdate(out, 0x1950B60, 99, true);
  FrameReader reader;
  FrameReader::Result r = reader.Read(out);
  REQUIRE(r.is_frame());
  REQUIRE(r.frame().size() == out.size());
  REQUIRE(r.frame().tag == 'd');
  REQUIRE(r.frame().payload == "r" + Int64(0x1950B60) + Int64(0x1950B60) + Int64(0x1950B60) + Int64(99) + "\1");
}

TEST_CASE("test_decoding lines: transaction bounds") {
  auto [line, kind] = GENERATE(table<std::string, Kind>({
      {"BEGIN", Kind::kBegin},
      {"BEGIN 734", Kind::kBegin},
      {"COMMIT", Kind::kCommit},
      {"COMMIT 734 (at 2026-12-05 16:00:00+00)", Kind::kCommit},
      {"message: transactional: 1 prefix: hp, sz: 2 content:m1", Kind::kMessage},
      {"BEGINNING", Kind::kOther},
      {"something new", Kind::kOther},
  }));
  auto l = ParseTestDecodingLine(line);
  REQUIRE(l.ok());
  REQUIRE(l->kind == kind);
  REQUIRE(l->relations.empty());
}

TEST_CASE("test_decoding lines: changed relations, quoted as quote_identifier quotes") {
  auto [line, kind, rels] = GENERATE(table<std::string, Kind, std::vector<RelationName>>({
      {"table public.t: INSERT: id[integer]:1 v[text]:'a'", Kind::kChange, {{"public", "t"}}},
      {"table public.t: UPDATE: id[integer]:1", Kind::kChange, {{"public", "t"}}},
      {"table app.part1: DELETE: a[integer]:5", Kind::kChange, {{"app", "part1"}}},
      {"table public.\"My T\": INSERT: a[integer]:1", Kind::kChange, {{"public", "My T"}}},
      {"table \"a.b\".\"x: y, \"\"z\"\"\": INSERT: a[integer]:1", Kind::kChange, {{"a.b", "x: y, \"z\""}}},
      {"table public.t: UPDATE: old-key: id[integer]:1 new-tuple: id[integer]:2", Kind::kChange, {{"public", "t"}}},
      {"table public.t, public.\"My T\": TRUNCATE: (no-flags)", Kind::kTruncate,
       {{"public", "t"}, {"public", "My T"}}},
      {"table s.a, s.b, s.c: TRUNCATE: restart_seqs cascade", Kind::kTruncate, {{"s", "a"}, {"s", "b"}, {"s", "c"}}},
  }));
  auto l = ParseTestDecodingLine(line);
  REQUIRE(l.ok());
  REQUIRE(l->kind == kind);
  REQUIRE(l->relations == rels);
}

TEST_CASE("test_decoding table lines whose names cannot be read are errors") {
  auto line = GENERATE("table t: INSERT: a[integer]:1", "table public.\"open: INSERT:", "table public.t INSERT",
                       "table .t: INSERT:", "table public.: INSERT:", "table public.t, : TRUNCATE:");
  REQUIRE_FALSE(ParseTestDecodingLine(line).ok());
}

}  // namespace
}  // namespace hyperpool::protocol
