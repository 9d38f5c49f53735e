// Backend message codecs. Section references are to the PostgreSQL docs,
// "Frontend/Backend Protocol" > "Message Formats" unless stated otherwise.
#include "protocol/backend_messages.h"

#include <fmt/format.h>

#include "protocol/protocol_error.h"
#include "protocol/wire_reader.h"
#include "protocol/wire_writer.h"

namespace hyperpool::protocol {
namespace {

constexpr char Tag(BackendTag tag) { return static_cast<char>(tag); }

uint32_t LoadBigEndian32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

template <typename T>
absl::StatusOr<T> DecodeEmpty(std::string_view payload, const char* name) {
  WireReader r(payload, name);
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return T{};
}

void EncodeEmpty(char tag, std::string& out) { AppendFrame(out, tag, {}); }

// Authentication messages: 'R', Int32 subtype, subtype-specific body.
void EncodeAuth(AuthType type, std::string_view body, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(BackendTag::kAuthentication));
  AppendInt32(out, static_cast<int32_t>(type));
  AppendBytes(out, body);
  FinishMessage(out, start);
}

// A list of Strings ended by an empty String (AuthenticationSASL).
bool ReadStringList(WireReader& r, std::vector<std::string_view>& list, const char* field) {
  for (;;) {
    if (r.remaining() == 0) {
      return r.Fail(fmt::format("missing the NUL that ends the {} list", field));
    }
    std::string_view item;
    if (!r.ReadCString(item, field)) return false;
    if (item.empty()) return true;
    list.push_back(item);
  }
}

// ErrorResponse / NoticeResponse body: (Byte1 code, String value)*, Byte1 0.
absl::Status DecodeNoticeFields(std::string_view payload, const char* name, NoticeFields& out) {
  WireReader r(payload, name);
  for (;;) {
    if (r.remaining() == 0) {
      r.Fail("missing the NUL that ends the field list");
      break;
    }
    uint8_t code;
    r.ReadByte(code, "field type");
    if (code == 0) break;
    NoticeField field;
    field.code = static_cast<char>(code);
    if (!r.ReadCString(field.value, "field value")) break;
    out.fields.push_back(field);
  }
  return r.Finish();
}

void EncodeNoticeFields(char tag, const NoticeFields& msg, std::string& out) {
  MessageStart start = BeginMessage(out, tag);
  for (const NoticeField& f : msg.fields) {
    AppendByte(out, static_cast<uint8_t>(f.code));
    AppendCString(out, f.value);
  }
  AppendByte(out, 0);
  FinishMessage(out, start);
}

void EncodeSynthesized(char tag, std::string& out, std::string_view severity,
                       std::string_view sqlstate, std::string_view message,
                       std::string_view detail, std::string_view hint) {
  MessageStart start = BeginMessage(out, tag);
  auto field = [&out](FieldCode code, std::string_view value) {
    AppendByte(out, static_cast<uint8_t>(code));
    AppendCString(out, value);
  };
  field(FieldCode::kSeverity, severity);
  field(FieldCode::kSeverityNonLocalized, severity);
  field(FieldCode::kSqlState, sqlstate);
  field(FieldCode::kMessage, message);
  if (!detail.empty()) field(FieldCode::kDetail, detail);
  if (!hint.empty()) field(FieldCode::kHint, hint);
  AppendByte(out, 0);
  FinishMessage(out, start);
}

// CopyInResponse / CopyOutResponse / CopyBothResponse: Int8 overall format,
// Int16 n, Int16[n] column formats.
absl::Status DecodeCopyResponse(std::string_view payload, const char* name,
                                CopyResponseBody& out) {
  WireReader r(payload, name);
  uint8_t format = 0;
  r.ReadByte(format, "overall format");
  out.format = static_cast<int8_t>(format);
  uint16_t count = 0;
  if (r.ReadUint16(count, "column count") && r.CheckCount(count, 2, "column formats")) {
    out.column_formats.reserve(count);
    for (uint16_t i = 0; i < count && r.ok(); ++i) {
      int16_t f;
      if (r.ReadInt16(f, "column format")) out.column_formats.push_back(f);
    }
  }
  return r.Finish();
}

void EncodeCopyResponse(char tag, const CopyResponseBody& msg, std::string& out) {
  MessageStart start = BeginMessage(out, tag);
  AppendByte(out, static_cast<uint8_t>(msg.format));
  AppendInt16(out, static_cast<int16_t>(msg.column_formats.size()));
  for (int16_t f : msg.column_formats) AppendInt16(out, f);
  FinishMessage(out, start);
}

}  // namespace

