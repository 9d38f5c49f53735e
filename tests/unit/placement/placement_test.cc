// Placement: the probe answer parser, the latency choice, and a probe over
// an in-process link to a scripted Endpoint.

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <catch2/catch_test_macros.hpp>

#include "hyperpool/placement.h"
#include "hyperpool/transport.h"
#include "placement/probe.h"
#include "protocol/codec.h"

namespace hyperpool {
namespace {

using namespace std::chrono_literals;

std::string Answer(std::string_view rtt) {
  std::string out;
  protocol::Encode(protocol::ParameterStatus{placement::kOriginRttParam, rtt}, out);
  protocol::Encode(protocol::ReadyForQuery{protocol::TransactionStatus::kIdle}, out);
  return out;
}

TEST_CASE("the probe answer is read across partial deliveries") {
  const std::string whole = Answer("1234");
  std::string buffer;
  placement::ProbeAnswer answer;
  for (std::size_t i = 0; i + 1 < whole.size(); ++i) {
    buffer.push_back(whole[i]);
    auto done = placement::ParseProbeAnswer(buffer, answer);
    REQUIRE(done.ok());
    REQUIRE_FALSE(*done);
  }
  buffer.push_back(whole.back());
  auto done = placement::ParseProbeAnswer(buffer, answer);
  REQUIRE(done.ok());
  CHECK(*done);
  CHECK(answer.origin_rtt == 1234us);
  CHECK(buffer.empty());
}

TEST_CASE("bad probe answers are errors, never a measurement") {
  placement::ProbeAnswer answer;
  std::string err;
  protocol::EncodeErrorResponse(err, "FATAL", "28P01", "password authentication failed");
  auto r = placement::ParseProbeAnswer(err, answer);
  REQUIRE_FALSE(r.ok());
  CHECK(std::string(r.status().message()).find("28P01") != std::string::npos);

  std::string no_rtt;
  protocol::Encode(protocol::ReadyForQuery{protocol::TransactionStatus::kIdle}, no_rtt);
  CHECK_FALSE(placement::ParseProbeAnswer(no_rtt, answer).ok());

  for (std::string bad : {"12x", "-5", "", "99999999999999999999999"}) {
    std::string b = Answer(bad);
    placement::ProbeAnswer a;
    CHECK_FALSE(placement::ParseProbeAnswer(b, a).ok());
  }
  std::string absurd = "S";
  absurd += std::string("\x7f\xff\xff\xff", 4);
  CHECK_FALSE(placement::ParseProbeAnswer(absurd, answer).ok());
}

EndpointMeasurement Measured(std::string name, long client_us, long origin_us) {
  EndpointMeasurement m;
  m.endpoint = {name, name + ":5000"};
  m.client_rtt = std::chrono::microseconds(client_us);
  m.origin_rtt = std::chrono::microseconds(origin_us);
  return m;
}

TEST_CASE("latency placement picks the lowest client + weighted origin round trip") {
  // Near the app but far from the origin, vs far from the app but beside the origin.
  auto p = MakeLatencyPlacement({Measured("near-app", 1000, 80000), Measured("near-origin", 60000, 500)});
  auto chosen = p->Choose("db");
  REQUIRE(chosen.ok());
  CHECK(chosen->name == "near-origin");
  // With equal origin distance the closer one wins; ties keep the order.
  p = MakeLatencyPlacement({Measured("a", 5000, 1000), Measured("b", 3000, 1000), Measured("c", 3000, 1000)});
  CHECK(p->Choose("db")->name == "b");
  // The weight matters: at 0 only the client side counts.
  p = MakeLatencyPlacement({Measured("near-app", 1000, 80000), Measured("near-origin", 60000, 500)}, 0.0);
  CHECK(p->Choose("db")->name == "near-app");
}

TEST_CASE("latency placement never picks an Endpoint it could not measure") {
  EndpointMeasurement down = Measured("down", 1, 1);
  down.status = absl::UnavailableError("connection refused");
  auto p = MakeLatencyPlacement({down, Measured("up", 90000, 90000)});
  CHECK(p->Choose("db")->name == "up");
  p = MakeLatencyPlacement({down});
  auto none = p->Choose("db");
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(none.status().message()).find("down") != std::string::npos);
  CHECK(std::string(none.status().message()).find("connection refused") != std::string::npos);
  CHECK_FALSE(MakeLatencyPlacement({})->Choose("db").ok());
}

// Answers every probe link with a fixed origin round trip (or closes it).
class ScriptedEndpoint final : public LinkAcceptor {
 public:
  ScriptedEndpoint(asio::any_io_executor executor, std::string answer, bool silent = false)
      : executor_(std::move(executor)), answer_(std::move(answer)), silent_(silent) {}
  void Accept(std::unique_ptr<Link> link) override {
    std::shared_ptr<Link> shared(std::move(link));
    asio::co_spawn(executor_, Serve(shared, answer_), asio::detached);
  }
  std::string received;

