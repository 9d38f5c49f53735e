#include "endpoint/wal_feed_core.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include "protocol/frame_reader.h"

namespace hyperpool::endpoint {
namespace {

using namespace std::chrono_literals;
using Clock = WalFeedCore::Clock;
using protocol::Lsn;

std::string Int64(uint64_t v) {
  std::string out;
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(v >> shift));
  return out;
}
std::string XLog(Lsn at, std::string_view line) { return "w" + Int64(at) + Int64(at) + Int64(0) + std::string(line); }
std::string Keepalive(Lsn end, bool reply) { return "k" + Int64(end) + Int64(0) + std::string(1, reply ? 1 : 0); }

WalFeedCore Streaming(WalInvalidation mode, Clock::time_point now) {
  WalFeedCore::Options o;
  o.mode = mode;
  o.bound = 100ms;
  o.hard_limit = 1000ms;
  WalFeedCore core(o);
  core.Transition(WalFeedState::kStreaming, now);
  return core;
}

void Feed(WalFeedCore& core, Lsn at, std::string_view line, Clock::time_point now) {
  REQUIRE(core.OnCopyData(XLog(at, line), now).ok());
}

TEST_CASE("each commit's tables are handed over once, merged per burst") {
  const auto t = Clock::now();
  WalFeedCore core = Streaming(WalInvalidation::kOn, t);
  Feed(core, 100, "BEGIN", t);
  Feed(core, 110, "table public.a: INSERT: id[integer]:1", t);
  Feed(core, 120, "table public.a: UPDATE: id[integer]:1", t);
  REQUIRE_FALSE(core.TakeCommitted().any());  // not committed yet
  Feed(core, 130, "COMMIT", t);
  Feed(core, 140, "BEGIN", t);
  Feed(core, 150, "table public.b, public.\"C\": TRUNCATE: (no-flags)", t);
  Feed(core, 160, "COMMIT", t);
  FeedChanges c = core.TakeCommitted();
  REQUIRE_FALSE(c.all);
  REQUIRE(c.transactions == 2);
  REQUIRE(c.relations == std::vector<protocol::RelationName>{{"public", "a"}, {"public", "b"}, {"public", "C"}});
  REQUIRE_FALSE(core.TakeCommitted().any());
}

TEST_CASE("a commit that showed no row changed only the catalog: everything, and re-read the catalog") {
  const auto t = Clock::now();
  WalFeedCore core = Streaming(WalInvalidation::kOn, t);
  Feed(core, 100, "BEGIN", t);
  Feed(core, 200, "COMMIT", t);
  FeedChanges c = core.TakeCommitted();
  REQUIRE(c.all);
  REQUIRE(c.catalog);
}

TEST_CASE("a logical message alone invalidates nothing; an unreadable table line invalidates everything") {
  const auto t = Clock::now();
  WalFeedCore core = Streaming(WalInvalidation::kOn, t);
  Feed(core, 100, "BEGIN", t);
  Feed(core, 110, "message: transactional: 1 prefix: x, sz: 1 content:y", t);
  Feed(core, 120, "COMMIT", t);
  REQUIRE_FALSE(core.TakeCommitted().any());
  Feed(core, 130, "BEGIN", t);
  Feed(core, 140, "table nonsense", t);
  Feed(core, 150, "COMMIT", t);
  FeedChanges c = core.TakeCommitted();
  REQUIRE(c.all);
  REQUIRE_FALSE(c.catalog);
}

TEST_CASE("a malformed replication message is an error for the driver, not a crash") {
  WalFeedCore core = Streaming(WalInvalidation::kOn, Clock::now());
  REQUIRE_FALSE(core.OnCopyData("w123", Clock::now()).ok());
  REQUIRE_FALSE(core.OnCopyData("", Clock::now()).ok());
}

TEST_CASE("the gate: what each state and mode serves") {
  const auto t = Clock::now();
  auto mode = GENERATE(WalInvalidation::kAuto, WalInvalidation::kOn);
  WalFeedCore::Options o;
  o.mode = mode;
  WalFeedCore core(o);
  REQUIRE(core.state() == WalFeedState::kConnecting);
  // starting: on serves nothing until the feed is known fresh; auto works by
  // max age until the origin has shown it allows the feed
  REQUIRE(core.ServeCached(t) == (mode == WalInvalidation::kAuto));
  core.Transition(WalFeedState::kUnavailable, t);
  REQUIRE(core.ServeCached(t) == (mode == WalInvalidation::kAuto));  // auto falls back to max age
  REQUIRE(core.Budget(t) == (mode == WalInvalidation::kAuto ? std::chrono::milliseconds::max() : 0ms));
  core.Transition(WalFeedState::kStreaming, t);
  REQUIRE_FALSE(core.ServeCached(t));  // streaming, but no probe has resolved yet
  core.Transition(WalFeedState::kConnecting, t);
  REQUIRE_FALSE(core.ServeCached(t));  // a break after a stream: nothing, in either mode
  REQUIRE(core.Budget(t) == 0ms);
  WalFeedCore off(WalFeedCore::Options{});
  REQUIRE(off.state() == WalFeedState::kOff);
  REQUIRE(off.ServeCached(t));
}

TEST_CASE("fresh as of a probe once the stream passed its position and what came before was applied") {
  const auto t = Clock::now();
  WalFeedCore core = Streaming(WalInvalidation::kOn, t);
  REQUIRE_FALSE(core.AddProbe(t + 1ms, 500));
  REQUIRE_FALSE(core.ServeCached(t + 2ms));
  Feed(core, 400, "COMMIT", t + 2ms);  // a position short of the probe's
  core.MarkApplied(t + 2ms);
  REQUIRE_FALSE(core.ServeCached(t + 2ms));
  REQUIRE(core.OnCopyData(Keepalive(500, false), t + 3ms).ok());
  REQUIRE_FALSE(core.ServeCached(t + 3ms));  // seen, not yet applied
  core.MarkApplied(t + 3ms);
  REQUIRE(core.fresh_as_of() == t + 1ms);
  REQUIRE(core.ServeCached(t + 100ms));
  REQUIRE(core.Budget(t + 60ms) == 41ms);  // what a Client tier may keep a result for
  REQUIRE_FALSE(core.ServeCached(t + 101ms));  // the bound passed with no newer probe
  REQUIRE(core.Budget(t + 101ms) == 0ms);
  REQUIRE(core.Lag(t + 101ms) == 100ms);
  REQUIRE_FALSE(core.WillServe(t + 80ms, 25ms));  // the Client tiers are told that early
  // A probe the stream has already passed resolves at once.
  REQUIRE(core.AddProbe(t + 150ms, 450));
  REQUIRE(core.ServeCached(t + 160ms));
}

TEST_CASE("an insert position right after a page header counts from the page boundary") {
  const auto t = Clock::now();
  WalFeedCore core = Streaming(WalInvalidation::kOn, t);
  auto [insert, boundary] = GENERATE(table<Lsn, Lsn>({{0x2000 + 24, 0x2000}, {0x1000000 + 40, 0x1000000}}));
  REQUIRE(core.OnCopyData(Keepalive(boundary, false), t).ok());
  core.MarkApplied(t);
  REQUIRE(core.AddProbe(t + 1ms, insert));
  REQUIRE(core.ServeCached(t + 2ms));
}

TEST_CASE("a new stream forgets the old one's probes and freshness") {
  const auto t = Clock::now();
  WalFeedCore core = Streaming(WalInvalidation::kOn, t);
  REQUIRE(core.OnCopyData(Keepalive(500, false), t).ok());
  core.MarkApplied(t);
  REQUIRE(core.AddProbe(t, 400));
  REQUIRE(core.ServeCached(t + 1ms));
  core.Transition(WalFeedState::kConnecting, t + 2ms);
  REQUIRE_FALSE(core.ServeCached(t + 2ms));
  core.Transition(WalFeedState::kStreaming, t + 3ms);
  REQUIRE_FALSE(core.ServeCached(t + 3ms));
  REQUIRE_FALSE(core.AddProbe(t + 1ms, 1));  // started before this stream: ignored
  REQUIRE_FALSE(core.ServeCached(t + 4ms));
  REQUIRE(core.OverHardLimit(t + 1004ms));
}

TEST_CASE("acknowledgements: when the server asks, and at most every ack_every otherwise") {
  const auto t = Clock::now();
  WalFeedCore core = Streaming(WalInvalidation::kOn, t);
  std::string out;
  REQUIRE_FALSE(core.AppendAck(out, t, 0, false, false));  // nothing applied yet
  Feed(core, 100, "BEGIN", t);
  Feed(core, 150, "COMMIT", t);
  core.MarkApplied(t);
  REQUIRE(core.AppendAck(out, t, 0, false, false));  // the first is due at once
  out.clear();
  Feed(core, 160, "BEGIN", t);
  Feed(core, 200, "COMMIT", t);
  core.MarkApplied(t);
  REQUIRE_FALSE(core.AppendAck(out, t + 1ms, 0, false, false));  // too soon
  REQUIRE(core.AppendAck(out, t + 10ms, 0, false, false));
  protocol::FrameReader reader;
  auto r = reader.Read(out);
  REQUIRE(r.is_frame());
  REQUIRE(r.frame().payload.substr(1, 8) == Int64(200));
  out.clear();
  REQUIRE(core.OnCopyData(Keepalive(300, true), t + 11ms).ok());  // not yet applied: still answered
  REQUIRE(core.AppendAck(out, t + 11ms, 0, false, false));  // asked for
}

}  // namespace
}  // namespace hyperpool::endpoint