// --- Authentication ----------------------------------------------------------

absl::StatusOr<Authentication> DecodeAuthentication(std::string_view payload) {
  WireReader r(payload, "Authentication");
  int32_t type;
  if (!r.ReadInt32(type, "authentication type")) return r.status();
  Authentication m;
  switch (static_cast<AuthType>(type)) {
    case AuthType::kOk: m = AuthenticationOk{}; break;
    case AuthType::kKerberosV5: m = AuthenticationKerberosV5{}; break;
    case AuthType::kCleartextPassword: m = AuthenticationCleartextPassword{}; break;
    case AuthType::kGss: m = AuthenticationGss{}; break;
    case AuthType::kSspi: m = AuthenticationSspi{}; break;
    case AuthType::kMd5Password: {
      AuthenticationMd5Password md5;
      r.ReadBytes(4, md5.salt, "MD5 salt");
      m = md5;
      break;
    }
    case AuthType::kGssContinue: m = AuthenticationGssContinue{r.ReadRest()}; break;
    case AuthType::kSaslContinue: m = AuthenticationSaslContinue{r.ReadRest()}; break;
    case AuthType::kSaslFinal: m = AuthenticationSaslFinal{r.ReadRest()}; break;
    case AuthType::kSasl: {
      AuthenticationSasl sasl;
      ReadStringList(r, sasl.mechanisms, "SASL mechanism");
      m = std::move(sasl);
      break;
    }
    default:
      return ProtocolError(fmt::format("Authentication: unknown authentication type {}", type));
  }
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const AuthenticationOk&, std::string& out) { EncodeAuth(AuthType::kOk, {}, out); }
void Encode(const AuthenticationKerberosV5&, std::string& out) {
  EncodeAuth(AuthType::kKerberosV5, {}, out);
}
void Encode(const AuthenticationCleartextPassword&, std::string& out) {
  EncodeAuth(AuthType::kCleartextPassword, {}, out);
}
void Encode(const AuthenticationMd5Password& msg, std::string& out) {
  char salt[4] = {0, 0, 0, 0};
  msg.salt.copy(salt, 4);
  EncodeAuth(AuthType::kMd5Password, std::string_view(salt, 4), out);
}
void Encode(const AuthenticationGss&, std::string& out) { EncodeAuth(AuthType::kGss, {}, out); }
void Encode(const AuthenticationGssContinue& msg, std::string& out) {
  EncodeAuth(AuthType::kGssContinue, msg.data, out);
}
void Encode(const AuthenticationSspi&, std::string& out) { EncodeAuth(AuthType::kSspi, {}, out); }
void Encode(const AuthenticationSasl& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(BackendTag::kAuthentication));
  AppendInt32(out, static_cast<int32_t>(AuthType::kSasl));
  for (std::string_view mechanism : msg.mechanisms) AppendCString(out, mechanism);
  AppendByte(out, 0);
  FinishMessage(out, start);
}
void Encode(const AuthenticationSaslContinue& msg, std::string& out) {
  EncodeAuth(AuthType::kSaslContinue, msg.data, out);
}
void Encode(const AuthenticationSaslFinal& msg, std::string& out) {
  EncodeAuth(AuthType::kSaslFinal, msg.data, out);
}
void Encode(const Authentication& msg, std::string& out) {
  std::visit([&out](const auto& m) { Encode(m, out); }, msg);
}

// --- Session state -------------------------------------------------------------

// ParameterStatus (B): String name, String value.
absl::StatusOr<ParameterStatus> DecodeParameterStatus(std::string_view payload) {
  WireReader r(payload, "ParameterStatus");
  ParameterStatus m;
  r.ReadCString(m.name, "parameter name");
  r.ReadCString(m.value, "parameter value");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const ParameterStatus& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(BackendTag::kParameterStatus));
  AppendCString(out, msg.name);
  AppendCString(out, msg.value);
  FinishMessage(out, start);
}

