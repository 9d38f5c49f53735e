// Unit tests of the invalidation watch's pure parts (docs/architecture.md,
// "Invalidation"): the control messages' source, the watched Client tier's
// rules (src/client/client_cache.h) and the watch link's reader
// (src/client/invalidation_watch.h).

#include <catch2/catch_test_macros.hpp>

#include "cache/tier.h"
#include "client/client_cache.h"
#include "client/invalidation_watch.h"
#include "protocol/codec.h"

namespace hyperpool::client {
namespace {

constexpr uint64_t kA = 0xa1;  // two Endpoint instances
constexpr uint64_t kB = 0xb2;

cache::StoreControl Store(uint64_t source, uint64_t generation, std::vector<std::string> tables = {"public.t"}) {
  cache::StoreControl s;
  s.ttl = std::chrono::milliseconds(60000);
  s.generation = generation;
  s.tables = std::move(tables);
  s.source = source;
  return s;
}

cache::InvalidateControl Inv(uint64_t source, uint64_t generation, std::vector<std::string> tables = {"public.t"}) {
  cache::InvalidateControl i;
  i.generation = generation;
  i.tables = std::move(tables);
  i.source = source;
  return i;
}

std::string ControlPayload(const std::string& frame) { return frame.substr(5); }

TEST_CASE("the control messages carry their Endpoint's source; without one it is 0") {
  std::string s, i, old;
  cache::AppendControl(s, Store(kA, 7));
  cache::AppendControl(i, Inv(kB, 8));
  cache::AppendControl(old, Store(0, 7));
  auto ds = cache::DecodeControl(ControlPayload(s));
  auto di = cache::DecodeControl(ControlPayload(i));
  auto dold = cache::DecodeControl(ControlPayload(old));
  REQUIRE(ds);
  REQUIRE(di);
  REQUIRE(dold);
  CHECK(std::get<cache::StoreControl>(*ds).source == kA);
  CHECK(std::get<cache::StoreControl>(*ds).generation == 7);
  CHECK(std::get<cache::InvalidateControl>(*di).source == kB);
  CHECK(std::get<cache::StoreControl>(*dold).source == 0);
  // Anything but exactly 8 trailing bytes is malformed.
  CHECK_FALSE(cache::DecodeControl(ControlPayload(s) + "x").has_value());
}

TEST_CASE("a watched tier serves and stores nothing until subscribed") {
  ClientTier tier(CacheOptions{}, /*watched=*/true);
  tier.Store("k", "rows", Store(kA, 5), std::chrono::steady_clock::now());
  CHECK(tier.GetFresh("k") == nullptr);
  tier.Subscribe(kA, 5);
  tier.Store("k", "rows", Store(kA, 5), std::chrono::steady_clock::now());
  REQUIRE(tier.GetFresh("k") != nullptr);
  CHECK(tier.Stats().subscribed);
  CHECK(tier.Stats().refused_unwatched == 1);
}

TEST_CASE("a watched tier refuses results fetched before the subscription or from another Endpoint") {
  ClientTier tier(CacheOptions{}, /*watched=*/true);
  tier.Subscribe(kA, 10);
  tier.Store("before", "rows", Store(kA, 9), std::chrono::steady_clock::now());  // the fetch began before: an invalidation may have been missed
  tier.Store("other", "rows", Store(kB, 50), std::chrono::steady_clock::now());  // a session still on another Endpoint
  tier.Store("unsaid", "rows", Store(0, 50), std::chrono::steady_clock::now());
  tier.Store("ok", "rows", Store(kA, 10), std::chrono::steady_clock::now());
  CHECK(tier.GetFresh("before") == nullptr);
  CHECK(tier.GetFresh("other") == nullptr);
  CHECK(tier.GetFresh("unsaid") == nullptr);
  CHECK(tier.GetFresh("ok") != nullptr);
  CHECK(tier.Stats().refused_unwatched == 3);
}

TEST_CASE("losing the watch drops everything and refuses until subscribed again") {
  ClientTier tier(CacheOptions{}, /*watched=*/true);
  tier.Subscribe(kA, 1);
  tier.Store("k", "rows", Store(kA, 1), std::chrono::steady_clock::now());
  REQUIRE(tier.GetFresh("k") != nullptr);
  tier.Unsubscribe();
  CHECK(tier.GetFresh("k") == nullptr);
  tier.Store("k", "rows", Store(kA, 1), std::chrono::steady_clock::now());
  CHECK(tier.GetFresh("k") == nullptr);
  // Subscribed to another Endpoint (moved): A's generations are forgotten,
  // B's results start at B's generation.
  tier.Subscribe(kB, 3);
  CHECK(tier.GetFresh("k") == nullptr);
  tier.Store("k", "rows", Store(kB, 3), std::chrono::steady_clock::now());
  CHECK(tier.GetFresh("k") != nullptr);
  CHECK(tier.Stats().subscriptions == 2);
}

TEST_CASE("an invalidation from another Endpoint drops entries but records no generation") {
  ClientTier tier(CacheOptions{}, /*watched=*/true);
  tier.Subscribe(kA, 1);
  tier.Store("k", "rows", Store(kA, 2), std::chrono::steady_clock::now());
  tier.Invalidate(Inv(kB, 100));  // B's numbers: not comparable with A's
  CHECK(tier.GetFresh("k") == nullptr);
  tier.Store("k", "rows", Store(kA, 3), std::chrono::steady_clock::now());  // would be refused had 100 been recorded
  CHECK(tier.GetFresh("k") != nullptr);
  // The subscribed Endpoint's own invalidation is recorded: a result whose
  // fetch began before it is refused, whatever the arrival order.
  tier.Invalidate(Inv(kA, 5));
  CHECK(tier.GetFresh("k") == nullptr);
  tier.Store("k", "rows", Store(kA, 4), std::chrono::steady_clock::now());
  CHECK(tier.GetFresh("k") == nullptr);
  tier.Store("k", "rows", Store(kA, 5), std::chrono::steady_clock::now());
  CHECK(tier.GetFresh("k") != nullptr);
}

TEST_CASE("an unwatched tier keeps its old rules (any source, no subscription)") {
  ClientTier tier(CacheOptions{});
  tier.Store("k", "rows", Store(0, 1), std::chrono::steady_clock::now());
  CHECK(tier.GetFresh("k") != nullptr);
  tier.Invalidate(Inv(0, 2));
  CHECK(tier.GetFresh("k") == nullptr);
  tier.Store("k", "rows", Store(0, 1), std::chrono::steady_clock::now());
  CHECK(tier.GetFresh("k") == nullptr);  // refused_stale
  CHECK(tier.Stats().refused_stale == 1);
}

std::string Answer(std::string_view source, std::string_view generation) {
  std::string out;
  protocol::Encode(protocol::ParameterStatus{cache::kWatchSourceParam, source}, out);
  protocol::Encode(protocol::ParameterStatus{cache::kWatchGenerationParam, generation}, out);
  protocol::AppendFrame(out, 'Z', "I");
  return out;
}

TEST_CASE("the watch reader: answer, invalidations, heartbeats, split anywhere") {
  std::string bytes = Answer("161", "42");
  cache::AppendControl(bytes, Inv(161, 43, {"public.a", "public.b"}));
  cache::AppendControl(bytes, Store(161, 43));  // not sent on a watch: ignored
  protocol::AppendFrame(bytes, 'Z', "I");
  for (size_t split = 0; split <= bytes.size(); ++split) {
    WatchReader reader;
    std::vector<WatchReader::Event> events;
    std::string buffer = bytes.substr(0, split);
    reader.Feed(buffer, events);
    buffer += bytes.substr(split);
    reader.Feed(buffer, events);
    CHECK(buffer.empty());
    REQUIRE(events.size() == 3);
    CHECK(events[0].kind == WatchReader::Event::Kind::kSubscribed);
    CHECK(events[0].source == 161);
    CHECK(events[0].generation == 42);
    CHECK(events[1].kind == WatchReader::Event::Kind::kInvalidate);
    CHECK(events[1].invalidate.tables == std::vector<std::string>{"public.a", "public.b"});
    CHECK(events[1].invalidate.generation == 43);
    CHECK(events[2].kind == WatchReader::Event::Kind::kHeartbeat);
  }
}

TEST_CASE("the watch reader: an Endpoint that answers link-ready, an error or garbage fails the watch") {
  const std::string link_ready = [] {
    std::string out;
    protocol::Encode(protocol::ParameterStatus{"server_version", "15.8"}, out);
    protocol::AppendFrame(out, 'Z', "I");
    return out;
  }();
  std::string error;
  protocol::EncodeErrorResponse(error, "FATAL", "08P01", "no");
  std::string bad_source = Answer("0", "1");
  std::string wrong_tag = Answer("9", "1");
  protocol::AppendFrame(wrong_tag, 'D', "");
  for (const std::string& input : {link_ready, error, bad_source, wrong_tag, std::string("h\0\0\0\5I", 6)}) {
    WatchReader reader;
    std::vector<WatchReader::Event> events;
    std::string buffer = input;
    reader.Feed(buffer, events);
    REQUIRE_FALSE(events.empty());
    CHECK(events.back().kind == WatchReader::Event::Kind::kError);
    CHECK(buffer.empty());
    // Nothing more is read after the error.
    std::string more = Answer("5", "5");
    events.clear();
    reader.Feed(more, events);
    CHECK(events.empty());
  }
}

TEST_CASE("the watch hello names the watch and the Client") {
  std::string hello = BuildWatchHello("00ff");
  protocol::FrameReader reader(protocol::FrameReader::Mode::kStartup);
  auto r = reader.Read(hello);
  REQUIRE(r.is_frame());
  auto packet = protocol::DecodeStartupPacket(r.frame().payload);
  REQUIRE(packet.ok());
  const auto& params = std::get<protocol::StartupMessage>(*packet).parameters;
  REQUIRE(params.size() == 2);
  CHECK(std::string(params[0].first) == cache::kWatchParam);
  CHECK(std::string(params[0].second) == "1");
  CHECK(std::string(params[1].first) == "hyperpool.client_id");
  CHECK(std::string(params[1].second) == "00ff");
}

}  // namespace
}  // namespace hyperpool::client
