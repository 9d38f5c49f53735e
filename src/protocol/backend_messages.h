// Messages a backend (server) sends: typed decoders and encoders (PostgreSQL
// docs, "Frontend/Backend Protocol" > "Message Formats", the messages marked
// (B)). See common_messages.h for the Decode/Encode conventions.
//
// The Endpoint half decodes these from origins; the Client half encodes them
// (or forwards Frame::raw) to apps.
#ifndef HYPERPOOL_PROTOCOL_BACKEND_MESSAGES_H_
#define HYPERPOOL_PROTOCOL_BACKEND_MESSAGES_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "protocol/common_messages.h"
#include "protocol/frame_reader.h"
#include "protocol/tags.h"

namespace hyperpool::protocol {

// ---------------------------------------------------------------------------
// Authentication 'R' ("Message Flow" > "Start-up", "SASL Authentication").
// ---------------------------------------------------------------------------

// The Int32 that follows the 'R' tag.
enum class AuthType : int32_t {
  kOk = 0,
  kKerberosV5 = 2,
  kCleartextPassword = 3,
  kMd5Password = 5,
  kGss = 7,
  kGssContinue = 8,
  kSspi = 9,
  kSasl = 10,
  kSaslContinue = 11,
  kSaslFinal = 12,
};

struct AuthenticationOk {
  bool operator==(const AuthenticationOk&) const = default;
};
struct AuthenticationKerberosV5 {
  bool operator==(const AuthenticationKerberosV5&) const = default;
};
struct AuthenticationCleartextPassword {
  bool operator==(const AuthenticationCleartextPassword&) const = default;
};
struct AuthenticationMd5Password {
  std::string_view salt;  // Exactly 4 bytes.
  bool operator==(const AuthenticationMd5Password&) const = default;
};
struct AuthenticationGss {
  bool operator==(const AuthenticationGss&) const = default;
};
struct AuthenticationGssContinue {
  std::string_view data;
  bool operator==(const AuthenticationGssContinue&) const = default;
};
struct AuthenticationSspi {
  bool operator==(const AuthenticationSspi&) const = default;
};
struct AuthenticationSasl {
  std::vector<std::string_view> mechanisms;  // In server preference order.
  bool operator==(const AuthenticationSasl&) const = default;
};
struct AuthenticationSaslContinue {
  std::string_view data;
  bool operator==(const AuthenticationSaslContinue&) const = default;
};
struct AuthenticationSaslFinal {
  std::string_view data;
  bool operator==(const AuthenticationSaslFinal&) const = default;
};

using Authentication =
    std::variant<AuthenticationOk, AuthenticationKerberosV5, AuthenticationCleartextPassword,
                 AuthenticationMd5Password, AuthenticationGss, AuthenticationGssContinue,
                 AuthenticationSspi, AuthenticationSasl, AuthenticationSaslContinue,
                 AuthenticationSaslFinal>;

// Decodes any 'R' payload by its subtype; unknown subtypes are an error.
absl::StatusOr<Authentication> DecodeAuthentication(std::string_view payload);

// ---------------------------------------------------------------------------
// Session state.
// ---------------------------------------------------------------------------

// ParameterStatus 'S': a run-time parameter the server reports.
struct ParameterStatus {
  std::string_view name;
  std::string_view value;
  bool operator==(const ParameterStatus&) const = default;
};

// BackendKeyData 'K': cancellation key. 4 bytes in 3.0, 4..256 from 3.2.
struct BackendKeyData {
  int32_t process_id = 0;
  std::string_view secret_key;
  bool operator==(const BackendKeyData&) const = default;
};

// Transaction status carried by ReadyForQuery.
enum class TransactionStatus : char {
  kIdle = 'I',     // Not in a transaction block: a pooled connection may be released.
  kInBlock = 'T',  // In a transaction block.
  kFailed = 'E',   // In a failed transaction block (queries rejected until ROLLBACK).
};

// ReadyForQuery 'Z'.
struct ReadyForQuery {
  TransactionStatus status = TransactionStatus::kIdle;
  bool operator==(const ReadyForQuery&) const = default;
};

// NegotiateProtocolVersion 'v' (the server supports an older minor version
// or not all requested "_pq_." options).
struct NegotiateProtocolVersion {
  int32_t newest_minor_version = 0;
  std::vector<std::string_view> unrecognized_options;
  bool operator==(const NegotiateProtocolVersion&) const = default;
};

// ---------------------------------------------------------------------------
// Query results.
// ---------------------------------------------------------------------------

// One column of a RowDescription.
struct FieldDescription {
  std::string_view name;
  Oid table_oid = 0;         // 0 if not a table column.
  int16_t column_attr = 0;   // Attribute number, 0 if not a table column.
  Oid type_oid = 0;
  int16_t type_size = 0;     // pg_type.typlen; negative = variable width.
  int32_t type_modifier = -1;
  int16_t format = kFormatText;
  bool operator==(const FieldDescription&) const = default;
};

// RowDescription 'T'.
struct RowDescription {
  std::vector<FieldDescription> fields;
  bool operator==(const RowDescription&) const = default;
};

// DataRow 'D'. Kept as the raw column bytes (validated by DecodeDataRow) so
// decoding allocates nothing; walk the columns with begin()/end() or
// ForEachColumn(). Iterating a DataRow that did not come from DecodeDataRow
// (or whose `columns` is inconsistent with `column_count`) is undefined.
struct DataRow {
  uint16_t column_count = 0;
  // The column data after the Int16 count: per column Int32 length (-1 =
  // NULL) followed by that many bytes.
  std::string_view columns;

