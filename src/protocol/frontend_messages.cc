// Frontend message codecs. Section references are to the PostgreSQL docs,
// "Frontend/Backend Protocol" > "Message Formats" unless stated otherwise.
#include "protocol/frontend_messages.h"

#include <fmt/format.h>

#include "protocol/protocol_error.h"
#include "protocol/wire_reader.h"
#include "protocol/wire_writer.h"

namespace hyperpool::protocol {
namespace {

constexpr char Tag(FrontendTag tag) { return static_cast<char>(tag); }

// Messages with no body (Sync, Flush, Terminate).
template <typename T>
absl::StatusOr<T> DecodeEmpty(std::string_view payload, const char* name) {
  WireReader r(payload, name);
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return T{};
}

bool ReadObjectKind(WireReader& r, ObjectKind& kind) {
  uint8_t byte;
  if (!r.ReadByte(byte, "object type")) return false;
  if (byte != 'S' && byte != 'P') {
    return r.Fail(fmt::format("invalid object type 0x{:02x} (expected 'S' or 'P')", byte));
  }
  kind = static_cast<ObjectKind>(byte);
  return true;
}

// Int16 count followed by that many Int16 format codes.
template <typename Vec>
bool ReadFormats(WireReader& r, Vec& formats, const char* count_field, const char* field) {
  uint16_t count;
  if (!r.ReadUint16(count, count_field) || !r.CheckCount(count, 2, field)) return false;
  formats.reserve(count);
  for (uint16_t i = 0; i < count; ++i) {
    int16_t f;
    if (!r.ReadInt16(f, field)) return false;
    formats.push_back(f);
  }
  return true;
}

// Int16 count followed by that many (Int32 length, bytes) values.
template <typename Vec>
bool ReadValues(WireReader& r, Vec& values, const char* count_field, const char* field) {
  uint16_t count;
  if (!r.ReadUint16(count, count_field) || !r.CheckCount(count, 4, field)) return false;
  values.reserve(count);
  for (uint16_t i = 0; i < count; ++i) {
    NullableValue v;
    if (!r.ReadNullableBytes(v, field)) return false;
    values.push_back(v);
  }
  return true;
}

// PostgreSQL rejects a format list that is neither empty, one code for all,
// nor one per value (exec_bind_message / HandleFunctionRequest).
bool CheckFormatCount(WireReader& r, size_t formats, size_t values, const char* what) {
  if (formats > 1 && formats != values) {
    return r.Fail(fmt::format("{} {} formats but {} {}s", formats, what, values, what));
  }
  return true;
}

template <typename Vec>
void AppendFormats(std::string& out, const Vec& formats) {
  AppendInt16(out, static_cast<int16_t>(formats.size()));
  for (int16_t f : formats) AppendInt16(out, f);
}

template <typename Vec>
void AppendValues(std::string& out, const Vec& values) {
  AppendInt16(out, static_cast<int16_t>(values.size()));
  for (const NullableValue& v : values) {
    if (!v.has_value()) {
      AppendInt32(out, -1);
    } else {
      AppendInt32(out, static_cast<int32_t>(v->size()));
      AppendBytes(out, *v);
    }
  }
}

void EncodeEmpty(char tag, std::string& out) { AppendFrame(out, tag, {}); }

}  // namespace

// --- Startup packets -------------------------------------------------------

std::optional<std::string_view> StartupMessage::Find(std::string_view name) const {
  for (const auto& [key, value] : parameters) {
    if (key == name) return value;
  }
  return std::nullopt;
}

// StartupMessage, SSLRequest, GSSENCRequest, CancelRequest: all start with an
// Int32 that is either a protocol version or a 1234.xxxx request code.
absl::StatusOr<StartupPacket> DecodeStartupPacket(std::string_view payload) {
  WireReader head(payload, "startup packet");
  int32_t code;
  if (!head.ReadInt32(code, "protocol version")) return head.status();
  const std::string_view body = payload.substr(4);

  if (code == kSslRequestCode) {
    WireReader r(body, "SSLRequest");
    if (absl::Status s = r.Finish(); !s.ok()) return s;
    return SslRequest{};
  }
  if (code == kGssEncRequestCode) {
    WireReader r(body, "GSSENCRequest");
    if (absl::Status s = r.Finish(); !s.ok()) return s;
    return GssEncRequest{};
  }
  if (code == kCancelRequestCode) {
    WireReader r(body, "CancelRequest");
    CancelRequest m;
    r.ReadInt32(m.process_id, "process ID");
    m.secret_key = r.ReadRest();
    if (!r.ok()) return r.status();
    if (m.secret_key.size() < kMinCancelKeyLength || m.secret_key.size() > kMaxCancelKeyLength) {
      return ProtocolError(fmt::format("CancelRequest: secret key of {} bytes (must be {}..{})",
                                       m.secret_key.size(), kMinCancelKeyLength,
                                       kMaxCancelKeyLength));
    }
    return m;
  }
  if (ProtocolMajor(code) != 3) {
    return ProtocolError(fmt::format("StartupMessage: unsupported protocol version {}.{}",
                                     ProtocolMajor(code), ProtocolMinor(code)));
  }

  WireReader r(body, "StartupMessage");
  StartupMessage m;
  m.protocol_version = code;
  for (;;) {
    if (r.remaining() == 0) {
      return ProtocolError("StartupMessage: missing the NUL that ends the parameter list");
    }
    std::string_view name, value;
    if (!r.ReadCString(name, "parameter name")) break;
    if (name.empty()) break;
    if (!r.ReadCString(value, "parameter value")) break;
    m.parameters.emplace_back(name, value);
  }
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const StartupMessage& msg, std::string& out) {
  MessageStart start = BeginStartupPacket(out);
  AppendInt32(out, msg.protocol_version);
  for (const auto& [name, value] : msg.parameters) {
    AppendCString(out, name);
    AppendCString(out, value);
  }
  AppendByte(out, 0);
  FinishMessage(out, start);
}

void Encode(const SslRequest&, std::string& out) {
  MessageStart start = BeginStartupPacket(out);
  AppendInt32(out, kSslRequestCode);
  FinishMessage(out, start);
}

void Encode(const GssEncRequest&, std::string& out) {
  MessageStart start = BeginStartupPacket(out);
  AppendInt32(out, kGssEncRequestCode);
  FinishMessage(out, start);
}

void Encode(const CancelRequest& msg, std::string& out) {
  MessageStart start = BeginStartupPacket(out);
  AppendInt32(out, kCancelRequestCode);
  AppendInt32(out, msg.process_id);
  AppendBytes(out, msg.secret_key);
  FinishMessage(out, start);
}

void Encode(const StartupPacket& msg, std::string& out) {
  std::visit([&out](const auto& m) { Encode(m, out); }, msg);
}

// --- Simple and extended query ----------------------------------------------

// Query (F): String query.
absl::StatusOr<Query> DecodeQuery(std::string_view payload) {
  WireReader r(payload, "Query");
  Query m;
  r.ReadCString(m.query, "query string");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const Query& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(FrontendTag::kQuery));
  AppendCString(out, msg.query);
  FinishMessage(out, start);
}

