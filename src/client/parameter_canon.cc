#include "client/parameter_canon.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <utility>
#include <vector>

namespace hyperpool::client {
namespace {

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool StartsWithIgnoreCase(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && EqualsIgnoreCase(text.substr(0, prefix.size()), prefix);
}

// Every spelling PostgreSQL's encoding lookup knows, reduced to lowercase
// alphanumerics (how it compares), with the official name it reports.
constexpr std::pair<std::string_view, std::string_view> kEncodings[] = {
    {"abc", "WIN1258"},        {"alt", "WIN866"},          {"big5", "BIG5"},
    {"euccn", "EUC_CN"},       {"eucjis2004", "EUC_JIS_2004"}, {"eucjp", "EUC_JP"},
    {"euckr", "EUC_KR"},       {"euctw", "EUC_TW"},        {"gb18030", "GB18030"},
    {"gbk", "GBK"},            {"iso88591", "LATIN1"},     {"iso885910", "LATIN6"},
    {"iso885913", "LATIN7"},   {"iso885914", "LATIN8"},    {"iso885915", "LATIN9"},
    {"iso885916", "LATIN10"},  {"iso88592", "LATIN2"},     {"iso88593", "LATIN3"},
    {"iso88594", "LATIN4"},    {"iso88595", "ISO_8859_5"}, {"iso88596", "ISO_8859_6"},
    {"iso88597", "ISO_8859_7"}, {"iso88598", "ISO_8859_8"}, {"iso88599", "LATIN5"},
    {"johab", "JOHAB"},        {"koi8", "KOI8R"},          {"koi8r", "KOI8R"},
    {"koi8u", "KOI8U"},        {"latin1", "LATIN1"},       {"latin10", "LATIN10"},
    {"latin2", "LATIN2"},      {"latin3", "LATIN3"},       {"latin4", "LATIN4"},
    {"latin5", "LATIN5"},      {"latin6", "LATIN6"},       {"latin7", "LATIN7"},
    {"latin8", "LATIN8"},      {"latin9", "LATIN9"},       {"mskanji", "SJIS"},
    {"muleinternal", "MULE_INTERNAL"}, {"shiftjis", "SJIS"}, {"shiftjis2004", "SHIFT_JIS_2004"},
    {"sjis", "SJIS"},          {"sqlascii", "SQL_ASCII"},  {"tcvn", "WIN1258"},
    {"tcvn5712", "WIN1258"},   {"uhc", "UHC"},             {"unicode", "UTF8"},
    {"utf8", "UTF8"},          {"vscii", "WIN1258"},       {"win", "WIN1251"},
    {"win1250", "WIN1250"},    {"win1251", "WIN1251"},     {"win1252", "WIN1252"},
    {"win1253", "WIN1253"},    {"win1254", "WIN1254"},     {"win1255", "WIN1255"},
    {"win1256", "WIN1256"},    {"win1257", "WIN1257"},     {"win1258", "WIN1258"},
    {"win866", "WIN866"},      {"win874", "WIN874"},       {"win932", "SJIS"},
    {"win936", "GBK"},         {"win949", "UHC"},          {"win950", "BIG5"},
    {"windows1250", "WIN1250"}, {"windows1251", "WIN1251"}, {"windows1252", "WIN1252"},
    {"windows1253", "WIN1253"}, {"windows1254", "WIN1254"}, {"windows1255", "WIN1255"},
    {"windows1256", "WIN1256"}, {"windows1257", "WIN1257"}, {"windows1258", "WIN1258"},
    {"windows866", "WIN866"},  {"windows874", "WIN874"},   {"windows932", "SJIS"},
    {"windows936", "GBK"},     {"windows949", "UHC"},      {"windows950", "BIG5"},
};

enum class DateStyleKind { kIso, kSql, kPostgres, kGerman };
enum class DateOrder { kYmd, kDmy, kMdy };

// SplitIdentifierString(value, ','): trimmed elements, quoted ones kept as
// written; nullopt on a syntax error (an empty element, junk after a quote).
std::optional<std::vector<std::string>> SplitList(std::string_view value) {
  std::vector<std::string> out;
  size_t i = 0;
  auto skip_space = [&] {
    while (i < value.size() && std::isspace(static_cast<unsigned char>(value[i]))) ++i;
  };
  skip_space();
  if (i == value.size()) return out;  // an empty list is allowed
  for (;;) {
    std::string element;
    if (value[i] == '"') {
      for (++i;; ++i) {
        if (i == value.size()) return std::nullopt;
        if (value[i] == '"') {
          if (i + 1 < value.size() && value[i + 1] == '"') {
            element.push_back('"');
            ++i;
            continue;
          }
          ++i;
          break;
        }
        element.push_back(value[i]);
      }
    } else {
      while (i < value.size() && value[i] != ',' && !std::isspace(static_cast<unsigned char>(value[i]))) {
        element.push_back(value[i++]);
      }
    }
    if (element.empty()) return std::nullopt;
    out.push_back(std::move(element));
    skip_space();
    if (i == value.size()) return out;
    if (value[i] != ',') return std::nullopt;
    ++i;
    skip_space();
  }
}

struct DateStyleValue {
  DateStyleKind style = DateStyleKind::kIso;
  DateOrder order = DateOrder::kMdy;
};

std::optional<DateStyleValue> ParseDateStyle(std::string_view value, DateStyleValue current,
                                             std::string_view default_text, int depth) {
  auto elements = SplitList(value);
  if (!elements) return std::nullopt;
  DateStyleValue out = current;
  bool have_style = false;
  bool have_order = false;
  auto set_style = [&](DateStyleKind s) {
    if (have_style && out.style != s) return false;
    out.style = s;
    have_style = true;
    return true;
  };
  auto set_order = [&](DateOrder o) {
    if (have_order && out.order != o) return false;
    out.order = o;
    have_order = true;
    return true;
  };
  for (const std::string& tok : *elements) {
    bool ok = true;
    if (EqualsIgnoreCase(tok, "iso")) {
      ok = set_style(DateStyleKind::kIso);
    } else if (EqualsIgnoreCase(tok, "sql")) {
      ok = set_style(DateStyleKind::kSql);
    } else if (StartsWithIgnoreCase(tok, "postgres")) {
      ok = set_style(DateStyleKind::kPostgres);
    } else if (EqualsIgnoreCase(tok, "german")) {
      ok = set_style(DateStyleKind::kGerman);
      if (!have_order) out.order = DateOrder::kDmy;  // unless given explicitly
    } else if (EqualsIgnoreCase(tok, "ymd")) {
      ok = set_order(DateOrder::kYmd);
    } else if (EqualsIgnoreCase(tok, "dmy") || StartsWithIgnoreCase(tok, "euro")) {
      ok = set_order(DateOrder::kDmy);
    } else if (EqualsIgnoreCase(tok, "mdy") || EqualsIgnoreCase(tok, "us") || StartsWithIgnoreCase(tok, "noneuro")) {
      ok = set_order(DateOrder::kMdy);
    } else if (EqualsIgnoreCase(tok, "default") && depth == 0) {
      auto reset = ParseDateStyle(default_text, DateStyleValue{}, default_text, depth + 1);
      if (!reset) return std::nullopt;
      if (!have_style) out.style = reset->style;
      if (!have_order) out.order = reset->order;
    } else {
      return std::nullopt;
    }
    if (!ok) return std::nullopt;  // conflicting styles or orders
  }
  return out;
}

int MajorVersion(std::string_view server_version) {
  int major = 0;
  for (char c : server_version) {
    if (c < '0' || c > '9') break;
    major = major * 10 + (c - '0');
    if (major > 1000) break;
  }
  return major;
}

std::string CleanApplicationName(std::string_view value, int major) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 32 && u <= 126) {
      out.push_back(c);
    } else if (major >= 16) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    } else {
      out.push_back('?');
    }
  }
  return out;
}

}  // namespace