// BackendKeyData (B): Int32 process ID, Byten secret key (4 bytes in 3.0,
// up to 256 in 3.2).
absl::StatusOr<BackendKeyData> DecodeBackendKeyData(std::string_view payload) {
  WireReader r(payload, "BackendKeyData");
  BackendKeyData m;
  if (!r.ReadInt32(m.process_id, "process ID")) return r.status();
  m.secret_key = r.ReadRest();
  if (m.secret_key.size() < kMinCancelKeyLength || m.secret_key.size() > kMaxCancelKeyLength) {
    return ProtocolError(fmt::format("BackendKeyData: secret key of {} bytes (must be {}..{})",
                                     m.secret_key.size(), kMinCancelKeyLength,
                                     kMaxCancelKeyLength));
  }
  return m;
}

void Encode(const BackendKeyData& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(BackendTag::kBackendKeyData));
  AppendInt32(out, msg.process_id);
  AppendBytes(out, msg.secret_key);
  FinishMessage(out, start);
}

// ReadyForQuery (B): Byte1 transaction status 'I' | 'T' | 'E'.
absl::StatusOr<ReadyForQuery> DecodeReadyForQuery(std::string_view payload) {
  WireReader r(payload, "ReadyForQuery");
  uint8_t status = 0;
  r.ReadByte(status, "transaction status");
  if (r.ok() && status != 'I' && status != 'T' && status != 'E') {
    r.Fail(fmt::format("invalid transaction status 0x{:02x}", status));
  }
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return ReadyForQuery{static_cast<TransactionStatus>(status)};
}

void Encode(const ReadyForQuery& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(BackendTag::kReadyForQuery));
  AppendByte(out, static_cast<uint8_t>(msg.status));
  FinishMessage(out, start);
}

// NegotiateProtocolVersion (B): Int32 newest minor version, Int32 n,
// String[n] unrecognized options.
absl::StatusOr<NegotiateProtocolVersion> DecodeNegotiateProtocolVersion(
    std::string_view payload) {
  WireReader r(payload, "NegotiateProtocolVersion");
  NegotiateProtocolVersion m;
  r.ReadInt32(m.newest_minor_version, "newest minor version");
  int32_t count = 0;
  if (r.ReadInt32(count, "option count")) {
    if (count < 0) {
      r.Fail(fmt::format("negative option count {}", count));
    } else if (r.CheckCount(static_cast<size_t>(count), 1, "options")) {
      m.unrecognized_options.reserve(static_cast<size_t>(count));
      for (int32_t i = 0; i < count && r.ok(); ++i) {
        std::string_view option;
        if (r.ReadCString(option, "option name")) m.unrecognized_options.push_back(option);
      }
    }
  }
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const NegotiateProtocolVersion& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(BackendTag::kNegotiateProtocolVersion));
  AppendInt32(out, msg.newest_minor_version);
  AppendInt32(out, static_cast<int32_t>(msg.unrecognized_options.size()));
  for (std::string_view option : msg.unrecognized_options) AppendCString(out, option);
  FinishMessage(out, start);
}

// --- Query results -------------------------------------------------------------

// RowDescription (B): Int16 n, then per field String name, Int32 table OID,
// Int16 column attribute, Int32 type OID, Int16 type size, Int32 type
// modifier, Int16 format.
namespace {

// Reads a RowDescription payload field by field: `on_count(n)` once, then
// `on_field(f)` for each field (views into `payload`), without collecting
// them. The decoder and ResultTypeDigest (on the Client tier's hit path)
// share it.
template <typename OnCount, typename OnField>
absl::Status ReadRowDescription(std::string_view payload, OnCount&& on_count, OnField&& on_field) {
  // Smallest possible field: empty name (1 NUL) + 18 bytes of integers.
  constexpr size_t kMinFieldSize = 19;
  WireReader r(payload, "RowDescription");
  uint16_t count = 0;
  if (r.ReadUint16(count, "field count") && r.CheckCount(count, kMinFieldSize, "fields")) {
    on_count(count);
    for (uint16_t i = 0; i < count && r.ok(); ++i) {
      FieldDescription f;
      r.ReadCString(f.name, "field name");
      r.ReadUint32(f.table_oid, "table OID");
      r.ReadInt16(f.column_attr, "column attribute number");
      r.ReadUint32(f.type_oid, "type OID");
      r.ReadInt16(f.type_size, "type size");
      r.ReadInt32(f.type_modifier, "type modifier");
      r.ReadInt16(f.format, "format code");
      if (r.ok()) on_field(f);
    }
  }
  return r.Finish();
}

}  // namespace

