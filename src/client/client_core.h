// ClientCore: what the Client decides per message of one app session, with
// no I/O (the Client's counterpart of the Endpoint's SessionCore; the
// driver is ClientSession, which only reads, writes, sends and keeps the
// timers). Bytes in, decisions out:
//
//   from the app   ServeLocalHit: the unit at the front answered by the
//                  Client cache tier (its answer), or the candidate it
//                  parsed and missed; TakeBatch: whole frontend frames
//                  into what goes on the link, what is answered at once
//                  (ExtendedSession), and how the batch ended (Terminate,
//                  a protocol error, bytes still needed);
//   from the link  OnLinkBytes: whole backend frames into the bytes for the
//                  app (AppBytes: passed on without a copy when unchanged),
//                  control messages consumed (the tier's stores and
//                  invalidations), ReadyForQuery tracked.
//
// State: the cache key and settings of the session (session_key.h), the
// units sent and not yet answered, the extended protocol as forwarded
// (extended_session.h), the result being captured for the tier, the
// transaction status.
#ifndef HYPERPOOL_CLIENT_CLIENT_CORE_H_
#define HYPERPOOL_CLIENT_CLIENT_CORE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "cache/tier.h"
#include "client/app_outbox.h"
#include "client/client_util.h"
#include "client/extended_session.h"
#include "client/session_key.h"
#include "common/small_fifo.h"
#include "protocol/codec.h"

namespace hyperpool::client {

class ClientTier;
class StatementMetadataStore;

class ClientCore {
 public:
  struct Config {
    ClientTier* cache = nullptr;  // the Client tier; null: caching is off
    StatementMetadataStore* metadata = nullptr;
    size_t max_query_bytes = 0;       // longest text the tier caches
    uint32_t max_message_length = 0;  // longest frontend message accepted
    SessionKey::Interner intern_key;  // shares sessions' equal keys (null: not shared)
  };

  // Nothing works before Start().
  ClientCore() = default;
  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;

  // After the login: the session's database and startup parameters;
  // `config` (the Client's, shared by its sessions) and `database` (the
  // session's own string: viewed, not copied) outlive the core.
  void Start(const Config* config, std::string_view database, const ParamList& app_params);

  // ---- From the app ----

  // The unit at the front of the app's bytes that the local tier parsed as
  // a candidate and did not find (candidate false: none).
  struct LocalMiss {
    bool candidate = false;
    // The unit's text is one plain SELECT: forwarding its Query needs no
    // NoteForwardedFrame (no second decode and scan of the same text).
    bool plain_select = false;
    cache::CandidateUnit unit;
    std::string key;
  };
  // Answers the unit at the front of `in` from the local tier: its size
  // (consumed by the caller) with `answer` holding what the app gets; 0
  // when it is not answered here, `miss` then says what was parsed.
  size_t ServeLocalHit(std::string_view in, LocalMiss& miss, std::string& answer);

  struct AppBatch {
    size_t consumed = 0;  // bytes of `in` taken (whole frames)
    std::string to_link;  // for the link
    std::string local;    // for the app at once, before what `to_link` brings
    bool send_to_link = false;
    bool terminate = false;            // Terminate: close after sending
    absl::Status bad;                  // a protocol error: FATAL `bad_sqlstate`, close
    std::string_view bad_sqlstate;
    size_t want = 1;                   // more bytes needed for the partial frame after them
  };
  // Whole frontend frames at the front of `in` (after ServeLocalHit left
  // `miss`), up to a partial frame, an error or Terminate. `link_open`: the
  // session's link exists (a lone Terminate needs none).
  AppBatch TakeBatch(std::string_view in, LocalMiss& miss, bool link_open);

  // ---- From the link ----