std::optional<std::string> CanonicalEncodingName(std::string_view name) {
  if (name.empty() || name.size() >= 64) return std::nullopt;  // NAMEDATALEN
  std::string key;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) key.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  for (const auto& [alias, official] : kEncodings) {
    if (alias == key) return std::string(official);
  }
  return std::nullopt;
}

std::optional<std::string> CanonicalDateStyle(std::string_view value, std::string_view current) {
  // The origin's current value is itself canonical; unparsable: ISO, MDY.
  DateStyleValue base = ParseDateStyle(current, DateStyleValue{}, "ISO, MDY", 1).value_or(DateStyleValue{});
  auto parsed = ParseDateStyle(value, base, current, 0);
  if (!parsed) return std::nullopt;
  std::string out;
  switch (parsed->style) {
    case DateStyleKind::kIso: out = "ISO"; break;
    case DateStyleKind::kSql: out = "SQL"; break;
    case DateStyleKind::kGerman: out = "German"; break;
    case DateStyleKind::kPostgres: out = "Postgres"; break;
  }
  switch (parsed->order) {
    case DateOrder::kYmd: out += ", YMD"; break;
    case DateOrder::kDmy: out += ", DMY"; break;
    case DateOrder::kMdy: out += ", MDY"; break;
  }
  return out;
}

std::string CanonicalStartupValue(std::string_view name, std::string_view value, std::string_view current_datestyle,
                                  std::string_view server_version) {
  if (name == "client_encoding") {
    // PostgreSQL keeps "UNICODE" as spelled (pre-9.1 JDBC drivers read it back).
    if (value == "UNICODE") return std::string(value);
    return CanonicalEncodingName(value).value_or(std::string(value));
  }
  if (name == "DateStyle") return CanonicalDateStyle(value, current_datestyle).value_or(std::string(value));
  if (name == "IntervalStyle") {
    for (std::string_view style : {"postgres", "postgres_verbose", "sql_standard", "iso_8601"}) {
      if (EqualsIgnoreCase(value, style)) return std::string(style);
    }
    return std::string(value);
  }
  if (name == "application_name") return CleanApplicationName(value, MajorVersion(server_version));
  return std::string(value);
}

}  // namespace hyperpool::client
