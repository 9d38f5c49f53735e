// libFuzzer target: everything a (possibly hostile or buggy) origin server can
// send the Endpoint half. Every decoded message must re-encode to the exact
// bytes received and decode back to an equal value; DataRow iteration must
// stay inside the payload. Also the logical replication stream's payloads
// and test_decoding lines (the WAL feed).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <optional>
#include <string_view>
#include <variant>

#include "protocol/codec.h"
#include "protocol/logical_replication.h"

namespace hp = hyperpool::protocol;

namespace {

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "fuzz_backend_decoder: %s\n", what);
  std::abort();
}

void CheckDataRow(const hp::DataRow& row, std::string_view payload) {
  size_t count = 0;
  for (hp::NullableValue v : row) {
    ++count;
    if (v.has_value() && (v->data() < payload.data() ||
                          v->data() + v->size() > payload.data() + payload.size())) {
      Die("DataRow column outside the payload");
    }
  }
  if (count != row.column_count) Die("DataRow column count mismatch");
}

void CheckFrame(const hp::Frame& frame) {
  absl::StatusOr<hp::BackendMessage> decoded = hp::DecodeBackendMessage(frame);
  if (!decoded.ok()) {
    if (!hp::IsProtocolError(decoded.status())) Die("non-protocol error");
    return;
  }
  if (const auto* row = std::get_if<hp::DataRow>(&*decoded)) CheckDataRow(*row, frame.payload);
  if (const auto* e = std::get_if<hp::ErrorResponse>(&*decoded)) {
    // Accessors must cope with any field set, including none.
    (void)e->severity();
    (void)e->sqlstate();
    (void)e->message();
  }
  std::string out;
  hp::Encode(*decoded, out);
  if (out != frame.raw) Die("backend message re-encoding differs");
  hp::FrameReader::Result r = hp::FrameReader().Read(out);
  if (!r.is_frame() || r.frame().size() != out.size()) Die("re-encoded frame unreadable");
  absl::StatusOr<hp::BackendMessage> again = hp::DecodeBackendMessage(r.frame());
  if (!again.ok() || !(*again == *decoded)) Die("backend message round trip mismatch");
}

void ReadStream(std::string_view data, const hp::FrameReader& reader) {
  while (!data.empty()) {
    hp::FrameReader::Result r = reader.Read(data);
    if (r.is_need_more()) {
      if (r.bytes_needed() <= data.size()) Die("need-more with enough bytes");
      return;
    }
    if (r.is_error()) {
      if (!hp::IsProtocolError(r.status())) Die("non-protocol frame error");
      return;
    }
    if (r.frame().size() < 5 || r.frame().size() > data.size()) Die("bad frame size");
    CheckFrame(r.frame());
    data.remove_prefix(r.frame().size());
  }
}

}  // namespace

// The logical replication stream (a CopyData payload) and test_decoding's
// lines: what the Endpoint's change feed reads (protocol/logical_replication.h).
void CheckReplication(std::string_view input) {
  absl::StatusOr<hp::ReplicationMessage> m = hp::DecodeReplicationMessage(input);
  if (m.ok()) {
    if (const auto* x = std::get_if<hp::XLogData>(&*m)) {
      if (x->data.data() < input.data() || x->data.data() + x->data.size() != input.data() + input.size()) {
        Die("XLogData data outside the payload");
      }
    }
  }
  absl::StatusOr<hp::TestDecodingLine> line = hp::ParseTestDecodingLine(input);
  if (line.ok() && (line->kind == hp::TestDecodingLine::Kind::kChange ||
                    line->kind == hp::TestDecodingLine::Kind::kTruncate) && line->relations.empty()) {
    Die("a table line with no relation");
  }
  if (std::optional<hp::Lsn> lsn = hp::ParseLsn(input); lsn && hp::ParseLsn(hp::FormatLsn(*lsn)) != lsn) {
    Die("LSN does not round-trip");
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  CheckReplication(input);
  ReadStream(input, hp::FrameReader());
  ReadStream(input, hp::FrameReader(hp::FrameReader::Mode::kTagged,
                                    hp::FrameLimits{.max_message_length = 64}));
  return 0;
}