absl::StatusOr<RowDescription> DecodeRowDescription(std::string_view payload) {
  RowDescription m;
  absl::Status s = ReadRowDescription(
      payload, [&m](uint16_t count) { m.fields.reserve(count); },
      [&m](const FieldDescription& f) { m.fields.push_back(f); });
  if (!s.ok()) return s;
  return m;
}

bool SameResultType(std::string_view a, std::string_view b) {
  if (a == b) return true;
  auto ra = DecodeRowDescription(a);
  auto rb = DecodeRowDescription(b);
  if (!ra.ok() || !rb.ok() || ra->fields.size() != rb->fields.size()) return false;
  for (size_t i = 0; i < ra->fields.size(); ++i) {
    const FieldDescription& x = ra->fields[i];
    const FieldDescription& y = rb->fields[i];
    if (x.name != y.name || x.type_oid != y.type_oid || x.type_size != y.type_size ||
        x.type_modifier != y.type_modifier) {
      return false;
    }
  }
  return true;
}

uint64_t ResultTypeDigest(std::string_view payload) {
  constexpr uint64_t kNoData = 0x6e6f44617461ull;  // "noData"
  if (payload.empty()) return kNoData;
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64 bits: not seeded, unlike absl::Hash
  auto mix = [&h](std::string_view bytes) {
    for (unsigned char c : bytes) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
  };
  auto mix_int = [&mix](uint64_t v) {
    char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
    mix(std::string_view(b, 8));
  };
  const absl::Status s = ReadRowDescription(
      payload, [&](uint16_t count) { mix_int(count); },
      [&](const FieldDescription& f) {
        mix_int(f.name.size());
        mix(f.name);
        mix_int(f.type_oid);
        mix_int(static_cast<uint16_t>(f.type_size));
        mix_int(static_cast<uint32_t>(f.type_modifier));
      });
  if (!s.ok()) {
    h = 0xcbf29ce484222325ull;
    mix("malformed");  // never equal to a well-formed description's digest but by chance
    mix(payload);
  }
  return h == 0 || h == kNoData ? 1 : h;
}

void Encode(const RowDescription& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(BackendTag::kRowDescription));
  AppendInt16(out, static_cast<int16_t>(msg.fields.size()));
  for (const FieldDescription& f : msg.fields) {
    AppendCString(out, f.name);
    AppendInt32(out, static_cast<int32_t>(f.table_oid));
    AppendInt16(out, f.column_attr);
    AppendInt32(out, static_cast<int32_t>(f.type_oid));
    AppendInt16(out, f.type_size);
    AppendInt32(out, f.type_modifier);
    AppendInt16(out, f.format);
  }
  FinishMessage(out, start);
}

// DataRow (B): Int16 n, then per column Int32 length (-1 = NULL) and Byten.
// Validated in full here so that iterating later needs no checks.
absl::StatusOr<DataRow> DecodeDataRow(std::string_view payload) {
  WireReader r(payload, "DataRow");
  DataRow m;
  if (r.ReadUint16(m.column_count, "column count") &&
      r.CheckCount(m.column_count, 4, "columns")) {
    for (uint16_t i = 0; i < m.column_count && r.ok(); ++i) {
      NullableValue v;
      r.ReadNullableBytes(v, "column value");
    }
  }
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  m.columns = payload.substr(2);
  return m;
}

NullableValue DataRow::Iterator::operator*() const {
  const auto length = static_cast<int32_t>(LoadBigEndian32(pos_));
  if (length < 0) return std::nullopt;
  return std::string_view(pos_ + 4, static_cast<size_t>(length));
}

DataRow::Iterator& DataRow::Iterator::operator++() {
  const auto length = static_cast<int32_t>(LoadBigEndian32(pos_));
  pos_ += 4 + (length < 0 ? 0 : static_cast<size_t>(length));
  return *this;
}

DataRow::Iterator DataRow::Iterator::operator++(int) {
  Iterator before = *this;
  ++*this;
  return before;
}

