#include "client/invalidation_watch.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <mutex>
#include <utility>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "client/client_cache.h"
#include "protocol/codec.h"
#include "protocol/link_protocol.h"

namespace hyperpool::client {
namespace {

namespace pr = protocol;
using Clock = std::chrono::steady_clock;
constexpr auto kAsTuple = asio::experimental::as_tuple(asio::use_awaitable);

constexpr std::chrono::milliseconds kFirstRetry{50};
constexpr std::chrono::milliseconds kMaxRetry{2000};
// The Endpoint sends little on a watch; a frame above this is not one of its.
constexpr uint32_t kMaxWatchFrame = 16u << 20;

bool ParseU64(std::string_view text, uint64_t& out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size() && !text.empty();
}

}  // namespace

std::string BuildWatchHello(std::string_view client_id) {
  pr::StartupMessage hello;
  hello.protocol_version = pr::kProtocolVersion30;
  hello.parameters.emplace_back(cache::kWatchParam, "1");
  hello.parameters.emplace_back(link::kClientIdParam, client_id);
  std::string out;
  pr::Encode(hello, out);
  return out;
}

void WatchReader::Feed(std::string& buffer, std::vector<Event>& out) {
  if (failed_) {
    buffer.clear();
    return;
  }
  pr::FrameReader reader(pr::FrameReader::Mode::kTagged, pr::FrameLimits{.max_message_length = kMaxWatchFrame});
  size_t pos = 0;
  auto fail = [&](std::string why) {
    failed_ = true;
    Event e;
    e.kind = Event::Kind::kError;
    e.error = std::move(why);
    out.push_back(std::move(e));
  };
  while (!failed_) {
    pr::FrameReader::Result r = reader.Read(std::string_view(buffer).substr(pos));
    if (r.is_need_more()) break;
    if (r.is_error()) {
      fail(fmt::format("malformed bytes on the watch link: {}", std::string(r.status().message())));
      break;
    }
    const pr::Frame& f = r.frame();
    pos += f.size();
    switch (f.tag) {
      case 'S': {  // ParameterStatus: the answer's source and generation
        auto ps = pr::DecodeParameterStatus(f.payload);
        if (!ps.ok()) break;
        if (ps->name == cache::kWatchSourceParam) have_source_ = ParseU64(ps->value, source_) && source_ != 0;
        if (ps->name == cache::kWatchGenerationParam) have_generation_ = ParseU64(ps->value, generation_);
        break;
      }
      case 'Z': {
        Event e;
        if (subscribed_) {
          e.kind = Event::Kind::kHeartbeat;
        } else if (have_source_ && have_generation_) {
          subscribed_ = true;
          e.kind = Event::Kind::kSubscribed;
          e.source = source_;
          e.generation = generation_;
        } else {
          // A link-ready answer: an Endpoint that does not know the watch.
          fail("the Endpoint does not support the invalidation watch");
          break;
        }
        out.push_back(std::move(e));
        break;
      }
      case cache::kControlTag: {
        std::optional<cache::Control> c = cache::DecodeControl(f.payload);
        if (!c) {
          fail("malformed control message on the watch link");
          break;
        }
        if (auto* i = std::get_if<cache::InvalidateControl>(&*c); i != nullptr && subscribed_) {
          Event e;
          e.kind = Event::Kind::kInvalidate;
          e.invalidate = std::move(*i);
          out.push_back(std::move(e));
        }
        break;
      }
      case 'E': {
        auto err = pr::DecodeErrorResponse(f.payload);
        fail(err.ok() ? fmt::format("the Endpoint refused the watch: {}", std::string(err->message()))
                      : std::string("the Endpoint refused the watch"));
        break;
      }
      case 'N':
        break;
      default:
        fail(fmt::format("unexpected message type {} on the watch link", int(static_cast<unsigned char>(f.tag))));
        break;
    }
  }
  if (failed_) {
    buffer.clear();
  } else {
    buffer.erase(0, pos);
  }
}

// ---------------------------------------------------------------------------
// The I/O half.
// ---------------------------------------------------------------------------

struct InvalidationWatch::Impl : std::enable_shared_from_this<InvalidationWatch::Impl> {
  Impl(asio::any_io_executor executor, Transport& transport_in, std::shared_ptr<ClientTier> tier_in,
       InvalidationWatchOptions options_in)
      : strand(asio::make_strand(executor)),
        transport(transport_in),
        tier(std::move(tier_in)),
        options(std::move(options_in)),
        retry_timer(strand) {
    if (!options.logger) options.logger = Logger::Default();
    if (options.heartbeat <= std::chrono::milliseconds(0)) options.heartbeat = std::chrono::milliseconds(2000);
  }

