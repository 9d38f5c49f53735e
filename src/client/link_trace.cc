#include "client/link_trace.h"

#include <cstdlib>

#include <fmt/format.h>

#include "protocol/frame_reader.h"
#include "protocol/frontend_messages.h"

namespace hyperpool::client {
namespace {

constexpr std::size_t kSqlShown = 48;

std::string Shorten(std::string_view sql) {
  std::string out(sql.substr(0, kSqlShown));
  for (char& c : out) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  if (sql.size() > kSqlShown) out += "...";
  return out;
}

}  // namespace

std::string SummarizeFlight(std::string_view bytes, bool frontend) {
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  std::string out;
  while (!bytes.empty()) {
    protocol::FrameReader::Result r = reader.Read(bytes);
    if (!r.is_frame()) {
      out += fmt::format("+{} bytes", bytes.size());
      break;
    }
    const protocol::Frame& f = r.frame();
    if (!out.empty()) out += ' ';
    out += f.tag;
    if (!frontend) {
      // tags only
    } else if (f.tag == 'P') {
      if (auto p = protocol::DecodeParse(f.payload); p.ok()) {
        out += fmt::format("[{}]({})", p->statement, Shorten(p->query));
      }
    } else if (f.tag == 'Q') {
      if (auto q = protocol::DecodeQuery(f.payload); q.ok()) out += fmt::format("({})", Shorten(q->query));
    } else if (f.tag == 'D' && !f.payload.empty()) {
      out += fmt::format("[{}]", f.payload[0]);
    }
    bytes.remove_prefix(f.size());
  }
  return out;
}

bool ExpectsAnswer(std::string_view bytes) {
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  while (!bytes.empty()) {
    protocol::FrameReader::Result r = reader.Read(bytes);
    if (!r.is_frame()) return false;
    const char tag = r.frame().tag;
    if (tag == 'Q' || tag == 'S' || tag == 'F' || tag == 'H') return true;
    bytes.remove_prefix(r.frame().size());
  }
  return false;
}

bool LinkTraceEnabled() {
  // Read once per Client (at construction), never on the data path.
  const char* env = std::getenv("HYPERPOOL_TRACE_LINK");
  return env != nullptr && env[0] != '\0' && std::string_view(env) != "0";
}

}  // namespace hyperpool::client
