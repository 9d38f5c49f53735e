#include "client/endpoint_set.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "placement/endpoint_ranking.h"

namespace hyperpool::client {
namespace {

using Clock = std::chrono::steady_clock;
using placement::EndpointRanking;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

// Rounds never follow each other closer than this, however many links fail
// (a dead Endpoint makes every new session report it).
constexpr std::chrono::milliseconds kMinRoundGap{250};

std::string HostPort(const std::string& host, std::uint16_t port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

void Add(SocketTransportStats& sum, const SocketTransportStats& s) {
  sum.opened_preopened += s.opened_preopened;
  sum.opened_on_demand += s.opened_on_demand;
  sum.open_failures += s.open_failures;
  sum.preopen_ready += s.preopen_ready;
  sum.preopen_failures += s.preopen_failures;
  sum.preopen_expired += s.preopen_expired;
  sum.preopen_dead += s.preopen_dead;
}

std::vector<std::string> Addresses(const FailoverOptions& options) {
  std::vector<std::string> out;
  for (const auto& [host, port] : options.endpoints) out.push_back(HostPort(host, port));
  return out;
}

placement::RankingOptions RankingOptionsOf(const FailoverOptions& options) {
  placement::RankingOptions r;
  r.settle_probes = options.settle_probes;
  return r;
}

class Core : public std::enable_shared_from_this<Core> {
 public:
  Core(std::vector<asio::any_io_executor> executors, SocketTransportOptions link_options, FailoverOptions options)
      : executors_(std::move(executors)),
        link_options_(std::move(link_options)),
        options_(std::move(options)),
        ranking_(Addresses(options_), options_.region, RankingOptionsOf(options_)),
        strand_(asio::make_strand(executors_.front())),
        timer_(strand_) {}

  absl::Status Init() {
    for (std::size_t i = 0; i < options_.endpoints.size(); ++i) {
      Slot slot;
      slot.address = ranking_.address(i);
      absl::StatusOr<std::unique_ptr<SocketTransport>> direct = MakeTransport(i, 0);
      if (!direct.ok()) return direct.status();
      slot.direct = *std::move(direct);
      slots_.push_back(std::move(slot));
    }
    std::lock_guard lock(mu_);
    OpenAheadLocked(ranking_.in_use());
    Log(fmt::format("placement: chose endpoint {} ({})", ranking_.address(ranking_.in_use()), ranking_.reason()));
    return absl::OkStatus();
  }

  void Start() { asio::co_spawn(strand_, Run(shared_from_this()), asio::detached); }

  // Waits (bounded) for the first probe round.
  void WaitForFirstRound(std::chrono::milliseconds limit) {
    if (limit.count() > 0) first_round_future_.wait_for(limit);
  }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Link>>> Open(asio::any_io_executor executor,
                                                               std::string initial_bytes) {
    std::shared_ptr<Core> self = shared_from_this();  // outlives the set's owner while this runs
    if (stopped_.load()) co_return absl::UnavailableError("the link transport is stopped");
    std::vector<std::size_t> order;
    {
      std::lock_guard lock(mu_);
      order = ranking_.Order();
    }
    absl::Status first_failure;
    std::string failures;
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::size_t i = order[k];
      std::shared_ptr<SocketTransport> transport = TransportFor(i);
      // A copy for every attempt but the last (a hello and a few queries).
      std::string bytes = k + 1 < order.size() ? initial_bytes : std::move(initial_bytes);
      absl::StatusOr<std::unique_ptr<Link>> link = co_await transport->Open(executor, std::move(bytes));
      if (link.ok()) {
        if (k > 0) failovers_.fetch_add(1);
        co_return link;
      }
      if (stopped_.load()) co_return link.status();
      if (first_failure.ok()) first_failure = link.status();
      failures += fmt::format("{}{}", failures.empty() ? "" : "; ", std::string(link.status().message()));
      OnLinkFailure(i, link.status());
    }
    co_return absl::Status(first_failure.code(), fmt::format("no Endpoint could be reached: {}", failures));
  }

  void Stop() {
    if (stopped_.exchange(true)) return;
    {
      std::lock_guard lock(mu_);
      for (Slot& slot : slots_) {
        slot.direct->Stop();
        if (slot.ahead) slot.ahead->Stop();
      }
      for (auto& t : retired_) t->Stop();
    }
    asio::post(strand_, [self = shared_from_this()] { self->timer_.cancel(); });
  }

  std::uint64_t route() const { return route_.load(); }

  std::uint64_t AddRouteListener(std::function<void()> changed) {
    std::lock_guard lock(listeners_mu_);
    const std::uint64_t id = ++last_listener_;
    listeners_.emplace_back(id, std::move(changed));
    return id;
  }
  void RemoveRouteListener(std::uint64_t id) {
    std::lock_guard lock(listeners_mu_);
    std::erase_if(listeners_, [id](const auto& l) { return l.first == id; });
  }

  SocketTransportStats Stats() const {
    std::lock_guard lock(mu_);
    SocketTransportStats sum = retired_stats_;
    for (const Slot& slot : slots_) {
      Add(sum, slot.direct->Stats());
      if (slot.ahead) Add(sum, slot.ahead->Stats());
    }
    for (const auto& t : retired_) Add(sum, t->Stats());
    return sum;
  }

 private:
  struct Slot {
    std::string address;
    std::shared_ptr<SocketTransport> direct;  // nothing opened ahead: probes, failover
    std::shared_ptr<SocketTransport> ahead;   // links opened ahead: only while in use
  };

  absl::StatusOr<std::unique_ptr<SocketTransport>> MakeTransport(std::size_t i, std::size_t preopen) {
    SocketTransportOptions o = link_options_;
    o.host = options_.endpoints[i].first;
    o.port = options_.endpoints[i].second;
    o.preopen = preopen;
    if (preopen == 0) o.log = nullptr;  // failures are logged here, once per health change
    return MakeSocketTransport(executors_, std::move(o));
  }

  std::shared_ptr<SocketTransport> TransportFor(std::size_t i) {
    std::lock_guard lock(mu_);
    return slots_[i].ahead ? slots_[i].ahead : slots_[i].direct;
  }

  // Under mu_: links are opened ahead for `i` only.
  void OpenAheadLocked(std::size_t i) {
    for (std::size_t j = 0; j < slots_.size(); ++j) {
      if (j != i && slots_[j].ahead) {
        slots_[j].ahead->Stop();  // closes its ready links; open ones are not affected
        retired_.push_back(std::move(slots_[j].ahead));
      }
    }
    // A retired transport still referenced is in an Open() right now.
    std::erase_if(retired_, [&](const std::shared_ptr<SocketTransport>& t) {
      if (t.use_count() != 1) return false;
      SocketTransportStats s = t->Stats();
      s.preopen_ready = 0;  // a gauge: gone with it
      Add(retired_stats_, s);
      return true;
    });
    if (link_options_.preopen == 0 || slots_[i].ahead || stopped_.load()) return;
    absl::StatusOr<std::unique_ptr<SocketTransport>> ahead = MakeTransport(i, link_options_.preopen);
    if (ahead.ok()) slots_[i].ahead = *std::move(ahead);
  }

  void Log(const std::string& line) const {
    if (options_.log) options_.log(line);
  }

  // Outside mu_: tells the route listeners when route_ moved since the
  // last call (a listener may call route(), Open() or RemoveRouteListener).
  void NotifyRoute() {
    std::vector<std::function<void()>> call;
    {
      std::lock_guard lock(listeners_mu_);
      const std::uint64_t now = route_.load();
      if (now == notified_route_) return;
      notified_route_ = now;
      for (const auto& l : listeners_) call.push_back(l.second);
    }
    for (const auto& f : call) f();
  }

  void OnLinkFailure(std::size_t i, const absl::Status& status) {
    std::vector<std::string> lines;
    {
      std::lock_guard lock(mu_);
      if (ranking_.health(i) != EndpointRanking::Health::kDown) {
        lines.push_back(fmt::format("placement: endpoint {}: not usable: {}", ranking_.address(i),
                                    std::string(status.message())));
      }
      if (ranking_.RecordLinkFailure(i)) {
        OpenAheadLocked(ranking_.in_use());
        route_.fetch_add(1);
        lines.push_back(
            fmt::format("placement: chose endpoint {} ({})", ranking_.address(ranking_.in_use()), ranking_.reason()));
      }
    }
    for (const auto& line : lines) Log(line);
    NotifyRoute();
    wake_.store(true);
    asio::post(strand_, [self = shared_from_this()] { self->timer_.cancel(); });
  }

  // One Endpoint's probe; twice when it was not up: its first answer may
  // have waited for it to measure its origin, the second is the round trip.
  asio::awaitable<EndpointMeasurement> MeasureOne(std::size_t i, bool was_up) {
    const EndpointAddress where{slots_[i].address, slots_[i].address};
    const auto limit = link_options_.connect_timeout;
    EndpointMeasurement m = co_await MeasureEndpoint(strand_, *slots_[i].direct, where, limit);
    if (m.status.ok() && !was_up && !stopped_.load()) {
      EndpointMeasurement again = co_await MeasureEndpoint(strand_, *slots_[i].direct, where, limit);
      if (again.status.ok()) m = std::move(again);
    }
    co_return m;
  }

  // Strand: one probe of every Endpoint, all at once (a black-holed one
  // costs the round its connect timeout, not one per Endpoint), then the
  // ranking's decision.
  asio::awaitable<void> ProbeRound() {
    struct Round {
      explicit Round(const asio::strand<asio::any_io_executor>& strand, std::size_t n)
          : results(n), remaining(n), done(strand) {}
      std::vector<EndpointMeasurement> results;
      std::size_t remaining;
      asio::steady_timer done;  // cancelled by the last probe to finish
    };
    std::vector<EndpointRanking::Health> before(slots_.size());
    {
      std::lock_guard lock(mu_);
      for (std::size_t i = 0; i < slots_.size(); ++i) before[i] = ranking_.health(i);
    }
    auto round = std::make_shared<Round>(strand_, slots_.size());
    round->done.expires_at(Clock::time_point::max());
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      asio::co_spawn(strand_, MeasureOne(i, before[i] == EndpointRanking::Health::kUp),
                     [round, i](std::exception_ptr, EndpointMeasurement m) {
                       round->results[i] = std::move(m);
                       if (--round->remaining == 0) round->done.cancel();
                     });
    }
    // Completions run on this strand, so none slips between the check and
    // the wait.
    while (round->remaining > 0) (void)co_await round->done.async_wait(kAsTuple);
    if (stopped_.load()) co_return;
    const std::vector<EndpointMeasurement>& results = round->results;
    std::vector<std::string> lines;
    {
      std::lock_guard lock(mu_);
      for (std::size_t i = 0; i < slots_.size(); ++i) {
        const EndpointMeasurement& m = results[i];
        ranking_.RecordProbe(i, m.status, m.client_rtt, m.origin_rtt);
        if (ranking_.health(i) == before[i]) continue;
        if (m.status.ok()) {
          lines.push_back(fmt::format("placement: endpoint {}: round trip {:.2f} ms, its origin round trip {:.2f} ms",
                                      slots_[i].address, m.client_rtt.count() / 1000.0,
                                      m.origin_rtt.count() / 1000.0));
        } else {
          lines.push_back(fmt::format("placement: endpoint {}: not usable: {}", slots_[i].address,
                                      std::string(m.status.message())));
        }
      }
      const std::size_t was_in_use = ranking_.in_use();
      bool changed = ranking_.EndRound();
      if (options_.placement) {
        // The plug-in decides from the round (its answer is used unless it
        // names no known Endpoint or one that is down); only where new
        // sessions end up counts as a change.
        options_.placement->Observe(results);
        absl::StatusOr<EndpointAddress> chosen = options_.placement->Choose(options_.region);
        if (chosen.ok()) {
          for (std::size_t i = 0; i < slots_.size(); ++i) {
            if (slots_[i].address != chosen->address && slots_[i].address != chosen->name) continue;
            ranking_.Prefer(i, "chosen by the placement plug-in");
            break;
          }
        }
        changed = ranking_.in_use() != was_in_use;
      }
      if (changed) {
        OpenAheadLocked(ranking_.in_use());
        route_.fetch_add(1);
      }
      if (changed || !first_round_done_) {
        lines.push_back(
            fmt::format("placement: chose endpoint {} ({})", ranking_.address(ranking_.in_use()), ranking_.reason()));
      }
    }
    for (const auto& line : lines) Log(line);
    NotifyRoute();
    if (!first_round_done_) {
      first_round_done_ = true;
      first_round_.set_value();
    }
  }