void Encode(const DataRow& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(BackendTag::kDataRow));
  AppendInt16(out, static_cast<int16_t>(msg.column_count));
  AppendBytes(out, msg.columns);
  FinishMessage(out, start);
}

void EncodeDataRow(absl::Span<const NullableValue> columns, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(BackendTag::kDataRow));
  AppendInt16(out, static_cast<int16_t>(columns.size()));
  for (const NullableValue& v : columns) {
    if (!v.has_value()) {
      AppendInt32(out, -1);
    } else {
      AppendInt32(out, static_cast<int32_t>(v->size()));
      AppendBytes(out, *v);
    }
  }
  FinishMessage(out, start);
}

// CommandComplete (B): String command tag.
absl::StatusOr<CommandComplete> DecodeCommandComplete(std::string_view payload) {
  WireReader r(payload, "CommandComplete");
  CommandComplete m;
  r.ReadCString(m.tag, "command tag");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const CommandComplete& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(BackendTag::kCommandComplete));
  AppendCString(out, msg.tag);
  FinishMessage(out, start);
}

absl::StatusOr<EmptyQueryResponse> DecodeEmptyQueryResponse(std::string_view payload) {
  return DecodeEmpty<EmptyQueryResponse>(payload, "EmptyQueryResponse");
}
void Encode(const EmptyQueryResponse&, std::string& out) {
  EncodeEmpty(Tag(BackendTag::kEmptyQueryResponse), out);
}

// --- Errors and notices ("Error and Notice Message Fields") ---------------------

std::string_view NoticeFields::Get(char code) const {
  for (const NoticeField& f : fields) {
    if (f.code == code) return f.value;
  }
  return {};
}

std::string_view NoticeFields::Get(FieldCode code) const {
  return Get(static_cast<char>(code));
}

std::string_view NoticeFields::severity() const {
  std::string_view v = Get(FieldCode::kSeverityNonLocalized);
  return v.empty() ? Get(FieldCode::kSeverity) : v;
}

absl::StatusOr<ErrorResponse> DecodeErrorResponse(std::string_view payload) {
  ErrorResponse m;
  if (absl::Status s = DecodeNoticeFields(payload, "ErrorResponse", m); !s.ok()) return s;
  return m;
}

absl::StatusOr<NoticeResponse> DecodeNoticeResponse(std::string_view payload) {
  NoticeResponse m;
  if (absl::Status s = DecodeNoticeFields(payload, "NoticeResponse", m); !s.ok()) return s;
  return m;
}

void Encode(const ErrorResponse& msg, std::string& out) {
  EncodeNoticeFields(Tag(BackendTag::kErrorResponse), msg, out);
}
void Encode(const NoticeResponse& msg, std::string& out) {
  EncodeNoticeFields(Tag(BackendTag::kNoticeResponse), msg, out);
}

void EncodeErrorResponse(std::string& out, std::string_view severity, std::string_view sqlstate,
                         std::string_view message, std::string_view detail,
                         std::string_view hint) {
  EncodeSynthesized(Tag(BackendTag::kErrorResponse), out, severity, sqlstate, message, detail,
                    hint);
}

void EncodeNoticeResponse(std::string& out, std::string_view severity, std::string_view sqlstate,
                          std::string_view message, std::string_view detail,
                          std::string_view hint) {
  EncodeSynthesized(Tag(BackendTag::kNoticeResponse), out, severity, sqlstate, message, detail,
                    hint);
}

// --- Extended query --------------------------------------------------------------

absl::StatusOr<ParseComplete> DecodeParseComplete(std::string_view payload) {
  return DecodeEmpty<ParseComplete>(payload, "ParseComplete");
}
absl::StatusOr<BindComplete> DecodeBindComplete(std::string_view payload) {
  return DecodeEmpty<BindComplete>(payload, "BindComplete");
}
absl::StatusOr<CloseComplete> DecodeCloseComplete(std::string_view payload) {
  return DecodeEmpty<CloseComplete>(payload, "CloseComplete");
}
absl::StatusOr<NoData> DecodeNoData(std::string_view payload) {
  return DecodeEmpty<NoData>(payload, "NoData");
}
absl::StatusOr<PortalSuspended> DecodePortalSuspended(std::string_view payload) {
  return DecodeEmpty<PortalSuspended>(payload, "PortalSuspended");
}
void Encode(const ParseComplete&, std::string& out) {
  EncodeEmpty(Tag(BackendTag::kParseComplete), out);
}
void Encode(const BindComplete&, std::string& out) {
  EncodeEmpty(Tag(BackendTag::kBindComplete), out);
}
void Encode(const CloseComplete&, std::string& out) {
  EncodeEmpty(Tag(BackendTag::kCloseComplete), out);
}
void Encode(const NoData&, std::string& out) { EncodeEmpty(Tag(BackendTag::kNoData), out); }
void Encode(const PortalSuspended&, std::string& out) {
  EncodeEmpty(Tag(BackendTag::kPortalSuspended), out);
}

