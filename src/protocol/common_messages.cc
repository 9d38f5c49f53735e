#include "protocol/common_messages.h"

#include "protocol/tags.h"
#include "protocol/wire_reader.h"
#include "protocol/wire_writer.h"

namespace hyperpool::protocol {

// "Message Formats" > CopyData (F & B): Byten data, the rest of the message.
absl::StatusOr<CopyData> DecodeCopyData(std::string_view payload) {
  return CopyData{payload};
}

void Encode(const CopyData& msg, std::string& out) {
  AppendFrame(out, static_cast<char>(FrontendTag::kCopyData), msg.data);
}

// "Message Formats" > CopyDone (F & B): no body.
absl::StatusOr<CopyDone> DecodeCopyDone(std::string_view payload) {
  WireReader r(payload, "CopyDone");
  if (absl::Status s = r.Finish(); !s.ok()) return s;
  return CopyDone{};
}

void Encode(const CopyDone&, std::string& out) {
  AppendFrame(out, static_cast<char>(FrontendTag::kCopyDone), {});
}

}  // namespace hyperpool::protocol