  static asio::awaitable<void> Run(std::shared_ptr<Core> self) {
    for (;;) {
      if (self->stopped_.load()) break;
      const Clock::time_point started = Clock::now();
      self->wake_.store(false);  // this round answers every request so far
      co_await self->ProbeRound();
      if (self->stopped_.load()) break;
      if (!self->wake_.load()) {
        self->timer_.expires_after(self->options_.probe_interval);
        (void)co_await self->timer_.async_wait(kAsTuple);
      }
      const Clock::time_point not_before = started + std::min<Clock::duration>(kMinRoundGap, self->options_.probe_interval);
      while (!self->stopped_.load() && Clock::now() < not_before) {
        self->timer_.expires_at(not_before);
        (void)co_await self->timer_.async_wait(kAsTuple);
      }
    }
    if (!self->first_round_done_) {
      self->first_round_done_ = true;
      self->first_round_.set_value();
    }
  }

  const std::vector<asio::any_io_executor> executors_;
  const SocketTransportOptions link_options_;
  const FailoverOptions options_;

  mutable std::mutex mu_;  // ranking_, the transports of slots_, retired_
  EndpointRanking ranking_;
  std::vector<Slot> slots_;  // one per Endpoint, in the given order; the vector itself is fixed after Init
  std::vector<std::shared_ptr<SocketTransport>> retired_;  // stopped, maybe still in an Open()
  SocketTransportStats retired_stats_;

