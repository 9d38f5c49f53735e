// The link's control frames (Endpoint -> Client, tag kControlTag:
// link_protocol.h) that carry the cache tier's marks: 'B' a cacheable
// result follows, 'S' it was stored, 'I' a write invalidated tables
// (docs/architecture.md, "The link protocol" and "Query cache"), and 'P'
// the session's Endpoint half may be let go ("Idle sessions"). Pure
// codec, as the rest of src/protocol/; the cache tier (cache/tier.h) names
// these types as its own.
#ifndef HYPERPOOL_PROTOCOL_LINK_CONTROLS_H_
#define HYPERPOOL_PROTOCOL_LINK_CONTROLS_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace hyperpool::protocol {

// 'B': the result of the unit at the head of the Client's queue follows and
// is cacheable; `digest` is UnitDigest (cache/tier.h) of the unit's
// frontend frames.
struct BeginControl {
  uint64_t digest = 0;
};
// 'S': right before that unit's ReadyForQuery: the Endpoint stored (or
// served) the result; keep it `ttl` fresh (the remaining TTL for an Endpoint
// hit). `generation` is the Endpoint's invalidation generation when the
// result's origin fetch started; `tables` are its base tables. `source`
// names the Endpoint instance whose generations these are (random per
// Endpoint start; 0 from a sender that does not say): generations of two
// Endpoints are not comparable.
struct StoreControl {
  uint64_t digest = 0;
  std::chrono::milliseconds ttl{0};
  uint64_t generation = 0;
  std::vector<std::string> tables;
  uint64_t source = 0;
};
// 'I': a write was seen; drop entries that read `tables` (or every entry when
// `all`). `generation` is the Endpoint's generation after the invalidation,
// `source` as for StoreControl.
// `rows_only` (with `all`): the statement could write any row but runs no
// DDL (an unknown or volatile function, a write under a search_path the
// Endpoint cannot resolve), so statement metadata is kept; without it an
// `all` also drops the Client's statement metadata. Encoded in the `all`
// byte: 0 tables, 1 all, 2 all rows only (a Client that knows only 0/1
// treats 2 as 1, which is safe).
struct InvalidateControl {
  uint64_t generation = 0;
  bool all = false;
  std::vector<std::string> tables;
  uint64_t source = 0;
  bool rows_only = false;
  // Whether the Client must drop its statement metadata.
  bool drops_metadata() const { return all && !rows_only; }
};
// 'P': sent once the Endpoint's half of an idle session holds nothing a
// new session made from the same hello would not (its settings as they
// started, no statement, portal, pin, LISTEN, sequence, pid shown or
// setting of the cache): a Client that stays idle may end the link
// (Terminate, close) and open a new one for its next unit. Only on links
// that call back (the direct link of `serve`). `wrote`: the
// session sent a write, which its next link's hello says (kWroteParam), so
// that it is still never answered stale-if-error.
struct ReleaseControl {
  bool wrote = false;
};
using Control = std::variant<BeginControl, StoreControl, InvalidateControl, ReleaseControl>;

void AppendControl(std::string& out, const BeginControl& c);
void AppendControl(std::string& out, const StoreControl& c);
// The same with the tables given apart (`c.tables` unread): the Endpoint
// names those of the entry it stored instead of keeping a copy for this.
void AppendStoreControl(std::string& out, const StoreControl& c, const std::vector<std::string>& tables);
void AppendControl(std::string& out, const InvalidateControl& c);
void AppendControl(std::string& out, const ReleaseControl& c);
// Decodes a control frame's payload; nullopt if malformed. The trailing
// `source` of 'S' and 'I' is optional (0 when absent).
std::optional<Control> DecodeControl(std::string_view payload);

}  // namespace hyperpool::protocol

#endif  // HYPERPOOL_PROTOCOL_LINK_CONTROLS_H_