// ParameterDescription (B): Int16 n, Int32[n] parameter type OIDs.
absl::StatusOr<ParameterDescription> DecodeParameterDescription(std::string_view payload) {
  WireReader r(payload, "ParameterDescription");
  ParameterDescription m;
  uint16_t count = 0;
  if (r.ReadUint16(count, "parameter count") && r.CheckCount(count, 4, "parameter types")) {
    m.parameter_types.reserve(count);
    for (uint16_t i = 0; i < count && r.ok(); ++i) {
      Oid oid;
      if (r.ReadUint32(oid, "parameter type")) m.parameter_types.push_back(oid);
    }
  }
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const ParameterDescription& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(BackendTag::kParameterDescription));
  AppendInt16(out, static_cast<int16_t>(msg.parameter_types.size()));
  for (Oid oid : msg.parameter_types) AppendInt32(out, static_cast<int32_t>(oid));
  FinishMessage(out, start);
}

// --- COPY ----------------------------------------------------------------------------

absl::StatusOr<CopyInResponse> DecodeCopyInResponse(std::string_view payload) {
  CopyInResponse m;
  if (absl::Status s = DecodeCopyResponse(payload, "CopyInResponse", m); !s.ok()) return s;
  return m;
}
absl::StatusOr<CopyOutResponse> DecodeCopyOutResponse(std::string_view payload) {
  CopyOutResponse m;
  if (absl::Status s = DecodeCopyResponse(payload, "CopyOutResponse", m); !s.ok()) return s;
  return m;
}
absl::StatusOr<CopyBothResponse> DecodeCopyBothResponse(std::string_view payload) {
  CopyBothResponse m;
  if (absl::Status s = DecodeCopyResponse(payload, "CopyBothResponse", m); !s.ok()) return s;
  return m;
}
void Encode(const CopyInResponse& msg, std::string& out) {
  EncodeCopyResponse(Tag(BackendTag::kCopyInResponse), msg, out);
}
void Encode(const CopyOutResponse& msg, std::string& out) {
  EncodeCopyResponse(Tag(BackendTag::kCopyOutResponse), msg, out);
}
void Encode(const CopyBothResponse& msg, std::string& out) {
  EncodeCopyResponse(Tag(BackendTag::kCopyBothResponse), msg, out);
}

// --- Asynchronous and legacy ----------------------------------------------------------

// NotificationResponse (B): Int32 process ID, String channel, String payload.
absl::StatusOr<NotificationResponse> DecodeNotificationResponse(std::string_view payload) {
  WireReader r(payload, "NotificationResponse");
  NotificationResponse m;
  r.ReadInt32(m.process_id, "process ID");
  r.ReadCString(m.channel, "channel name");
  r.ReadCString(m.payload, "payload");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

std::optional<int32_t> PeekNotificationPid(std::string_view raw) {
  if (raw.size() < 9) return std::nullopt;
  return static_cast<int32_t>(LoadUint32(raw.data() + 5));
}

void PatchNotificationPid(char* raw, int32_t pid) { StoreUint32(raw + 5, static_cast<uint32_t>(pid)); }

bool AppendWithTextFormats(std::string_view raw, std::string& out) {
  const size_t start = out.size();
  out.append(raw);
  if (raw.size() < 7) return false;
  size_t pos = 5;
  const auto n = static_cast<uint16_t>((static_cast<unsigned char>(raw[pos]) << 8) |
                                       static_cast<unsigned char>(raw[pos + 1]));
  pos += 2;
  for (uint16_t i = 0; i < n; ++i) {
    const size_t nul = raw.find('\0', pos);
    if (nul == std::string_view::npos) return false;
    pos = nul + 1 + 4 + 2 + 4 + 2 + 4;  // table oid, attribute, type oid, size, typmod
    if (pos + 2 > raw.size()) return false;
    out[start + pos] = 0;
    out[start + pos + 1] = 0;
    pos += 2;
  }
  return true;
}

void Encode(const NotificationResponse& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(BackendTag::kNotificationResponse));
  AppendInt32(out, msg.process_id);
  AppendCString(out, msg.channel);
  AppendCString(out, msg.payload);
  FinishMessage(out, start);
}

