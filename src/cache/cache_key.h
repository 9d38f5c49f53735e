// The cache key: everything that can change the bytes of a result, each
// component tagged and length-prefixed so that no two different inputs can
// produce the same key by concatenation ("ab"+"c" vs "a"+"bc"), and NULL
// differs from the empty string. The key also carries the role, so results
// never cross SET ROLE / SET SESSION AUTHORIZATION or row-level security
// boundaries (Pgpool CVE-2024-45624).
#ifndef HYPERPOOL_CACHE_CACHE_KEY_H_
#define HYPERPOOL_CACHE_CACHE_KEY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace hyperpool::cache {

// One Bind parameter (or none, for simple Query).
struct ParamValue {
  std::optional<std::string_view> value;  // nullopt = SQL NULL.
  int16_t format = 0;                     // Effective format: 0 text, 1 binary.
};

enum class ProtocolForm : uint8_t {
  kSimple = 'Q',    // Query message.
  kExtended = 'E',  // Parse/Bind/Execute.
};

// The session's current setting values by name. Look-ups try the lowercase
// name first, then PostgreSQL's ParameterStatus spelling (TimeZone, DateStyle,
// IntervalStyle), so either convention works.
using SessionSettings = absl::flat_hash_map<std::string, std::string>;

// Settings that change result bytes (output formats, time zone, name
// resolution, encoding, locale-dependent formatting).
inline constexpr std::string_view kResultAffectingSettings[] = {
    "search_path",  "timezone",        "datestyle",     "intervalstyle",
    "extra_float_digits", "client_encoding", "bytea_output", "standard_conforming_strings",
    "lc_monetary",  "lc_numeric",      "lc_time",
};

struct CacheKeyInput {
  std::string_view database;
  std::string_view role;  // Effective role (current_user after SET ROLE).
  const SessionSettings* settings = nullptr;  // nullptr: every setting "unset".
  std::string_view sql;
  absl::Span<const uint32_t> param_types;  // Parse's parameter type OIDs (0 = unspecified).
  absl::Span<const ParamValue> params;
  absl::Span<const int16_t> result_formats;  // Bind's result format codes as sent.
  ProtocolForm form = ProtocolForm::kSimple;
};

// Appends the key for `in` to `out` (reuse `out` to avoid allocating).
void AppendCacheKey(const CacheKeyInput& in, std::string& out);
// Room AppendCacheKey reserves for `in`'s key (at least its size); a caller
// that appends a suffix reserves it with the suffix's once (one allocation).
size_t CacheKeyReserve(const CacheKeyInput& in);
inline std::string BuildCacheKey(const CacheKeyInput& in) {
  std::string k;
  AppendCacheKey(in, k);
  return k;
}

}  // namespace hyperpool::cache

#endif  // HYPERPOOL_CACHE_CACHE_KEY_H_
