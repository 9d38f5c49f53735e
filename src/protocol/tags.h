// Message tags and protocol constants of the PostgreSQL frontend/backend
// protocol 3.0 and 3.2 (PostgreSQL docs, "Frontend/Backend Protocol" >
// "Message Formats"; 3.2 added NegotiateProtocolVersion handling for minor
// versions and variable-length cancel keys).
//
// The same byte means different things per direction ('D' is Describe from a
// frontend but DataRow from a backend), so there is one enum per direction and
// nothing converts between them implicitly.
#ifndef HYPERPOOL_PROTOCOL_TAGS_H_
#define HYPERPOOL_PROTOCOL_TAGS_H_

#include <cstdint>
#include <string_view>

namespace hyperpool::protocol {

// Tags of messages sent by a frontend (client) after the startup packet.
enum class FrontendTag : char {
  kBind = 'B',
  kClose = 'C',
  kCopyData = 'd',
  kCopyDone = 'c',
  kCopyFail = 'f',
  kDescribe = 'D',
  kExecute = 'E',
  kFlush = 'H',
  kFunctionCall = 'F',
  kParse = 'P',
  // PasswordMessage, SASLInitialResponse, SASLResponse and GSSResponse all
  // share 'p'; which one it is depends on the authentication exchange state.
  kPassword = 'p',
  kQuery = 'Q',
  kSync = 'S',
  kTerminate = 'X',
};

// Tags of messages sent by a backend (server).
enum class BackendTag : char {
  kAuthentication = 'R',  // Every Authentication* message; Int32 subtype.
  kBackendKeyData = 'K',
  kBindComplete = '2',
  kCloseComplete = '3',
  kCommandComplete = 'C',
  kCopyBothResponse = 'W',
  kCopyData = 'd',
  kCopyDone = 'c',
  kCopyInResponse = 'G',
  kCopyOutResponse = 'H',
  kDataRow = 'D',
  kEmptyQueryResponse = 'I',
  kErrorResponse = 'E',
  kFunctionCallResponse = 'V',
  kNegotiateProtocolVersion = 'v',
  kNoData = 'n',
  kNoticeResponse = 'N',
  kNotificationResponse = 'A',
  kParameterDescription = 't',
  kParameterStatus = 'S',
  kParseComplete = '1',
  kPortalSuspended = 's',
  kReadyForQuery = 'Z',
  kRowDescription = 'T',
};

// True if `tag` is a message type a frontend may send in tagged mode.
bool IsFrontendTag(char tag);
// True if `tag` is a message type a backend may send.
bool IsBackendTag(char tag);

// Human-readable message name for logs and errors ("Bind", "DataRow");
// "unknown" for a value outside the enum.
std::string_view FrontendTagName(FrontendTag tag);
std::string_view BackendTagName(BackendTag tag);

// Protocol versions are (major << 16) | minor.
constexpr int32_t MakeProtocolVersion(int major, int minor) {
  return static_cast<int32_t>((major << 16) | minor);
}
constexpr int ProtocolMajor(int32_t version) { return (version >> 16) & 0xFFFF; }
constexpr int ProtocolMinor(int32_t version) { return version & 0xFFFF; }
inline constexpr int32_t kProtocolVersion30 = MakeProtocolVersion(3, 0);  // 196608
inline constexpr int32_t kProtocolVersion32 = MakeProtocolVersion(3, 2);  // 196610

// Request codes that take the place of a protocol version in a startup packet.
inline constexpr int32_t kCancelRequestCode = 80877102;  // 1234.5678
inline constexpr int32_t kSslRequestCode = 80877103;     // 1234.5679
inline constexpr int32_t kGssEncRequestCode = 80877104;  // 1234.5680

// Size limits (values of the Int32 length field, which counts itself).
// PostgreSQL's MAX_STARTUP_PACKET_LENGTH: a startup packet above it is
// rejected before reading its body.
inline constexpr uint32_t kMaxStartupPacketLength = 10000;
// PostgreSQL's PQ_LARGE_MESSAGE_LIMIT (MaxAllocSize - 1): 1 GiB.
inline constexpr uint32_t kDefaultMaxMessageLength = (1u << 30) - 1;
// Cancel keys: exactly 4 bytes in 3.0; 4..256 bytes from 3.2 on.
inline constexpr size_t kMinCancelKeyLength = 4;
inline constexpr size_t kMaxCancelKeyLength = 256;

}  // namespace hyperpool::protocol

#endif  // HYPERPOOL_PROTOCOL_TAGS_H_