// FunctionCallResponse (B): Int32 length (-1 = NULL), Byten.
absl::StatusOr<FunctionCallResponse> DecodeFunctionCallResponse(std::string_view payload) {
  WireReader r(payload, "FunctionCallResponse");
  FunctionCallResponse m;
  r.ReadNullableBytes(m.result, "result value");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return m;
}

void Encode(const FunctionCallResponse& msg, std::string& out) {
  MessageStart start = BeginMessage(out, Tag(BackendTag::kFunctionCallResponse));
  if (msg.result.has_value()) {
    AppendInt32(out, static_cast<int32_t>(msg.result->size()));
    AppendBytes(out, *msg.result);
  } else {
    AppendInt32(out, -1);
  }
  FinishMessage(out, start);
}

// --- Generic dispatch -------------------------------------------------------------------

namespace {

template <typename T>
absl::StatusOr<BackendMessage> Wrap(absl::StatusOr<T> decoded) {
  if (!decoded.ok()) return decoded.status();
  return BackendMessage(*std::move(decoded));
}

}  // namespace

absl::StatusOr<BackendMessage> DecodeBackendMessage(const Frame& frame) {
  const std::string_view p = frame.payload;
  switch (frame.backend_tag()) {
    case BackendTag::kAuthentication: return Wrap(DecodeAuthentication(p));
    case BackendTag::kBackendKeyData: return Wrap(DecodeBackendKeyData(p));
    case BackendTag::kBindComplete: return Wrap(DecodeBindComplete(p));
    case BackendTag::kCloseComplete: return Wrap(DecodeCloseComplete(p));
    case BackendTag::kCommandComplete: return Wrap(DecodeCommandComplete(p));
    case BackendTag::kCopyBothResponse: return Wrap(DecodeCopyBothResponse(p));
    case BackendTag::kCopyData: return Wrap(DecodeCopyData(p));
    case BackendTag::kCopyDone: return Wrap(DecodeCopyDone(p));
    case BackendTag::kCopyInResponse: return Wrap(DecodeCopyInResponse(p));
    case BackendTag::kCopyOutResponse: return Wrap(DecodeCopyOutResponse(p));
    case BackendTag::kDataRow: return Wrap(DecodeDataRow(p));
    case BackendTag::kEmptyQueryResponse: return Wrap(DecodeEmptyQueryResponse(p));
    case BackendTag::kErrorResponse: return Wrap(DecodeErrorResponse(p));
    case BackendTag::kFunctionCallResponse: return Wrap(DecodeFunctionCallResponse(p));
    case BackendTag::kNegotiateProtocolVersion: return Wrap(DecodeNegotiateProtocolVersion(p));
    case BackendTag::kNoData: return Wrap(DecodeNoData(p));
    case BackendTag::kNoticeResponse: return Wrap(DecodeNoticeResponse(p));
    case BackendTag::kNotificationResponse: return Wrap(DecodeNotificationResponse(p));
    case BackendTag::kParameterDescription: return Wrap(DecodeParameterDescription(p));
    case BackendTag::kParameterStatus: return Wrap(DecodeParameterStatus(p));
    case BackendTag::kParseComplete: return Wrap(DecodeParseComplete(p));
    case BackendTag::kPortalSuspended: return Wrap(DecodePortalSuspended(p));
    case BackendTag::kReadyForQuery: return Wrap(DecodeReadyForQuery(p));
    case BackendTag::kRowDescription: return Wrap(DecodeRowDescription(p));
  }
  const auto u = static_cast<unsigned char>(frame.tag);
  return ProtocolError(fmt::format("invalid backend message type 0x{:02x}", u));
}

void Encode(const BackendMessage& msg, std::string& out) {
  std::visit([&out](const auto& m) { Encode(m, out); }, msg);
}

}  // namespace hyperpool::protocol