// Parse (F): String name, String query, Int16 n, Int32[n] parameter type OIDs.
absl::StatusOr<Parse> DecodeParse(std::string_view payload) {
  WireReader r(payload, "Parse");
  Parse m;
  r.ReadCString(m.statement, "statement name");
  r.ReadCString(m.query, "query string");
  uint16_t count = 0;
  if (r.ReadUint16(count, "parameter type count") &&
      r.CheckCount(count, 4, "parameter types")) {
    m.parameter_types.reserve(count);
    for (uint16_t i = 0; i < count && r.ok(); ++i) {
      Oid oid;
      if (r.ReadUint32(oid, "parameter type")) m.parameter_types.push_back(oid);
    }
  }
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const Parse& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(FrontendTag::kParse));
  AppendCString(out, msg.statement);
  AppendCString(out, msg.query);
  AppendInt16(out, static_cast<int16_t>(msg.parameter_types.size()));
  for (Oid oid : msg.parameter_types) AppendInt32(out, static_cast<int32_t>(oid));
  FinishMessage(out, start);
}

// Bind (F): String portal, String statement, Int16 + Int16[] parameter
// formats, Int16 + (Int32 length | -1, Byten)[] values, Int16 + Int16[] result
// formats.
absl::StatusOr<Bind> DecodeBind(std::string_view payload) {
  WireReader r(payload, "Bind");
  Bind m;
  r.ReadCString(m.portal, "portal name");
  r.ReadCString(m.statement, "statement name");
  ReadFormats(r, m.parameter_formats, "parameter format count", "parameter formats");
  ReadValues(r, m.parameters, "parameter count", "parameter values");
  if (r.ok()) CheckFormatCount(r, m.parameter_formats.size(), m.parameters.size(), "parameter");
  ReadFormats(r, m.result_formats, "result format count", "result formats");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const Bind& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(FrontendTag::kBind));
  AppendCString(out, msg.portal);
  AppendCString(out, msg.statement);
  AppendFormats(out, msg.parameter_formats);
  AppendValues(out, msg.parameters);
  AppendFormats(out, msg.result_formats);
  FinishMessage(out, start);
}