  // Forward iterator yielding NullableValue (nullopt = NULL) per column.
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = NullableValue;
    using difference_type = std::ptrdiff_t;
    using pointer = const NullableValue*;
    using reference = NullableValue;

    Iterator() = default;
    NullableValue operator*() const;
    Iterator& operator++();
    Iterator operator++(int);
    bool operator==(const Iterator& other) const { return pos_ == other.pos_; }

   private:
    friend struct DataRow;
    explicit Iterator(const char* pos) : pos_(pos) {}
    const char* pos_ = nullptr;
  };
  Iterator begin() const { return Iterator(columns.data()); }
  Iterator end() const { return Iterator(columns.data() + columns.size()); }

  // Calls `visit(size_t index, NullableValue value)` for each column.
  template <typename Visitor>
  void ForEachColumn(Visitor&& visit) const {
    size_t i = 0;
    for (NullableValue v : *this) visit(i++, v);
  }

  bool operator==(const DataRow&) const = default;
};

// CommandComplete 'C': the command tag ("SELECT 3", "INSERT 0 1", ...).
struct CommandComplete {
  std::string_view tag;
  bool operator==(const CommandComplete&) const = default;
};

// EmptyQueryResponse 'I'.
struct EmptyQueryResponse {
  bool operator==(const EmptyQueryResponse&) const = default;
};

// ---------------------------------------------------------------------------
// Errors and notices ("Error and Notice Message Fields").
// ---------------------------------------------------------------------------

// Field type codes. Unknown codes are kept verbatim: the docs require
// frontends to ignore fields they do not recognise, and we forward them.
enum class FieldCode : char {
  kSeverity = 'S',               // Localized severity.
  kSeverityNonLocalized = 'V',   // ERROR, FATAL, PANIC, WARNING, NOTICE, ...
  kSqlState = 'C',
  kMessage = 'M',
  kDetail = 'D',
  kHint = 'H',
  kPosition = 'P',
  kInternalPosition = 'p',
  kInternalQuery = 'q',
  kWhere = 'W',
  kSchemaName = 's',
  kTableName = 't',
  kColumnName = 'c',
  kDataTypeName = 'd',
  kConstraintName = 'n',
  kFile = 'F',
  kLine = 'L',
  kRoutine = 'R',
};

struct NoticeField {
  char code = 0;  // A FieldCode value, or an unknown code.
  std::string_view value;
  bool operator==(const NoticeField&) const = default;
};

// The body shared by ErrorResponse and NoticeResponse: every field, in order.
struct NoticeFields {
  std::vector<NoticeField> fields;

  // The value of the first field with `code`, or "" if absent.
  std::string_view Get(FieldCode code) const;
  std::string_view Get(char code) const;
  // Non-localized severity ('V') if present, else the localized one ('S').
  std::string_view severity() const;
  // SQLSTATE ('C'); "" if the peer omitted it (callers must cope).
  std::string_view sqlstate() const { return Get(FieldCode::kSqlState); }
  std::string_view message() const { return Get(FieldCode::kMessage); }
  std::string_view detail() const { return Get(FieldCode::kDetail); }
  std::string_view hint() const { return Get(FieldCode::kHint); }
  bool operator==(const NoticeFields&) const = default;
};

// ErrorResponse 'E'.
struct ErrorResponse : NoticeFields {
  bool operator==(const ErrorResponse&) const = default;
};
// NoticeResponse 'N'.
struct NoticeResponse : NoticeFields {
  bool operator==(const NoticeResponse&) const = default;
};

// Appends an ErrorResponse the pooler synthesises for an app, with fields
// S and V = `severity` ("ERROR", "FATAL"), C = `sqlstate`, M = `message`, and
// D / H when `detail` / `hint` are non-empty.
void EncodeErrorResponse(std::string& out, std::string_view severity,
                         std::string_view sqlstate, std::string_view message,
                         std::string_view detail = {}, std::string_view hint = {});
