#include "cache/cache_key.h"

#include <cstring>

#include "absl/strings/string_view.h"

namespace hyperpool::cache {
namespace {

// Key layout: "hpk1", then per component a tag byte and either
// 'N' (absent) or 'V' + 4-byte big-endian length + bytes. Counts use 'C' +
// 4 bytes. Fixed tags per position make the encoding prefix-free.
void AppendU32(std::string& out, uint32_t v) {
  char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
               static_cast<char>(v)};
  out.append(b, 4);
}

// One append per component (std::string::push_back is a call each).
void AppendValue(std::string& out, char tag, std::optional<std::string_view> v) {
  if (!v.has_value()) {
    const char absent[2] = {tag, 'N'};
    out.append(absent, 2);
    return;
  }
  const uint32_t n = static_cast<uint32_t>(v->size());
  const char head[6] = {tag, 'V', static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                        static_cast<char>(n >> 8), static_cast<char>(n)};
  out.append(head, 6);
  out.append(v->data(), v->size());
}

void AppendCount(std::string& out, char tag, size_t n) {
  out.push_back(tag);
  AppendU32(out, static_cast<uint32_t>(n));
}

std::optional<std::string_view> Setting(const SessionSettings* s, std::string_view name) {
  if (s == nullptr) return std::nullopt;
  // Debian's abseil has its own string_view: heterogeneous look-ups need it.
  if (auto it = s->find(absl::string_view(name.data(), name.size())); it != s->end()) {
    return std::string_view(it->second);
  }
  std::string_view alt;
  if (name == "timezone") alt = "TimeZone";
  if (name == "datestyle") alt = "DateStyle";
  if (name == "intervalstyle") alt = "IntervalStyle";
  if (!alt.empty()) {
    if (auto it = s->find(absl::string_view(alt.data(), alt.size())); it != s->end()) {
      return std::string_view(it->second);
    }
  }
  return std::nullopt;
}

}  // namespace

size_t CacheKeyReserve(const CacheKeyInput& in) {
  size_t estimate = 64 + in.database.size() + in.role.size() + in.sql.size() +
                    in.param_types.size() * 5 + in.result_formats.size() * 3;
  for (const ParamValue& p : in.params) estimate += 8 + (p.value ? p.value->size() : 0);
  if (in.settings != nullptr) estimate += 11 * 24;
  return estimate;
}

void AppendCacheKey(const CacheKeyInput& in, std::string& out) {
  out.reserve(out.size() + CacheKeyReserve(in));

  out.append("hpk1");
  out.push_back(static_cast<char>(in.form));
  AppendValue(out, 'd', in.database);
  AppendValue(out, 'r', in.role);
  for (std::string_view name : kResultAffectingSettings) {
    AppendValue(out, 's', Setting(in.settings, name));
  }
  AppendValue(out, 'q', in.sql);
  AppendCount(out, 't', in.param_types.size());
  for (uint32_t oid : in.param_types) AppendU32(out, oid);
  AppendCount(out, 'p', in.params.size());
  for (const ParamValue& p : in.params) {
    out.push_back(static_cast<char>(static_cast<uint16_t>(p.format) >> 8));
    out.push_back(static_cast<char>(p.format));
    AppendValue(out, 'v', p.value);
  }
  AppendCount(out, 'f', in.result_formats.size());
  for (int16_t f : in.result_formats) {
    out.push_back(static_cast<char>(static_cast<uint16_t>(f) >> 8));
    out.push_back(static_cast<char>(f));
  }
}

}  // namespace hyperpool::cache