  std::atomic<bool> stopped_{false};
  std::atomic<bool> wake_{false};           // a link failed: probe again soon
  std::atomic<std::size_t> failovers_{0};  // Open()s served by another than the first tried
  std::atomic<std::uint64_t> route_{0};    // Transport::route(): bumped whenever in_use changes

  std::mutex listeners_mu_;  // listeners_, last_listener_, notified_route_
  std::vector<std::pair<std::uint64_t, std::function<void()>>> listeners_;
  std::uint64_t last_listener_ = 0;
  std::uint64_t notified_route_ = 0;

  // Strand only.
  asio::strand<asio::any_io_executor> strand_;
  asio::steady_timer timer_;
  bool first_round_done_ = false;
  std::promise<void> first_round_;
  std::future<void> first_round_future_ = first_round_.get_future();
};

class EndpointSet final : public SocketTransport {
 public:
  explicit EndpointSet(std::shared_ptr<Core> core) : core_(std::move(core)) {}
  ~EndpointSet() override { Stop(); }

  asio::awaitable<absl::StatusOr<std::unique_ptr<Link>>> Open(asio::any_io_executor executor,
                                                               std::string initial_bytes) override {
    return core_->Open(std::move(executor), std::move(initial_bytes));
  }
  void Stop() override { core_->Stop(); }
  SocketTransportStats Stats() const override { return core_->Stats(); }
  std::uint64_t route() const override { return core_->route(); }
  std::uint64_t AddRouteListener(std::function<void()> changed) override {
    return core_->AddRouteListener(std::move(changed));
  }
  void RemoveRouteListener(std::uint64_t id) override { core_->RemoveRouteListener(id); }

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SocketTransport>> MakeEndpointSet(std::vector<asio::any_io_executor> executors,
                                                                 SocketTransportOptions link_options,
                                                                 FailoverOptions options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("no Endpoint given");
  if (executors.empty()) return absl::InvalidArgumentError("no executor given");
  if (options.probe_interval <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError("the probe interval must be positive");
  }
  const auto wait = options.first_round_wait;
  auto core = std::make_shared<Core>(std::move(executors), std::move(link_options), std::move(options));
  absl::Status init = core->Init();
  if (!init.ok()) {
    core->Stop();
    return init;
  }
  core->Start();
  core->WaitForFirstRound(wait);
  return std::unique_ptr<SocketTransport>(std::make_unique<EndpointSet>(std::move(core)));
}

}  // namespace hyperpool::client
