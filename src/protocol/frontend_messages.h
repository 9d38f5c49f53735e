// Messages a frontend (client) sends: typed decoders and encoders (PostgreSQL
// docs, "Frontend/Backend Protocol" > "Message Formats", the messages marked
// (F)). See common_messages.h for the Decode/Encode conventions.
//
// The Client half decodes these from apps; the Endpoint half encodes them to
// origins. Hot-path forwarding should use Frame::raw instead of re-encoding.
#ifndef HYPERPOOL_PROTOCOL_FRONTEND_MESSAGES_H_
#define HYPERPOOL_PROTOCOL_FRONTEND_MESSAGES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "protocol/common_messages.h"
#include "protocol/frame_reader.h"
#include "protocol/tags.h"

namespace hyperpool::protocol {

// ---------------------------------------------------------------------------
// Startup-mode packets (untagged; FrameReader::Mode::kStartup).
// ---------------------------------------------------------------------------

// StartupMessage: protocol version + parameters ("Message Formats" >
// StartupMessage; "Message Flow" > "Start-up").
struct StartupMessage {
  int32_t protocol_version = kProtocolVersion30;
  // Name/value pairs in the order received ("user", "database", "options",
  // "application_name", "_pq_.*" protocol options, GUCs...).
  std::vector<std::pair<std::string_view, std::string_view>> parameters;