  struct LinkEvents {
    bool ready_idle = false;        // a ReadyForQuery left nothing outstanding, transaction status 'I'
    bool metadata_dropped = false;  // an invalidation dropped the statement metadata
    // The Endpoint may let its half of the session go (protocol::ReleaseControl).
    bool release_offered = false;
    bool release_wrote = false;  // ...and the session sent a write
  };
  // Whole frames of `buf` (the link's bytes) into `out`; `consumed`: bytes
  // of `buf` handled (a partial frame stays, except a large DataRow, which
  // streams through). False: a malformed header.
  bool OnLinkBytes(const std::string& buf, AppBytes& out, size_t& consumed, LinkEvents& events);

  // ---- State ----

  size_t outstanding() const { return outstanding_; }  // requests sent without their ReadyForQuery
  char txn_status() const { return txn_status_; }     // from the latest ReadyForQuery
  // The last frame the app got was an ErrorResponse, whole: the Endpoint
  // said why before the link ended.
  bool ended_with_error() const { return passthrough_ == 0 && last_tag_ == 'E'; }
  // For tests: the extended-protocol state exists (made at the first frame
  // sent to the link).
  bool holds_extended_session() const { return ext_ != nullptr; }
  // The session is idle (nothing outstanding, transaction status 'I'):
  // gives back the extended-protocol state when it holds nothing a new one
  // would not (ExtendedSession::Disposable: about 500 bytes with its
  // queue), and the unit queue's storage. The Client's idle sweep calls
  // it for sessions still idle after kClientIdleSweepDelay. True: something
  // was given back.
  bool ReleaseIdleState();
  // Idle, with nothing of the link's in hand (no unit outstanding, no
  // result being captured or streamed) and, after ReleaseIdleState, no
  // extended-protocol state: the link may end, and a new one take the next
  // unit (ClientSession::ReleaseLink).
  bool LinkReleasable();
  // Whether a unit starting now may be answered locally / become a candidate.
  bool CacheUsable() const;

 private:
  bool LocalCandidate(std::string_view bytes, cache::CandidateUnit& unit, std::string& key, bool& plain_select) const;
  void NoteForwardedFrame(const protocol::Frame& f, std::string_view rest);
  void OnControl(std::string_view payload, LinkEvents& events);
  void OnReadyForQuery(char status, LinkEvents& events);
  // The origin skipped the `units` oldest Queries / FunctionCalls sent
  // (ExtendedSession::TakeSkippedUnits): no ReadyForQuery comes for them.
  void SkipUnits(size_t units);

  const Config* config_ = nullptr;
  SessionKey key_;  // what keys its entries and metadata (session_key.h)
  cache::SessionCacheSettings cache_settings_;
  struct PendingUnit {
    bool candidate = false;
    uint64_t digest = 0;
    std::string key;
    // When a candidate left for the Endpoint: the Endpoint's ttl counts
    // from a moment after this, so an entry's expiry counted from here is
    // never later than the Endpoint meant, however late the result arrives.
    std::chrono::steady_clock::time_point sent{};
  };
  SmallFifo<PendingUnit> units_;  // one per Query/Sync/FunctionCall sent, popped at ReadyForQuery
  // The extended protocol as forwarded: local Parse/Describe answers,
  // deferred Parses, result-shape checks (extended_session.h). Made when
  // the first frame goes to the link (Ext()): a session that only logged in
  // or was only answered from the local tier keeps none (a new one answers
  // every question as `ext_ == nullptr` does here).
  std::unique_ptr<ExtendedSession> ext_;
  ExtendedSession& Ext();
  std::string_view database_;  // the session's, for Ext()
  // The result being captured for the Client tier, between the Endpoint's
  // 'B' control and the unit's ReadyForQuery (made then: an idle session
  // holds none).
  struct Capture {
    explicit Capture(size_t max_entry_bytes) : result(max_entry_bytes) {}
    cache::ResultCapture result;
    std::string key;
    std::optional<cache::StoreControl> store;  // the 'S' control that says where it goes
  };
  std::unique_ptr<Capture> capture_;
  size_t outstanding_ = 0;
  size_t passthrough_ = 0;  // bytes of a partly received DataRow still to forward as they come
  char txn_status_ = 'I';
  char last_tag_ = '\0';    // tag of the last frame forwarded to the app
};

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_CLIENT_CORE_H_
