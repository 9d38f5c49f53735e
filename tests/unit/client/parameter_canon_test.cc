// What PostgreSQL 15 reports for startup values (client/parameter_canon.h):
// the expectations below are what a direct connection to PostgreSQL 15 is
// told in ParameterStatus.
#include "client/parameter_canon.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <string>
#include <tuple>

namespace hc = hyperpool::client;

TEST_CASE("client_encoding is reported by its official name") {
  auto [given, reported] = GENERATE(table<std::string, std::string>({
      {"utf-8", "UTF8"}, {"UTF8", "UTF8"}, {"utf8", "UTF8"}, {"unicode", "UTF8"}, {"UNICODE", "UNICODE"},
      {"latin1", "LATIN1"}, {"ISO-8859-1", "LATIN1"}, {"iso_8859_15", "LATIN9"}, {"sql_ascii", "SQL_ASCII"},
      {"Windows-1252", "WIN1252"}, {"shift_jis", "SJIS"}, {"euc-jp", "EUC_JP"}, {"koi8-r", "KOI8R"},
      {"no-such-encoding", "no-such-encoding"}}));
  CAPTURE(given);
  CHECK(hc::CanonicalStartupValue("client_encoding", given, "ISO, MDY", "15.5") == reported);
}

TEST_CASE("DateStyle is reported as style, order") {
  auto [given, current, reported] = GENERATE(table<std::string, std::string, std::string>({
      {"iso, dmy", "ISO, MDY", "ISO, DMY"},
      {"ISO,DMY", "ISO, MDY", "ISO, DMY"},
      {"sql", "ISO, DMY", "SQL, DMY"},
      {"ymd", "Postgres, MDY", "Postgres, YMD"},
      {"german", "ISO, MDY", "German, DMY"},
      {"german, ymd", "ISO, MDY", "German, YMD"},
      {"postgres, european", "ISO, MDY", "Postgres, DMY"},
      {"us", "ISO, DMY", "ISO, MDY"},
      {"default", "SQL, DMY", "SQL, DMY"},
      {"\"ISO\", \"YMD\"", "ISO, MDY", "ISO, YMD"},
      {"iso, sql", "ISO, MDY", "iso, sql"},      // conflicting: rejected by the origin, kept
      {"bogus", "ISO, MDY", "bogus"},
  }));
  CAPTURE(given, current);
  CHECK(hc::CanonicalStartupValue("DateStyle", given, current, "15.5") == reported);
}

TEST_CASE("IntervalStyle, application_name and TimeZone") {
  CHECK(hc::CanonicalStartupValue("IntervalStyle", "ISO_8601", "ISO, MDY", "15") == "iso_8601");
  CHECK(hc::CanonicalStartupValue("IntervalStyle", "Postgres_Verbose", "ISO, MDY", "15") == "postgres_verbose");
  CHECK(hc::CanonicalStartupValue("application_name", "caf\xc3\xa9\t1", "ISO, MDY", "15.5") == "caf???1");
  CHECK(hc::CanonicalStartupValue("application_name", "caf\xc3\xa9", "ISO, MDY", "16.1") == "caf\\xc3\\xa9");
  CHECK(hc::CanonicalStartupValue("TimeZone", "Europe/Paris", "ISO, MDY", "15") == "Europe/Paris");
}