 private:
  asio::awaitable<void> Serve(std::shared_ptr<Link> link, std::string answer) {
    std::string buffer;
    protocol::FrameReader reader(protocol::FrameReader::Mode::kStartup);
    for (;;) {
      auto r = reader.Read(buffer);
      if (r.is_frame()) break;
      if (r.is_error()) co_return;
      if (!(co_await link->Receive(buffer)).ok()) co_return;
    }
    received = buffer;
    if (silent_) {
      // Keeps the link open without a word until the prober closes it.
      while ((co_await link->Receive(buffer)).ok()) {
      }
      co_return;
    }
    if (!answer.empty()) (void)co_await link->Send(answer);
    link->Close();
  }
  asio::any_io_executor executor_;
  std::string answer_;
  bool silent_;
};

EndpointMeasurement Measure(asio::io_context& io, Transport& transport,
                            std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
  auto future = asio::co_spawn(io, MeasureEndpoint(io.get_executor(), transport, {"e1", "in-process"}, timeout),
                               asio::use_future);
  io.run();
  io.restart();
  return future.get();
}

TEST_CASE("MeasureEndpoint times a probe link and reads the Endpoint's origin round trip") {
  asio::io_context io;
  ScriptedEndpoint endpoint(io.get_executor(), Answer("4321"));
  auto transport = MakeInProcessTransport(endpoint);
  EndpointMeasurement m = Measure(io, *transport);
  REQUIRE(m.status.ok());
  CHECK(m.origin_rtt == 4321us);
  CHECK(m.client_rtt > 0us);
  CHECK(m.endpoint.name == "e1");
  // The probe hello carries hyperpool.probe=1 and nothing else.
  protocol::FrameReader reader(protocol::FrameReader::Mode::kStartup);
  auto frame = reader.Read(endpoint.received);
  REQUIRE(frame.is_frame());
  CHECK(frame.frame().size() == endpoint.received.size());
  auto hello = protocol::DecodeStartupPacket(frame.frame().payload);
  REQUIRE(hello.ok());
  const auto& startup = std::get<protocol::StartupMessage>(*hello);
  REQUIRE(startup.parameters.size() == 1);
  CHECK(startup.Find(placement::kProbeParam) == std::optional<std::string_view>("1"));
}

TEST_CASE("MeasureEndpoint reports an Endpoint that closes without answering") {
  asio::io_context io;
  ScriptedEndpoint endpoint(io.get_executor(), "");
  auto transport = MakeInProcessTransport(endpoint);
  EndpointMeasurement m = Measure(io, *transport);
  CHECK_FALSE(m.status.ok());
}

TEST_CASE("MeasureEndpoint gives up on an Endpoint that accepts the probe but never answers") {
  asio::io_context io;
  ScriptedEndpoint endpoint(io.get_executor(), "", /*silent=*/true);
  auto transport = MakeInProcessTransport(endpoint);
  const auto start = std::chrono::steady_clock::now();
  EndpointMeasurement m = Measure(io, *transport, 50ms);  // returns only once the link is closed
  CHECK(m.status.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(std::chrono::steady_clock::now() - start >= 50ms);
  // A prompt answer is unaffected by the timeout (its timer is cancelled).
  ScriptedEndpoint answering(io.get_executor(), Answer("7"));
  auto t2 = MakeInProcessTransport(answering);
  EndpointMeasurement ok = Measure(io, *t2, 10000ms);
  REQUIRE(ok.status.ok());
  CHECK(ok.origin_rtt == 7us);
}

}  // namespace
}  // namespace hyperpool
