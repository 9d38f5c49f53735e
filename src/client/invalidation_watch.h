// The Client's invalidation watch (docs/architecture.md, "Invalidation"):
// one long-lived link to the Endpoint in use over which that Endpoint sends
// every invalidation it broadcasts to Clients (writes of other Clients
// through it, and those other Endpoints publish through the shared tier), so
// the Client tier hears of them whether or not an app session is open.
//
// Failure rules (the tier is a watched ClientTier, client_cache.h):
//   - nothing is served or stored from the tier until the watch is
//     subscribed (the Endpoint's answer: its instance and generation);
//   - the link breaks, stops answering heartbeats (a Sync every `heartbeat`,
//     answered in order after every invalidation sent before it; no answer
//     by the next tick ends it), or the transport's route() changes (the
//     EndpointSet moved to another Endpoint): the tier drops everything and
//     refuses to serve until subscribed again; the watch re-opens at once
//     after a move or a subscribed link's loss, else with a backoff from
//     50 ms to 2 s.
//
// WatchReader is the sans-I/O half (the Endpoint's bytes in, events out);
// InvalidationWatch the I/O around it, on a strand of the Client's first
// executor.
#ifndef HYPERPOOL_CLIENT_INVALIDATION_WATCH_H_
#define HYPERPOOL_CLIENT_INVALIDATION_WATCH_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <asio/any_io_executor.hpp>

#include "cache/tier.h"
#include "hyperpool/log.h"
#include "hyperpool/transport.h"

namespace hyperpool::client {

class ClientTier;

// The hello of a watch link: kWatchParam=1 and hyperpool.client_id.
std::string BuildWatchHello(std::string_view client_id);

class WatchReader {
 public:
  struct Event {
    enum class Kind {
      kSubscribed,  // the answer: `source`, `generation`
      kInvalidate,  // `invalidate`
      kHeartbeat,   // a Sync's ReadyForQuery
      kError,       // `error`; the link should close
    };
    Kind kind = Kind::kError;
    uint64_t source = 0;
    uint64_t generation = 0;
    cache::InvalidateControl invalidate;
    std::string error;
  };

  // Consumes the whole frames at the front of `buffer` (a partial one stays)
  // and appends their events to `out`. After a kError nothing more is read.
  void Feed(std::string& buffer, std::vector<Event>& out);

 private:
  bool subscribed_ = false;
  bool failed_ = false;
  bool have_source_ = false;
  bool have_generation_ = false;
  uint64_t source_ = 0;
  uint64_t generation_ = 0;
};

struct InvalidationWatchOptions {
  std::string client_id;  // the Client's hyperpool.client_id
  std::chrono::milliseconds heartbeat{2000};
  // Called on the watch's strand after the tier applied an invalidation
  // (the Client drops statement metadata on `all`).
  std::function<void(const cache::InvalidateControl&)> on_invalidate;
  std::shared_ptr<const Logger> logger;  // null: Logger::Default()
};

struct InvalidationWatchStats {
  uint64_t links_opened = 0;  // watch links the transport opened
  uint64_t losses = 0;        // subscribed links lost (broken, silent, or moved)
  uint64_t moves = 0;         // of which: the transport's route changed
};

class InvalidationWatch : public std::enable_shared_from_this<InvalidationWatch> {
 public:
  // Starts watching at once. `transport` must outlive the watch's work (as
  // for the Client's sessions).
  static std::shared_ptr<InvalidationWatch> Start(asio::any_io_executor executor, Transport& transport,
                                                  std::shared_ptr<ClientTier> tier,
                                                  InvalidationWatchOptions options);
  ~InvalidationWatch();
  // Ends the watch (its link closes). Thread-safe, idempotent.
  void Stop();
  InvalidationWatchStats Stats() const;

  struct Impl;

 private:
  explicit InvalidationWatch(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_INVALIDATION_WATCH_H_