// Describe (F): Byte1 'S'|'P', String name.
absl::StatusOr<Describe> DecodeDescribe(std::string_view payload) {
  WireReader r(payload, "Describe");
  Describe m;
  ReadObjectKind(r, m.kind);
  r.ReadCString(m.name, "name");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const Describe& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(FrontendTag::kDescribe));
  AppendByte(out, static_cast<uint8_t>(msg.kind));
  AppendCString(out, msg.name);
  FinishMessage(out, start);
}

// Execute (F): String portal, Int32 max rows.
bool PatchExecuteMaxRows(std::string& buffer, size_t at, int32_t max_rows) {
  if (at > buffer.size()) return false;
  std::optional<Frame> f = PeekTaggedFrame(std::string_view(buffer).substr(at));
  if (!f || f->tag != 'E' || f->size() != buffer.size() - at || f->payload.size() < 5) return false;
  StoreUint32(buffer.data() + buffer.size() - 4, static_cast<uint32_t>(max_rows));
  return true;
}

std::optional<int32_t> PeekStartupCode(std::string_view payload) {
  if (payload.size() < 4) return std::nullopt;
  return static_cast<int32_t>(LoadUint32(payload.data()));
}

absl::StatusOr<Execute> DecodeExecute(std::string_view payload) {
  WireReader r(payload, "Execute");
  Execute m;
  r.ReadCString(m.portal, "portal name");
  r.ReadInt32(m.max_rows, "maximum row count");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const Execute& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(FrontendTag::kExecute));
  AppendCString(out, msg.portal);
  AppendInt32(out, msg.max_rows);
  FinishMessage(out, start);
}

// Close (F): Byte1 'S'|'P', String name.
absl::StatusOr<Close> DecodeClose(std::string_view payload) {
  WireReader r(payload, "Close");
  Close m;
  ReadObjectKind(r, m.kind);
  r.ReadCString(m.name, "name");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const Close& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(FrontendTag::kClose));
  AppendByte(out, static_cast<uint8_t>(msg.kind));
  AppendCString(out, msg.name);
  FinishMessage(out, start);
}

absl::StatusOr<Sync> DecodeSync(std::string_view payload) {
  return DecodeEmpty<Sync>(payload, "Sync");
}
absl::StatusOr<Flush> DecodeFlush(std::string_view payload) {
  return DecodeEmpty<Flush>(payload, "Flush");
}
absl::StatusOr<Terminate> DecodeTerminate(std::string_view payload) {
  return DecodeEmpty<Terminate>(payload, "Terminate");
}
void Encode(const Sync&, std::string& out) { EncodeEmpty(Tag(FrontendTag::kSync), out); }
void Encode(const Flush&, std::string& out) { EncodeEmpty(Tag(FrontendTag::kFlush), out); }
void Encode(const Terminate&, std::string& out) {
  EncodeEmpty(Tag(FrontendTag::kTerminate), out);
}

// CopyFail (F): String error message.
absl::StatusOr<CopyFail> DecodeCopyFail(std::string_view payload) {
  WireReader r(payload, "CopyFail");
  CopyFail m;
  r.ReadCString(m.message, "error message");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const CopyFail& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(FrontendTag::kCopyFail));
  AppendCString(out, msg.message);
  FinishMessage(out, start);
}

// FunctionCall (F): Int32 function OID, Int16 + Int16[] argument formats,
// Int16 + (Int32 length | -1, Byten)[] arguments, Int16 result format.
absl::StatusOr<FunctionCall> DecodeFunctionCall(std::string_view payload) {
  WireReader r(payload, "FunctionCall");
  FunctionCall m;
  r.ReadUint32(m.function, "function OID");
  ReadFormats(r, m.argument_formats, "argument format count", "argument formats");
  ReadValues(r, m.arguments, "argument count", "arguments");
  if (r.ok()) CheckFormatCount(r, m.argument_formats.size(), m.arguments.size(), "argument");
  r.ReadInt16(m.result_format, "result format");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const FunctionCall& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(FrontendTag::kFunctionCall));
  AppendInt32(out, static_cast<int32_t>(msg.function));
  AppendFormats(out, msg.argument_formats);
  AppendValues(out, msg.arguments);
  AppendInt16(out, msg.result_format);
  FinishMessage(out, start);
}

