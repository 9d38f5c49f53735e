// A transparent hasher for maps and sets keyed by std::string_view or
// std::string. Debian's abseil (20220623) has its own absl::string_view, so
// absl::Hash<std::string_view> falls back to std::hash (murmur over every
// byte, ~1 instruction per byte: the memory cache's keys run to hundreds of
// bytes and are hashed several times per miss). This one hands the bytes to
// absl's own string hash instead, and lets a std::string-keyed map be
// searched with a view.
#ifndef HYPERPOOL_CACHE_STRING_HASH_H_
#define HYPERPOOL_CACHE_STRING_HASH_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace hyperpool::cache {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const {
    return absl::Hash<absl::string_view>{}(absl::string_view(s.data(), s.size()));
  }
  size_t operator()(const std::string& s) const { return (*this)(std::string_view(s)); }
};

struct StringEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

}  // namespace hyperpool::cache

#endif  // HYPERPOOL_CACHE_STRING_HASH_H_