  // Value of the first parameter called `name`, if present.
  std::optional<std::string_view> Find(std::string_view name) const;
  bool operator==(const StartupMessage&) const = default;
};

// SSLRequest ("Message Formats" > SSLRequest; "Message Flow" > "SSL Session
// Encryption").
struct SslRequest {
  bool operator==(const SslRequest&) const = default;
};

// GSSENCRequest ("Message Formats" > GSSENCRequest).
struct GssEncRequest {
  bool operator==(const GssEncRequest&) const = default;
};

// CancelRequest ("Message Formats" > CancelRequest; "Message Flow" >
// "Canceling Requests in Progress"). The secret key is 4 bytes in protocol
// 3.0 and 4..256 bytes from 3.2 on.
struct CancelRequest {
  int32_t process_id = 0;
  std::string_view secret_key;
  bool operator==(const CancelRequest&) const = default;
};

using StartupPacket = std::variant<StartupMessage, SslRequest, GssEncRequest, CancelRequest>;

// Decodes a startup-mode frame's payload (Frame::payload, starting at the
// Int32 code). Dispatches on the code: the three request codes, otherwise a
// StartupMessage whose major version must be 3 (any minor is accepted; the
// caller negotiates it with NegotiateProtocolVersion). Other 1234.xxxx codes
// and protocol 2 are errors.
absl::StatusOr<StartupPacket> DecodeStartupPacket(std::string_view payload);

// Startup packet encoders append a complete untagged packet.
void Encode(const StartupMessage& msg, std::string& out);
void Encode(const SslRequest& msg, std::string& out);
void Encode(const GssEncRequest& msg, std::string& out);
void Encode(const CancelRequest& msg, std::string& out);
void Encode(const StartupPacket& msg, std::string& out);

// ---------------------------------------------------------------------------
// Simple query, extended query and function call.
// ---------------------------------------------------------------------------

// Query 'Q' ("Message Flow" > "Simple Query").
struct Query {
  std::string_view query;
  bool operator==(const Query&) const = default;
};

// Parse 'P' ("Message Flow" > "Extended Query").
struct Parse {
  std::string_view statement;  // "" = unnamed statement.
  std::string_view query;
  std::vector<Oid> parameter_types;  // 0 = unspecified.
  bool operator==(const Parse&) const = default;
};

// Bind 'B'. Inline capacity keeps typical binds allocation-free.
struct Bind {
  std::string_view portal;     // "" = unnamed portal.
  std::string_view statement;  // "" = unnamed statement.
  // Empty: all text; one: applies to all; else one per parameter (the decoder
  // enforces this, as PostgreSQL does).
  absl::InlinedVector<int16_t, 8> parameter_formats;
  absl::InlinedVector<NullableValue, 8> parameters;
  absl::InlinedVector<int16_t, 8> result_formats;
  bool operator==(const Bind&) const = default;
};

// What Describe and Close refer to.
enum class ObjectKind : char {
  kStatement = 'S',
  kPortal = 'P',
};

// Describe 'D'.
struct Describe {
  ObjectKind kind = ObjectKind::kStatement;
  std::string_view name;
  bool operator==(const Describe&) const = default;
};

// Execute 'E'.
struct Execute {
  std::string_view portal;
  int32_t max_rows = 0;  // 0 = no limit.
  bool operator==(const Execute&) const = default;
};

// Close 'C'.
struct Close {
  ObjectKind kind = ObjectKind::kStatement;
  std::string_view name;
  bool operator==(const Close&) const = default;
};

// Sync 'S'.
struct Sync {
  bool operator==(const Sync&) const = default;
};

// Flush 'H'.
struct Flush {
  bool operator==(const Flush&) const = default;
};

// Terminate 'X'.
struct Terminate {
  bool operator==(const Terminate&) const = default;
};

// CopyFail 'f' ("Message Flow" > "COPY Operations").
struct CopyFail {
  std::string_view message;
  bool operator==(const CopyFail&) const = default;
};

// FunctionCall 'F' ("Message Flow" > "Function Call"; legacy).
struct FunctionCall {
  Oid function = 0;
  absl::InlinedVector<int16_t, 4> argument_formats;
  absl::InlinedVector<NullableValue, 4> arguments;
  int16_t result_format = kFormatText;
  bool operator==(const FunctionCall&) const = default;
};

// ---------------------------------------------------------------------------
// Authentication responses: all tagged 'p'. The receiver knows which one to
// expect from the Authentication request it sent.
// ---------------------------------------------------------------------------

// PasswordMessage 'p': cleartext password or "md5..." hash.
struct PasswordMessage {
  std::string_view password;
  bool operator==(const PasswordMessage&) const = default;
};

// SASLInitialResponse 'p' ("Message Flow" > "SASL Authentication").
struct SaslInitialResponse {
  std::string_view mechanism;  // e.g. "SCRAM-SHA-256".
  NullableValue data;          // nullopt = no initial response (length -1).
  bool operator==(const SaslInitialResponse&) const = default;
};

// SASLResponse 'p'.
struct SaslResponse {
  std::string_view data;
  bool operator==(const SaslResponse&) const = default;
};

// GSSResponse 'p'.
struct GssResponse {
  std::string_view data;
  bool operator==(const GssResponse&) const = default;
};

// Decoders: `payload` is Frame::payload of a frame with the matching tag.
absl::StatusOr<Query> DecodeQuery(std::string_view payload);
absl::StatusOr<Parse> DecodeParse(std::string_view payload);
absl::StatusOr<Bind> DecodeBind(std::string_view payload);
absl::StatusOr<Describe> DecodeDescribe(std::string_view payload);
absl::StatusOr<Execute> DecodeExecute(std::string_view payload);
// `buffer` from `at` to its end is exactly one raw Execute frame: its row
// limit becomes `max_rows` (true), else nothing changes (false).
bool PatchExecuteMaxRows(std::string& buffer, size_t at, int32_t max_rows);
// A startup-mode packet's Int32 code (protocol version or request code) at
// the start of its payload; nullopt when shorter than 4 bytes.
std::optional<int32_t> PeekStartupCode(std::string_view payload);
absl::StatusOr<Close> DecodeClose(std::string_view payload);
absl::StatusOr<Sync> DecodeSync(std::string_view payload);
absl::StatusOr<Flush> DecodeFlush(std::string_view payload);
absl::StatusOr<Terminate> DecodeTerminate(std::string_view payload);
absl::StatusOr<CopyFail> DecodeCopyFail(std::string_view payload);
absl::StatusOr<FunctionCall> DecodeFunctionCall(std::string_view payload);
absl::StatusOr<PasswordMessage> DecodePasswordMessage(std::string_view payload);
absl::StatusOr<SaslInitialResponse> DecodeSaslInitialResponse(std::string_view payload);
absl::StatusOr<SaslResponse> DecodeSaslResponse(std::string_view payload);
absl::StatusOr<GssResponse> DecodeGssResponse(std::string_view payload);
// CopyData / CopyDone: see common_messages.h.

// Encoders: append the complete frame.
void Encode(const Query& msg, std::string& out);
void Encode(const Parse& msg, std::string& out);
void Encode(const Bind& msg, std::string& out);
void Encode(const Describe& msg, std::string& out);
void Encode(const Execute& msg, std::string& out);
void Encode(const Close& msg, std::string& out);
void Encode(const Sync& msg, std::string& out);
void Encode(const Flush& msg, std::string& out);
void Encode(const Terminate& msg, std::string& out);
void Encode(const CopyFail& msg, std::string& out);
void Encode(const FunctionCall& msg, std::string& out);
void Encode(const PasswordMessage& msg, std::string& out);
void Encode(const SaslInitialResponse& msg, std::string& out);
void Encode(const SaslResponse& msg, std::string& out);
void Encode(const GssResponse& msg, std::string& out);

// ---------------------------------------------------------------------------
// Generic dispatch on the tag.
// ---------------------------------------------------------------------------

// Which 'p' message to expect; depends on the authentication request sent.
enum class PasswordKind {
  kPassword,             // After AuthenticationCleartextPassword / MD5Password.
  kSaslInitialResponse,  // After AuthenticationSASL.
  kSaslResponse,         // After AuthenticationSASLContinue.
  kGssResponse,          // After AuthenticationGSS / SSPI / GSSContinue.
};

using FrontendMessage =
    std::variant<Query, Parse, Bind, Describe, Execute, Close, Sync, Flush, Terminate, CopyData,
                 CopyDone, CopyFail, FunctionCall, PasswordMessage, SaslInitialResponse,
                 SaslResponse, GssResponse>;

// Decodes a tagged-mode frame from a frontend by its tag; unknown tags are a
// ProtocolError. 'p' is decoded as `password_kind`.
absl::StatusOr<FrontendMessage> DecodeFrontendMessage(
    const Frame& frame, PasswordKind password_kind = PasswordKind::kPassword);
// Encodes any frontend message.
void Encode(const FrontendMessage& msg, std::string& out);

}  // namespace hyperpool::protocol

#endif  // HYPERPOOL_PROTOCOL_FRONTEND_MESSAGES_H_
