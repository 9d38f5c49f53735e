// The link protocol's names, in one place: what the Client and the Endpoint
// add to PostgreSQL's wire protocol on a link (docs/architecture.md, "The
// link protocol"). A link opens with a StartupMessage-shaped hello whose
// hyperpool.* parameters say what it is for; the Endpoint speaks back with
// backend messages plus control frames of tag kControlTag. Both halves (and
// the cache tier, the placement probe) include this header and nothing of
// each other. Pure names: no I/O.
#ifndef HYPERPOOL_PROTOCOL_LINK_PROTOCOL_H_
#define HYPERPOOL_PROTOCOL_LINK_PROTOCOL_H_

#include <string_view>

namespace hyperpool::link {

// Every hello parameter of ours starts with this; an app's own startup
// parameters never reach the Endpoint under it.
inline constexpr std::string_view kParamPrefix = "hyperpool.";

// A session link: the Client's session id (where cancel links go), the
// app-facing backend pid it promised the app, the app's database (several
// databases: database_router.h), the Client's id (invalidations it caused
// are not echoed to it).
inline constexpr std::string_view kSessionIdParam = "hyperpool.session_id";
inline constexpr std::string_view kBackendPidParam = "hyperpool.backend_pid";
inline constexpr std::string_view kDatabaseParam = "hyperpool.database";
inline constexpr std::string_view kClientIdParam = "hyperpool.client_id";
// A replication link: the app's `replication` startup value. The link
// then carries the bytes of a walsender connection of its own, unchanged
// both ways (docs/architecture.md, "Replication connections").
inline constexpr std::string_view kReplicationParam = "hyperpool.replication";
// "1": the session's earlier link sent a write (a link let go at the
// Endpoint's ReleaseControl said so): no stale-if-error answer for it.
inline constexpr std::string_view kWroteParam = "hyperpool.wrote";
// A cancel link: the session id whose current query to cancel.
inline constexpr std::string_view kCancelSessionParam = "hyperpool.cancel_session";
// A placement probe link, and the ParameterStatus the Endpoint answers it
// with (its origin round trip in microseconds).
inline constexpr std::string_view kProbeParam = "hyperpool.probe";
inline constexpr std::string_view kOriginRttParam = "hyperpool.origin_rtt_us";
// An invalidation watch link (cache/tier.h): the flag, the id of the
// Endpoint's invalidation source and its generation.
inline constexpr std::string_view kWatchParam = "hyperpool.cache_watch";
inline constexpr std::string_view kWatchSourceParam = "hyperpool.cache_source";
inline constexpr std::string_view kWatchGenerationParam = "hyperpool.cache_generation";
// Session settings an app may SET for the cache tier (cache/tier.h).
inline constexpr std::string_view kCacheSetting = "hyperpool.cache";
inline constexpr std::string_view kCacheTtlSetting = "hyperpool.cache_ttl";

// Control frames (Endpoint -> Client): a backend-direction frame with this
// tag (no PostgreSQL backend message uses it); the Client consumes it and
// never forwards it to the application. Payload: one kind byte, then fields
// (link_controls.h).
inline constexpr char kControlTag = 'h';

}  // namespace hyperpool::link

#endif  // HYPERPOOL_PROTOCOL_LINK_PROTOCOL_H_