// Same for a NoticeResponse (severity e.g. "NOTICE", "WARNING").
void EncodeNoticeResponse(std::string& out, std::string_view severity,
                          std::string_view sqlstate, std::string_view message,
                          std::string_view detail = {}, std::string_view hint = {});

// ---------------------------------------------------------------------------
// Extended query.
// ---------------------------------------------------------------------------

struct ParseComplete {
  bool operator==(const ParseComplete&) const = default;
};
struct BindComplete {
  bool operator==(const BindComplete&) const = default;
};
struct CloseComplete {
  bool operator==(const CloseComplete&) const = default;
};
struct NoData {
  bool operator==(const NoData&) const = default;
};
struct PortalSuspended {
  bool operator==(const PortalSuspended&) const = default;
};

// ParameterDescription 't'.
struct ParameterDescription {
  std::vector<Oid> parameter_types;
  bool operator==(const ParameterDescription&) const = default;
};

// ---------------------------------------------------------------------------
// COPY ("Message Flow" > "COPY Operations"). CopyData/CopyDone are in
// common_messages.h.
// ---------------------------------------------------------------------------

struct CopyResponseBody {
  int8_t format = 0;  // 0 = textual, 1 = binary (overall format).
  std::vector<int16_t> column_formats;
  bool operator==(const CopyResponseBody&) const = default;
};
// CopyInResponse 'G'.
struct CopyInResponse : CopyResponseBody {
  bool operator==(const CopyInResponse&) const = default;
};
// CopyOutResponse 'H'.
struct CopyOutResponse : CopyResponseBody {
  bool operator==(const CopyOutResponse&) const = default;
};
// CopyBothResponse 'W' (replication).
struct CopyBothResponse : CopyResponseBody {
  bool operator==(const CopyBothResponse&) const = default;
};

// ---------------------------------------------------------------------------
// Asynchronous and legacy.
// ---------------------------------------------------------------------------

// NotificationResponse 'A' (LISTEN/NOTIFY).
struct NotificationResponse {
  int32_t process_id = 0;
  std::string_view channel;
  std::string_view payload;
  bool operator==(const NotificationResponse&) const = default;
};

// FunctionCallResponse 'V'.
struct FunctionCallResponse {
  NullableValue result;
  bool operator==(const FunctionCallResponse&) const = default;
};

// Decoders: `payload` is Frame::payload of a frame with the matching tag.
absl::StatusOr<ParameterStatus> DecodeParameterStatus(std::string_view payload);
absl::StatusOr<BackendKeyData> DecodeBackendKeyData(std::string_view payload);
absl::StatusOr<ReadyForQuery> DecodeReadyForQuery(std::string_view payload);
absl::StatusOr<NegotiateProtocolVersion> DecodeNegotiateProtocolVersion(std::string_view payload);
absl::StatusOr<RowDescription> DecodeRowDescription(std::string_view payload);
// Whether two RowDescription payloads describe the same result type as
// PostgreSQL's plan cache judges it ("cached plan must not change result
// type": plancache.c compares the result's tuple descriptors, i.e. the
// column count and each column's name, type and type modifier). A
// column's table OID and attribute number are not part of it (a table
// dropped and re-created with the same columns has new ones), nor are the
// format codes (what a Bind asked for). Malformed payloads never match.
bool SameResultType(std::string_view a, std::string_view b);
// A digest of exactly what SameResultType compares, never 0: equal result
// types give equal digests, so a cache key can carry the result type a
// driver holds for its statement (cache/tier.h, CandidateUnit::result_type).
// `payload` is a RowDescription's payload, or empty for NoData. Not seeded:
// every process computes the same digest (the shared tier's keys).
uint64_t ResultTypeDigest(std::string_view payload);
absl::StatusOr<DataRow> DecodeDataRow(std::string_view payload);
absl::StatusOr<CommandComplete> DecodeCommandComplete(std::string_view payload);
absl::StatusOr<EmptyQueryResponse> DecodeEmptyQueryResponse(std::string_view payload);
absl::StatusOr<ErrorResponse> DecodeErrorResponse(std::string_view payload);
absl::StatusOr<NoticeResponse> DecodeNoticeResponse(std::string_view payload);
absl::StatusOr<ParseComplete> DecodeParseComplete(std::string_view payload);
absl::StatusOr<BindComplete> DecodeBindComplete(std::string_view payload);
absl::StatusOr<CloseComplete> DecodeCloseComplete(std::string_view payload);
absl::StatusOr<NoData> DecodeNoData(std::string_view payload);
absl::StatusOr<PortalSuspended> DecodePortalSuspended(std::string_view payload);
absl::StatusOr<ParameterDescription> DecodeParameterDescription(std::string_view payload);
absl::StatusOr<CopyInResponse> DecodeCopyInResponse(std::string_view payload);
absl::StatusOr<CopyOutResponse> DecodeCopyOutResponse(std::string_view payload);
absl::StatusOr<CopyBothResponse> DecodeCopyBothResponse(std::string_view payload);
absl::StatusOr<NotificationResponse> DecodeNotificationResponse(std::string_view payload);
absl::StatusOr<FunctionCallResponse> DecodeFunctionCallResponse(std::string_view payload);

