#include "client/client_util.h"

#include <algorithm>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "client/parameter_canon.h"
#include "protocol/auth/auth_util.h"
#include "protocol/frontend_messages.h"

namespace hyperpool::client {

std::string PercentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string BuildConnectionString(std::string_view user, std::string_view password,
                                  std::string_view host, uint16_t port, std::string_view database) {
  std::string h(host);
  if (h.empty() || h == "0.0.0.0" || h == "::" || h == "[::]") h = "127.0.0.1";
  if (h.find(':') != std::string::npos && h.front() != '[') h = "[" + h + "]";
  std::string out = "postgresql://";
  out += PercentEncode(user);
  out += ':';
  out += PercentEncode(password);
  out += '@';
  out += h;
  out += ':';
  out += std::to_string(port);
  out += '/';
  out += PercentEncode(database);
  out += "?sslmode=disable";
  return out;
}

absl::StatusOr<std::string> GeneratePassword() {
  absl::StatusOr<std::string> bytes = auth::RandomBytes(24);
  if (!bytes.ok()) return bytes.status();
  return absl::WebSafeBase64Escape(*bytes);  // no padding: 24 bytes -> 32 chars
}

absl::StatusOr<std::string> NewSessionId() {
  absl::StatusOr<std::string> bytes = auth::RandomBytes(8);
  if (!bytes.ok()) return bytes.status();
  // 11 characters: short enough for std::string's inline buffer, so none of
  // the copies a session keeps (its own, its cancel key's, the Endpoint's
  // and its registry's) allocates.
  return absl::WebSafeBase64Escape(*bytes);
}

std::string BuildLinkHello(const ParamList& app_params, std::string_view session_id) {
  protocol::StartupMessage hello;
  hello.protocol_version = protocol::kProtocolVersion30;
  for (const auto& [name, value] : app_params) hello.parameters.emplace_back(name, value);
  hello.parameters.emplace_back(kSessionIdParam, session_id);
  std::string out;
  protocol::Encode(hello, out);
  return out;
}

std::string BuildCancelHello(std::string_view session_id, std::string_view database) {
  protocol::StartupMessage hello;
  hello.protocol_version = protocol::kProtocolVersion30;
  hello.parameters.emplace_back(kCancelSessionParam, session_id);
  if (!database.empty()) hello.parameters.emplace_back(kDatabaseParam, database);
  std::string out;
  protocol::Encode(hello, out);
  return out;
}

namespace {
std::string_view ValueOf(const ParamList& params, std::string_view name) {
  for (const auto& [n, v] : params) {
    if (n == name) return v;
  }
  return {};
}
bool IsOverlayParam(std::string_view name) {
  return std::find(std::begin(kAppOverlayParams), std::end(kAppOverlayParams), name) != std::end(kAppOverlayParams);
}
}  // namespace

void CanonicalizeAppParams(const ParamList& origin, ParamList& app_params) {
  for (auto& [name, value] : app_params) {
    if (!IsOverlayParam(name)) continue;
    value = CanonicalStartupValue(name, value, ValueOf(origin, "DateStyle"), ValueOf(origin, "server_version"));
  }
}

ParamList OverlayParams(const ParamList& origin, const ParamList& app_params) {
  auto app_value = [&](std::string_view name) -> const std::string* {
    for (const auto& [n, v] : app_params) {
      if (n == name) return &v;
    }
    return nullptr;
  };
  ParamList out = origin;
  for (std::string_view name : kAppOverlayParams) {
    const std::string* value = app_value(name);
    std::string replacement;
    if (value != nullptr) {
      // As PostgreSQL reports it ("UTF8" for "utf-8"), not as the app spelled it.
      replacement = CanonicalStartupValue(name, *value, ValueOf(origin, "DateStyle"), ValueOf(origin, "server_version"));
    } else if (name != "application_name") {
      continue;  // keep the origin's value
    }
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == name; });
    if (it != out.end()) {
      it->second = std::move(replacement);
    } else {
      out.emplace_back(std::string(name), std::move(replacement));
    }
  }
  return out;
}

std::string RedactOrigin(std::string_view origin) {
  std::string s(origin);
  size_t scheme = s.find("://");
  if (scheme != std::string::npos) {
    size_t auth_start = scheme + 3;
    size_t at = s.find('@', auth_start);
    size_t slash = s.find('/', auth_start);
    if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
      size_t colon = s.find(':', auth_start);
      if (colon != std::string::npos && colon < at) s.replace(colon + 1, at - colon - 1, "***");
    }
    // password=... in the query string
    size_t q = s.find("password=");
    if (q != std::string::npos) {
      size_t end = s.find('&', q);
      s.replace(q + 9, (end == std::string::npos ? s.size() : end) - q - 9, "***");
    }
    return s;
  }
  // key=value form: password=value or password='quoted value'
  size_t pos = 0;
  while ((pos = s.find("password", pos)) != std::string::npos) {
    size_t eq = s.find_first_not_of(' ', pos + 8);
    if (eq == std::string::npos || s[eq] != '=') {
      pos += 8;
      continue;
    }
    size_t v = s.find_first_not_of(' ', eq + 1);
    if (v == std::string::npos) break;
    size_t end;
    if (s[v] == '\'') {
      end = v + 1;
      while (end < s.size() && s[end] != '\'') end += (s[end] == '\\') ? 2 : 1;
      end = std::min(end + 1, s.size());
    } else {
      end = s.find(' ', v);
      if (end == std::string::npos) end = s.size();
    }
    s.replace(v, end - v, "***");
    pos = v + 3;
  }
  return s;
}

void ReleaseFreedMemory() {
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}

}  // namespace hyperpool::client
