// Low-level writers for the protocol's data types (PostgreSQL docs,
// "Frontend/Backend Protocol" > "Message Data Types"): big-endian integers,
// NUL-terminated strings, raw bytes, and the length-prefixed frame around them.
//
// Everything appends to a caller-owned std::string so a connection can reuse
// one output buffer and steady-state encoding allocates nothing.
#ifndef HYPERPOOL_PROTOCOL_WIRE_WRITER_H_
#define HYPERPOOL_PROTOCOL_WIRE_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hyperpool::protocol {

// Writes a big-endian Uint32 / Uint64 at `p` (space the caller made; the
// counterpart of LoadUint32 in wire_reader.h).
inline void StoreUint32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * (3 - i)));
}
inline void StoreUint64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * (7 - i)));
}

// Appends one byte.
inline void AppendByte(std::string& out, uint8_t value) {
  out.push_back(static_cast<char>(value));
}
// Appends a big-endian Int16.
void AppendInt16(std::string& out, int16_t value);
// Appends a big-endian Int32.
void AppendInt32(std::string& out, int32_t value);
// Appends `value` followed by a NUL (the protocol's String type). An embedded
// NUL truncates the value there: otherwise the peer would parse the remainder
// as further fields, which would let a string inject protocol data.
void AppendCString(std::string& out, std::string_view value);
// Appends bytes verbatim (Byten).
inline void AppendBytes(std::string& out, std::string_view bytes) {
  out.append(bytes.data(), bytes.size());
}

// Position of a message being built in place; see BeginMessage().
struct MessageStart {
  size_t length_offset = 0;  // Offset of the Int32 length field in `out`.
};

// Starts a tagged message: appends `tag` and a placeholder length, returns
// where to patch it. Append the body, then call FinishMessage():
//   MessageStart m = BeginMessage(out, 'Q');
//   AppendCString(out, sql);
//   FinishMessage(out, m);
MessageStart BeginMessage(std::string& out, char tag);
// Starts an untagged startup-mode packet (StartupMessage, SSLRequest, ...).
MessageStart BeginStartupPacket(std::string& out);
// Patches the length of the message started at `start` to cover everything
// appended since. The body must stay below 2 GiB (a caller bug otherwise).
void FinishMessage(std::string& out, MessageStart start);

// Appends a complete tagged frame: tag, length, payload.
void AppendFrame(std::string& out, char tag, std::string_view payload);
// Appends a frame exactly as received (Frame::raw): forwarding without
// re-encoding.
inline void AppendRawFrame(std::string& out, std::string_view raw_frame) {
  AppendBytes(out, raw_frame);
}

}  // namespace hyperpool::protocol

#endif  // HYPERPOOL_PROTOCOL_WIRE_WRITER_H_
