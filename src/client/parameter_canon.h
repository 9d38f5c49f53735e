// The spelling PostgreSQL reports (ParameterStatus, SHOW) for a value an app
// put in its startup packet, for the settings the Client reports itself
// (client_util.h, kAppOverlayParams). A direct connection that starts with
// client_encoding=utf-8 is told "UTF8", with DateStyle=iso, dmy "ISO, DMY";
// drivers compare against what they are told (asyncpg's suite does). Pure
// functions, as PostgreSQL 15's check/assign hooks compute them:
//  - client_encoding: pg_char_to_encoding's lookup (case and every
//    non-alphanumeric character ignored, aliases such as "unicode",
//    "latin1", "win1252"), reported by its official name;
//  - DateStyle: check_datestyle's keywords, a half not given kept from the
//    origin's current value, reported as "<style>, <order>";
//  - IntervalStyle: the enum's names, case-insensitive, reported lowercase;
//  - application_name: bytes outside printable ASCII replaced ('?' before
//    PostgreSQL 16, "\xHH" from 16 on, per the origin's server_version).
// TimeZone is reported as given: its canonical spelling comes from the
// origin's time zone files (the case of "Europe/Paris").
// A value PostgreSQL would reject is returned unchanged (the origin then
// rejects it when the session's settings are applied).
#ifndef HYPERPOOL_CLIENT_PARAMETER_CANON_H_
#define HYPERPOOL_CLIENT_PARAMETER_CANON_H_

#include <optional>
#include <string>
#include <string_view>

namespace hyperpool::client {

// The official name of a client encoding ("UTF8" for "utf-8"), or nullopt
// if PostgreSQL knows no such encoding.
std::optional<std::string> CanonicalEncodingName(std::string_view name);

// DateStyle as PostgreSQL reports it after `value` is set over `current`
// (the origin's reported DateStyle, e.g. "ISO, MDY"); nullopt if `value`
// is invalid (unknown keyword, conflicting styles or orders).
std::optional<std::string> CanonicalDateStyle(std::string_view value, std::string_view current);

// What PostgreSQL reports for setting `name` (as in kAppOverlayParams) given
// `value` in a startup packet. `current_datestyle` and `server_version` are
// the origin's reported values.
std::string CanonicalStartupValue(std::string_view name, std::string_view value,
                                  std::string_view current_datestyle, std::string_view server_version);

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_PARAMETER_CANON_H_