  // One watch link's state, shared with its heartbeat coroutine.
  struct Current {
    explicit Current(asio::strand<asio::any_io_executor> s) : timer(std::move(s)) {}
    std::unique_ptr<Link> link;
    bool closed = false;
    bool silent = false;   // closed because a heartbeat went unanswered
    bool awaiting = true;  // the answer, or a heartbeat's
    Clock::time_point sent_at = Clock::now();
    asio::steady_timer timer;
    void Close() {
      if (closed) return;
      closed = true;
      timer.cancel();
      if (link) link->Close();
    }
  };

  asio::awaitable<void> Run(std::shared_ptr<Impl> self);
  // One link's life; true if it was subscribed.
  asio::awaitable<bool> OneLink();
  asio::awaitable<void> Heartbeats(std::shared_ptr<Impl> self, std::shared_ptr<Current> cur);
  // Strand: the transport moved to another Endpoint.
  void OnRouteChange() {
    if (stopped.load()) return;
    route_changed = true;
    if (current) current->Close();
    retry_timer.cancel();
  }
  void Down(std::string_view reason) {
    if (!was_up) return;
    was_up = false;
    options.logger->Log(LogLevel::kInfo, "cache_watch_down",
                        {{"reason", std::string(reason)}, {"client_tier", "dropped; not served until resubscribed"}});
  }

  asio::strand<asio::any_io_executor> strand;
  Transport& transport;
  std::shared_ptr<ClientTier> tier;
  InvalidationWatchOptions options;
  std::atomic<bool> stopped{false};
  std::uint64_t listener_id = 0;

  // Strand only.
  asio::steady_timer retry_timer;
  std::shared_ptr<Current> current;
  bool route_changed = false;
  bool was_up = false;
  bool logged_failure = false;
  std::string last_reason;

