// The SQLSTATEs hyperpool reports or looks for, in one place (PostgreSQL
// docs, Appendix A "PostgreSQL Error Codes"). In namespace hyperpool so that
// every layer names them unqualified; the codec's ErrorResponse builders take
// them as plain strings.
#ifndef HYPERPOOL_PROTOCOL_SQLSTATE_H_
#define HYPERPOOL_PROTOCOL_SQLSTATE_H_

#include <string_view>

namespace hyperpool {

// Class 0A: feature_not_supported (also "cached plan must not change result type").
inline constexpr std::string_view kSqlStateFeatureNotSupported = "0A000";
// Class 08: connection exceptions.
inline constexpr std::string_view kSqlStateCannotConnect = "08001";      // sqlclient_unable_to_establish_sqlconnection
inline constexpr std::string_view kSqlStateConnectionFailure = "08006";  // connection_failure
inline constexpr std::string_view kSqlStateProtocolViolation = "08P01";  // protocol_violation
// Class 25: invalid transaction state.
inline constexpr std::string_view kSqlStateIdleInTransactionTimeout = "25P03";
// Class 28: invalid authorization.
inline constexpr std::string_view kSqlStateInvalidAuthorization = "28000";
inline constexpr std::string_view kSqlStateInvalidPassword = "28P01";
// Class 3D: invalid_catalog_name (no such database).
inline constexpr std::string_view kSqlStateInvalidCatalog = "3D000";
// Class 42: syntax error or access rule violation.
inline constexpr std::string_view kSqlStateInsufficientPrivilege = "42501";
inline constexpr std::string_view kSqlStateSyntaxError = "42601";
inline constexpr std::string_view kSqlStateUndefinedObject = "42704";
// Class 53: insufficient resources.
inline constexpr std::string_view kSqlStateOutOfMemory = "53200";
inline constexpr std::string_view kSqlStateTooManyConnections = "53300";
inline constexpr std::string_view kSqlStateConfigurationLimitExceeded = "53400";
// Class 54: program_limit_exceeded (a message over max_message_size).
inline constexpr std::string_view kSqlStateProgramLimitExceeded = "54000";
// Class 57: operator intervention.
inline constexpr std::string_view kSqlStateQueryCanceled = "57014";
inline constexpr std::string_view kSqlStateAdminShutdown = "57P01";
inline constexpr std::string_view kSqlStateIdleSessionTimeout = "57P05";

}  // namespace hyperpool

#endif  // HYPERPOOL_PROTOCOL_SQLSTATE_H_
