// Pure helpers of the Client half (no I/O, no Asio): the local connection
// string, generated passwords and session ids, link hellos, the parameter
// overlay of the local handshake, and a streaming scanner that finds
// ReadyForQuery in backend bytes without buffering whole messages.
#ifndef HYPERPOOL_CLIENT_CLIENT_UTIL_H_
#define HYPERPOOL_CLIENT_CLIENT_UTIL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "protocol/frame_reader.h"
#include "protocol/link_protocol.h"
#include "protocol/wire_reader.h"

namespace hyperpool::client {

// Run-time parameters as (name, value), in the order the origin reported them.
using ParamList = std::vector<std::pair<std::string, std::string>>;

// Startup parameters the app may set itself and that the Client reports back
// in its own ParameterStatus messages (overlaying the origin's values).
inline constexpr std::string_view kAppOverlayParams[] = {
    "client_encoding", "DateStyle", "TimeZone", "IntervalStyle", "application_name"};

// The hello parameters (protocol/link_protocol.h).
using link::kCancelSessionParam;
using link::kDatabaseParam;
using link::kSessionIdParam;

// RFC 3986 percent-encoding of everything except unreserved characters.
std::string PercentEncode(std::string_view text);

// postgresql://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=disable. A wildcard
// host ("", "0.0.0.0", "::") becomes 127.0.0.1; IPv6 literals get brackets.
std::string BuildConnectionString(std::string_view user, std::string_view password,
                                  std::string_view host, uint16_t port, std::string_view database);

// A random password for the local listener: 24 CSPRNG bytes as URL-safe
// base64 without padding (32 characters, no percent-encoding needed).
absl::StatusOr<std::string> GeneratePassword();

// A random 64-bit session id as 11 URL-safe base64 characters ([A-Za-z0-9_-]).
absl::StatusOr<std::string> NewSessionId();

// The hello that opens a session link (docs/architecture.md, "The link
// protocol"): a protocol 3.0 StartupMessage carrying `app_params` (already
// stripped of user, database, replication and _pq_.* options) plus
// hyperpool.session_id = `session_id`.
std::string BuildLinkHello(const ParamList& app_params, std::string_view session_id);

// The hello of a cancel link: a StartupMessage whose parameters are
// hyperpool.cancel_session = `session_id` and, unless empty,
// hyperpool.database = `database` (the session's).
std::string BuildCancelHello(std::string_view session_id, std::string_view database = {});

// The ParameterStatus set to report to an app: the origin's `origin` values,
// with client_encoding, DateStyle, TimeZone, IntervalStyle and
// application_name replaced by the app's own startup values when it gave
// them (application_name is "" when it did not: the origin's is hyperpool's).
// Values are reported as PostgreSQL spells them (client/parameter_canon.h).
ParamList OverlayParams(const ParamList& origin, const ParamList& app_params);

// Rewrites the app's values of those same settings in `app_params` to the
// spelling OverlayParams reports, so that the session's hello asks every
// origin connection for exactly that (a partial DateStyle such as "SQL"
// would otherwise keep the date order of whichever connection it borrows).
void CanonicalizeAppParams(const ParamList& origin, ParamList& app_params);

// Replaces a password in an origin string (URI or key=value) by "***" so the
// string can be logged.
std::string RedactOrigin(std::string_view origin);

// Returns memory the allocator keeps after a large buffer was freed to the
// system (glibc's malloc_trim; glibc otherwise keeps freed heap pages, and
// raises its mmap threshold after a large free so the next large buffer
// comes from the heap too). Call it after freeing a buffer of megabytes, not
// per message: it walks the heap.
void ReleaseFreedMemory();

// Walks a backend byte stream chunk by chunk (frames may span chunks) and
// reports the status byte of every ReadyForQuery, without copying or
// buffering message bodies. Used on the hot path between link and app.
class BackendStreamScanner {
 public:
  // Scans `chunk`, calling `on_ready(status)` for each ReadyForQuery whose
  // status byte is in it. Returns false on a malformed header (declared
  // length below 4): the stream can no longer be followed.
  template <typename OnReady>
  bool Scan(std::string_view chunk, OnReady&& on_ready) {
    size_t pos = 0;
    while (pos < chunk.size()) {
      if (body_remaining_ == 0 || header_len_ < 5) {
        if (header_len_ == 5) header_len_ = 0;  // previous frame finished
        while (header_len_ < 5 && pos < chunk.size()) header_[header_len_++] = chunk[pos++];
        if (header_len_ < 5) return true;
        const protocol::FrameHeader h = *protocol::PeekTaggedHeader(std::string_view(header_, 5));
        if (!h.well_formed()) return false;
        last_tag_ = h.tag;
        body_remaining_ = h.length - 4;
        body_seen_ = 0;
        if (body_remaining_ == 0) header_len_ = 0;
        continue;
      }
      size_t take = std::min<size_t>(body_remaining_, chunk.size() - pos);
      if (last_tag_ == 'Z' && body_seen_ == 0) on_ready(chunk[pos]);
      body_seen_ += take;
      body_remaining_ -= take;
      pos += take;
      if (body_remaining_ == 0) header_len_ = 0;
    }
    return true;
  }

  // Tag of the last message whose header was seen ('\0' before any).
  char last_tag() const { return last_tag_; }
  // True between messages (no partial header or body pending).
  bool at_boundary() const { return header_len_ == 0 && body_remaining_ == 0; }

 private:
  char header_[5] = {};
  size_t header_len_ = 0;
  uint64_t body_remaining_ = 0;
  uint64_t body_seen_ = 0;
  char last_tag_ = '\0';
};

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_CLIENT_UTIL_H_
