// EndpointSet with a Placement plug-in (FailoverOptions::placement): two
// Endpoint stand-ins behind real LinkListeners (TLS, link secret) answer
// probes; a recording double observes each probe round and chooses the
// Endpoint new sessions go to, over the built-in ranking's choice.
#include "client/endpoint_set.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <catch2/catch_test_macros.hpp>

#include "hyperpool/placement.h"
#include "hyperpool/transport.h"
#include "protocol/codec.h"
#include "protocol/link_protocol.h"
#include "support/io_worker.h"
#include "support/pg_fixture.h"

namespace hyperpool::client {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
constexpr char kSecret[] = "correct horse battery staple, twice";

const hyperpool::testing::TestCerts& Certs() { return hyperpool::testing::SharedTestCerts(); }

using Worker = testing::IoWorker;

// An Endpoint stand-in: answers placement probes (an origin round trip of
// 1 ms) and counts the session links it is given.
class ProbeAnswering final : public LinkAcceptor {
 public:
  explicit ProbeAnswering(asio::any_io_executor executor) : executor_(std::move(executor)) {}
  void Accept(std::unique_ptr<Link> link) override {
    std::shared_ptr<Link> l(std::move(link));
    asio::co_spawn(
        executor_,
        [this, l]() -> asio::awaitable<void> {
          std::string buf;
          auto n = co_await l->Receive(buf);
          if (!n.ok()) co_return;
          if (buf.find(std::string(link::kProbeParam)) != std::string::npos) {
            std::string answer;
            protocol::Encode(protocol::ParameterStatus{link::kOriginRttParam, "1000"}, answer);
            protocol::Encode(protocol::ReadyForQuery{protocol::TransactionStatus::kIdle}, answer);
            (void)co_await l->Send(std::move(answer));
            co_return;
          }
          {
            std::lock_guard lock(mu_);
            ++sessions_;
          }
          cv_.notify_all();
        },
        asio::detached);
  }
  int sessions() {
    std::lock_guard lock(mu_);
    return sessions_;
  }

 private:
  asio::any_io_executor executor_;
  std::mutex mu_;
  std::condition_variable cv_;
  int sessions_ = 0;
};

// The plug-in double: records what it observed and always chooses `pick`.
class RecordingPlacement final : public Placement {
 public:
  explicit RecordingPlacement(std::string pick) : pick_(std::move(pick)) {}
  absl::StatusOr<EndpointAddress> Choose(const std::string& origin_key) override {
    std::lock_guard lock(mu_);
    keys_.push_back(origin_key);
    return EndpointAddress{pick_, pick_};
  }
  void Observe(const std::vector<EndpointMeasurement>& round) override {
    std::lock_guard lock(mu_);
    rounds_.push_back(round);
  }
  std::vector<std::vector<EndpointMeasurement>> rounds() {
    std::lock_guard lock(mu_);
    return rounds_;
  }
  std::vector<std::string> keys() {
    std::lock_guard lock(mu_);
    return keys_;
  }

 private:
  std::string pick_;
  std::mutex mu_;
  std::vector<std::vector<EndpointMeasurement>> rounds_;
  std::vector<std::string> keys_;
};

TEST_CASE("a placement plug-in observes every probe round and its choice gets the new sessions") {
  Worker endpoints;
  ProbeAnswering a(endpoints.io.get_executor());
  ProbeAnswering b(endpoints.io.get_executor());
  LinkListenerOptions lo;
  lo.tls_cert_file = Certs().server_cert;
  lo.tls_key_file = Certs().server_key;
  lo.link_secret = kSecret;
  auto la = MakeLinkListener(endpoints.io.get_executor(), a, lo);
  auto lb = MakeLinkListener(endpoints.io.get_executor(), b, lo);
  REQUIRE(la.ok());
  REQUIRE(lb.ok());
  const std::string b_address = "127.0.0.1:" + std::to_string((*lb)->port());

  Worker client;
  SocketTransportOptions link;
  link.tls_ca_file = Certs().ca_cert;
  link.link_secret = kSecret;
  link.preopen = 0;
  FailoverOptions failover;
  failover.endpoints = {{"127.0.0.1", (*la)->port()}, {"127.0.0.1", (*lb)->port()}};
  failover.region = "test-region";
  failover.probe_interval = milliseconds(100);
  failover.first_round_wait = seconds(10);
  auto placement = std::make_shared<RecordingPlacement>(b_address);
  failover.placement = placement;
  auto set = MakeEndpointSet({client.io.get_executor()}, link, failover);
  REQUIRE(set.ok());

  // After the first round (MakeEndpointSet waited for it) the plug-in has
  // seen both Endpoints measured and chose B.
  REQUIRE_FALSE(placement->rounds().empty());
  const std::vector<EndpointMeasurement> first = placement->rounds().front();
  REQUIRE(first.size() == 2);
  CHECK(first[0].status.ok());
  CHECK(first[1].status.ok());
  CHECK(first[1].endpoint.address == b_address);
  CHECK(placement->keys().front() == "test-region");

  // New sessions go to B, whatever the ranking would have preferred.
  for (int i = 0; i < 3; ++i) {
    auto opened = asio::co_spawn(client.io, (*set)->Open(client.io.get_executor(), std::string("hello")),
                                 asio::use_future);
    REQUIRE(opened.wait_for(seconds(10)) == std::future_status::ready);
    auto l = opened.get();
    REQUIRE(l.ok());
    (*l)->Close();
  }
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (b.sessions() < 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(milliseconds(5));
  CHECK(b.sessions() == 3);
  CHECK(a.sessions() == 0);
  (*set)->Stop();
  (*la)->Stop();
  (*lb)->Stop();
}

}  // namespace
}  // namespace hyperpool::client