// --- Authentication responses ('p') ----------------------------------------

// PasswordMessage (F): String password.
absl::StatusOr<PasswordMessage> DecodePasswordMessage(std::string_view payload) {
  WireReader r(payload, "PasswordMessage");
  PasswordMessage m;
  r.ReadCString(m.password, "password");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const PasswordMessage& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(FrontendTag::kPassword));
  AppendCString(out, msg.password);
  FinishMessage(out, start);
}

// SASLInitialResponse (F): String mechanism, Int32 length (-1 = none), Byten.
absl::StatusOr<SaslInitialResponse> DecodeSaslInitialResponse(std::string_view payload) {
  WireReader r(payload, "SASLInitialResponse");
  SaslInitialResponse m;
  r.ReadCString(m.mechanism, "mechanism name");
  r.ReadNullableBytes(m.data, "initial response");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const SaslInitialResponse& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(FrontendTag::kPassword));
  AppendCString(out, msg.mechanism);
  if (msg.data.has_value()) {
    AppendInt32(out, static_cast<int32_t>(msg.data->size()));
    AppendBytes(out, *msg.data);
  } else {
    AppendInt32(out, -1);
  }
  FinishMessage(out, start);
}

// SASLResponse (F) and GSSResponse (F): Byten, the rest of the message.
absl::StatusOr<SaslResponse> DecodeSaslResponse(std::string_view payload) {
  return SaslResponse{payload};
}
absl::StatusOr<GssResponse> DecodeGssResponse(std::string_view payload) {
  return GssResponse{payload};
}
void Encode(const SaslResponse& msg, std::string& out) {
  AppendFrame(out, Tag(FrontendTag::kPassword), msg.data);
}
void Encode(const GssResponse& msg, std::string& out) {
  AppendFrame(out, Tag(FrontendTag::kPassword), msg.data);
}

// --- Generic dispatch --------------------------------------------------------

namespace {

template <typename T>
absl::StatusOr<FrontendMessage> Wrap(absl::StatusOr<T> decoded) {
  if (!decoded.ok()) return decoded.status();
  return FrontendMessage(*std::move(decoded));
}

}  // namespace

absl::StatusOr<FrontendMessage> DecodeFrontendMessage(const Frame& frame,
                                                      PasswordKind password_kind) {
  const std::string_view p = frame.payload;
  switch (frame.frontend_tag()) {
    case FrontendTag::kBind: return Wrap(DecodeBind(p));
    case FrontendTag::kClose: return Wrap(DecodeClose(p));
    case FrontendTag::kCopyData: return Wrap(DecodeCopyData(p));
    case FrontendTag::kCopyDone: return Wrap(DecodeCopyDone(p));
    case FrontendTag::kCopyFail: return Wrap(DecodeCopyFail(p));
    case FrontendTag::kDescribe: return Wrap(DecodeDescribe(p));
    case FrontendTag::kExecute: return Wrap(DecodeExecute(p));
    case FrontendTag::kFlush: return Wrap(DecodeFlush(p));
    case FrontendTag::kFunctionCall: return Wrap(DecodeFunctionCall(p));
    case FrontendTag::kParse: return Wrap(DecodeParse(p));
    case FrontendTag::kQuery: return Wrap(DecodeQuery(p));
    case FrontendTag::kSync: return Wrap(DecodeSync(p));
    case FrontendTag::kTerminate: return Wrap(DecodeTerminate(p));
    case FrontendTag::kPassword:
      switch (password_kind) {
        case PasswordKind::kPassword: return Wrap(DecodePasswordMessage(p));
        case PasswordKind::kSaslInitialResponse: return Wrap(DecodeSaslInitialResponse(p));
        case PasswordKind::kSaslResponse: return Wrap(DecodeSaslResponse(p));
        case PasswordKind::kGssResponse: return Wrap(DecodeGssResponse(p));
      }
      break;
  }
  const auto u = static_cast<unsigned char>(frame.tag);
  return ProtocolError(fmt::format("invalid frontend message type 0x{:02x}", u));
}

void Encode(const FrontendMessage& msg, std::string& out) {
  std::visit([&out](const auto& m) { Encode(m, out); }, msg);
}

}  // namespace hyperpool::protocol