  mutable std::mutex stats_mu;
  InvalidationWatchStats stats;
};

asio::awaitable<void> InvalidationWatch::Impl::Run(std::shared_ptr<Impl> self) {
  std::chrono::milliseconds backoff{0};
  while (!stopped.load()) {
    route_changed = false;
    const bool subscribed = co_await OneLink();
    tier->Unsubscribe();  // messages may have been missed from here on
    if (stopped.load()) break;
    if (subscribed || route_changed) {
      backoff = std::chrono::milliseconds(0);  // again at once
    } else {
      backoff = std::clamp(backoff * 2, kFirstRetry, kMaxRetry);
    }
    if (route_changed) {
      std::lock_guard lock(stats_mu);
      ++stats.moves;
    }
    if (backoff.count() > 0) {
      retry_timer.expires_after(backoff);
      (void)co_await retry_timer.async_wait(kAsTuple);
    }
  }
  (void)self;
}

asio::awaitable<bool> InvalidationWatch::Impl::OneLink() {
  const std::uint64_t route = transport.route();
  auto opened = co_await transport.Open(strand, BuildWatchHello(options.client_id));
  if (!opened.ok()) {
    if (!logged_failure) {
      logged_failure = true;
      options.logger->Log(LogLevel::kWarn, "cache_watch_failed",
                          {{"reason", std::string(opened.status().message())}, {"retry", "backing off up to 2 s"}});
    }
    Down(std::string(opened.status().message()));
    co_return false;
  }
  {
    std::lock_guard lock(stats_mu);
    ++stats.links_opened;
  }
  auto cur = std::make_shared<Current>(strand);
  cur->link = std::move(*opened);
  current = cur;
  if (stopped.load() || route_changed) cur->Close();
  asio::co_spawn(strand, Heartbeats(shared_from_this(), cur), asio::detached);
  bool subscribed = false;
  std::string reason = "the watch link closed";
  WatchReader reader;
  std::string buffer;
  std::vector<WatchReader::Event> events;
  while (!cur->closed) {
    absl::StatusOr<std::size_t> n = co_await cur->link->Receive(buffer);
    if (!n.ok()) {
      if (!cur->closed) reason = fmt::format("the watch link broke: {}", std::string(n.status().message()));
      break;
    }
    events.clear();
    reader.Feed(buffer, events);
    for (WatchReader::Event& e : events) {
      switch (e.kind) {
        case WatchReader::Event::Kind::kSubscribed:
          cur->awaiting = false;
          if (transport.route() != route) {
            route_changed = true;  // moved while opening: this may be the old Endpoint
            cur->Close();
            break;
          }
          tier->Subscribe(e.source, e.generation);
          subscribed = true;
          logged_failure = false;
          if (!was_up) {
            was_up = true;
            options.logger->Log(LogLevel::kInfo, "cache_watch_up",
                                {{"endpoint_instance", fmt::format("{:016x}", e.source)},
                                 {"generation", std::to_string(e.generation)}});
          }
          break;
        case WatchReader::Event::Kind::kInvalidate:
          tier->Invalidate(e.invalidate);
          if (options.on_invalidate) options.on_invalidate(e.invalidate);
          break;
        case WatchReader::Event::Kind::kHeartbeat:
          cur->awaiting = false;
          break;
        case WatchReader::Event::Kind::kError:
          reason = e.error;
          cur->Close();
          break;
      }
      if (cur->closed) break;
    }
  }
  if (route_changed && !stopped.load()) reason = "the Endpoint in use changed";
  if (cur->silent) reason = "the watch link stopped answering";
  cur->Close();
  if (current == cur) current.reset();
  if (subscribed) {
    std::lock_guard lock(stats_mu);
    ++stats.losses;
  }
  if (!stopped.load()) Down(reason);
  co_return subscribed;
}

asio::awaitable<void> InvalidationWatch::Impl::Heartbeats(std::shared_ptr<Impl> self, std::shared_ptr<Current> cur) {
  (void)self;  // keeps the Impl alive
  const auto every = options.heartbeat;
  while (!cur->closed) {
    cur->timer.expires_after(every);
    (void)co_await cur->timer.async_wait(kAsTuple);
    if (cur->closed) break;
    if (cur->awaiting) {
      if (Clock::now() - cur->sent_at >= every) {
        cur->silent = true;
        cur->Close();
        break;
      }
      continue;
    }
    std::string sync;
    pr::Encode(pr::Sync{}, sync);
    cur->awaiting = true;
    cur->sent_at = Clock::now();
    absl::Status sent = co_await cur->link->Send(std::move(sync));
    if (!sent.ok()) {
      cur->Close();
      break;
    }
  }
}

std::shared_ptr<InvalidationWatch> InvalidationWatch::Start(asio::any_io_executor executor, Transport& transport,
                                                            std::shared_ptr<ClientTier> tier,
                                                            InvalidationWatchOptions options) {
  auto impl = std::make_shared<Impl>(std::move(executor), transport, std::move(tier), std::move(options));
  std::weak_ptr<Impl> weak = impl;
  impl->listener_id = transport.AddRouteListener([weak] {
    if (auto self = weak.lock()) asio::post(self->strand, [self] { self->OnRouteChange(); });
  });
  asio::co_spawn(impl->strand, impl->Run(impl), asio::detached);
  return std::shared_ptr<InvalidationWatch>(new InvalidationWatch(std::move(impl)));
}

InvalidationWatch::~InvalidationWatch() { Stop(); }

void InvalidationWatch::Stop() {
  if (impl_->stopped.exchange(true)) return;
  impl_->transport.RemoveRouteListener(impl_->listener_id);
  asio::post(impl_->strand, [impl = impl_] {
    if (impl->current) impl->current->Close();
    impl->retry_timer.cancel();
  });
}

InvalidationWatchStats InvalidationWatch::Stats() const {
  std::lock_guard lock(impl_->stats_mu);
  return impl_->stats;
}

}  // namespace hyperpool::client