// In-place views and edits of raw backend frames (tag and length included)
// for code that forwards them as received instead of re-encoding:
//  - the RowDescription `raw` with every column's format code 0 (text),
//    appended to `out`; false (with `out` holding a partial copy) when it is
//    malformed;
bool AppendWithTextFormats(std::string_view raw, std::string& out);
//  - a NotificationResponse's process id (nullopt: too short to hold one),
//    and the frame at `raw` (at least 9 bytes) given another one.
std::optional<int32_t> PeekNotificationPid(std::string_view raw);
void PatchNotificationPid(char* raw, int32_t pid);
// CopyData / CopyDone: see common_messages.h.

// Encoders: append the complete frame.
void Encode(const AuthenticationOk& msg, std::string& out);
void Encode(const AuthenticationKerberosV5& msg, std::string& out);
void Encode(const AuthenticationCleartextPassword& msg, std::string& out);
// The salt must be 4 bytes (shorter is zero-padded, longer truncated).
void Encode(const AuthenticationMd5Password& msg, std::string& out);
void Encode(const AuthenticationGss& msg, std::string& out);
void Encode(const AuthenticationGssContinue& msg, std::string& out);
void Encode(const AuthenticationSspi& msg, std::string& out);
void Encode(const AuthenticationSasl& msg, std::string& out);
void Encode(const AuthenticationSaslContinue& msg, std::string& out);
void Encode(const AuthenticationSaslFinal& msg, std::string& out);
void Encode(const Authentication& msg, std::string& out);
void Encode(const ParameterStatus& msg, std::string& out);
void Encode(const BackendKeyData& msg, std::string& out);
void Encode(const ReadyForQuery& msg, std::string& out);
void Encode(const NegotiateProtocolVersion& msg, std::string& out);
void Encode(const RowDescription& msg, std::string& out);
// Appends the DataRow verbatim (count + raw columns).
void Encode(const DataRow& msg, std::string& out);
// Builds a DataRow from column values (nullopt = NULL).
void EncodeDataRow(absl::Span<const NullableValue> columns, std::string& out);
void Encode(const CommandComplete& msg, std::string& out);
void Encode(const EmptyQueryResponse& msg, std::string& out);
void Encode(const ErrorResponse& msg, std::string& out);
void Encode(const NoticeResponse& msg, std::string& out);
void Encode(const ParseComplete& msg, std::string& out);
void Encode(const BindComplete& msg, std::string& out);
void Encode(const CloseComplete& msg, std::string& out);
void Encode(const NoData& msg, std::string& out);
void Encode(const PortalSuspended& msg, std::string& out);
void Encode(const ParameterDescription& msg, std::string& out);
void Encode(const CopyInResponse& msg, std::string& out);
void Encode(const CopyOutResponse& msg, std::string& out);
void Encode(const CopyBothResponse& msg, std::string& out);
void Encode(const NotificationResponse& msg, std::string& out);
void Encode(const FunctionCallResponse& msg, std::string& out);

// ---------------------------------------------------------------------------
// Generic dispatch on the tag.
// ---------------------------------------------------------------------------

using BackendMessage =
    std::variant<Authentication, ParameterStatus, BackendKeyData, ReadyForQuery,
                 NegotiateProtocolVersion, RowDescription, DataRow, CommandComplete,
                 EmptyQueryResponse, ErrorResponse, NoticeResponse, ParseComplete, BindComplete,
                 CloseComplete, NoData, PortalSuspended, ParameterDescription, CopyInResponse,
                 CopyOutResponse, CopyBothResponse, CopyData, CopyDone, NotificationResponse,
                 FunctionCallResponse>;

// Decodes a frame from a backend by its tag; unknown tags are a ProtocolError.
absl::StatusOr<BackendMessage> DecodeBackendMessage(const Frame& frame);
// Encodes any backend message.
void Encode(const BackendMessage& msg, std::string& out);

}  // namespace hyperpool::protocol

#endif  // HYPERPOOL_PROTOCOL_BACKEND_MESSAGES_H_
