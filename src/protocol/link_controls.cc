#include "protocol/link_controls.h"

#include <algorithm>
#include <cstring>

#include "protocol/link_protocol.h"
#include "protocol/wire_reader.h"
#include "protocol/wire_writer.h"

namespace hyperpool::protocol {
namespace {

void AppendUint64(std::string& out, uint64_t v) {
  char b[8];
  StoreUint64(b, v);
  out.append(b, sizeof(b));
}

// A bounds-checked reader over a control payload.
struct Reader {
  std::string_view s;
  bool ok = true;
  uint64_t U(int bytes) {
    if (s.size() < static_cast<size_t>(bytes)) {
      ok = false;
      return 0;
    }
    uint64_t v = 0;
    if (bytes == 8) {
      v = (uint64_t{LoadUint32(s.data())} << 32) | LoadUint32(s.data() + 4);
    } else if (bytes == 4) {
      v = LoadUint32(s.data());
    } else {
      for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(s[i]);
    }
    s.remove_prefix(bytes);
    return v;
  }
  std::vector<std::string> Tables() {
    uint64_t n = U(4);
    std::vector<std::string> out;
    // Each name takes at least its NUL: a count the bytes cannot hold fails
    // below without reserving for it.
    if (ok && n <= s.size()) out.reserve(n);
    for (uint64_t i = 0; ok && i < n; ++i) {
      size_t nul = s.find('\0');
      if (nul == std::string_view::npos) {
        ok = false;
        break;
      }
      out.emplace_back(s.substr(0, nul));
      s.remove_prefix(nul + 1);
    }
    return out;
  }
};

// A control frame written in place: `out` grows once by the frame's exact
// size (no append per field), and the fields fill it in order.
class FrameFill {
 public:
  FrameFill(std::string& out, size_t payload) {
    const size_t at = out.size();
    out.resize(at + 5 + payload);
    p_ = out.data() + at;
    *p_++ = link::kControlTag;
    U32(static_cast<uint32_t>(payload + 4));
  }
  void Byte(char c) { *p_++ = c; }
  void U64(uint64_t v) {
    StoreUint64(p_, v);
    p_ += 8;
  }
  void U32(uint32_t v) {
    StoreUint32(p_, v);
    p_ += 4;
  }
  void Tables(const std::vector<std::string>& tables) {
    U32(static_cast<uint32_t>(tables.size()));
    for (const std::string& t : tables) {
      std::memcpy(p_, t.data(), t.size());
      p_ += t.size();
      *p_++ = '\0';
    }
  }
  static size_t TablesSize(const std::vector<std::string>& tables) {
    size_t n = 4;
    for (const std::string& t : tables) n += t.size() + 1;
    return n;
  }

 private:
  char* p_;
};

}  // namespace

void AppendControl(std::string& out, const BeginControl& c) {
  const MessageStart start = BeginMessage(out, link::kControlTag);
  out.push_back('B');
  AppendUint64(out, c.digest);
  FinishMessage(out, start);
}

void AppendControl(std::string& out, const StoreControl& c) { AppendStoreControl(out, c, c.tables); }

void AppendStoreControl(std::string& out, const StoreControl& c, const std::vector<std::string>& tables) {
  FrameFill f(out, 1 + 8 + 4 + 8 + FrameFill::TablesSize(tables) + (c.source != 0 ? 8 : 0));
  f.Byte('S');
  f.U64(c.digest);
  f.U32(static_cast<uint32_t>(std::clamp<int64_t>(c.ttl.count(), 0, 0xffffffff)));
  f.U64(c.generation);
  f.Tables(tables);
  if (c.source != 0) f.U64(c.source);
}

void AppendControl(std::string& out, const InvalidateControl& c) {
  FrameFill f(out, 1 + 8 + 1 + FrameFill::TablesSize(c.tables) + (c.source != 0 ? 8 : 0));
  f.Byte('I');
  f.U64(c.generation);
  f.Byte(!c.all ? 0 : c.rows_only ? 2 : 1);
  f.Tables(c.tables);
  if (c.source != 0) f.U64(c.source);
}

void AppendControl(std::string& out, const ReleaseControl& c) {
  FrameFill f(out, 2);
  f.Byte('P');
  f.Byte(c.wrote ? 1 : 0);
}

std::optional<Control> DecodeControl(std::string_view payload) {
  if (payload.empty()) return std::nullopt;
  char kind = payload[0];
  Reader r{payload.substr(1)};
  Control out;
  if (kind == 'B') {
    BeginControl c;
    c.digest = r.U(8);
    out = c;
  } else if (kind == 'S') {
    StoreControl c;
    c.digest = r.U(8);
    c.ttl = std::chrono::milliseconds(r.U(4));
    c.generation = r.U(8);
    c.tables = r.Tables();
    if (r.ok && r.s.size() == 8) c.source = r.U(8);
    out = std::move(c);
  } else if (kind == 'I') {
    InvalidateControl c;
    c.generation = r.U(8);
    const uint64_t all = r.U(1);
    c.all = all != 0;
    c.rows_only = all == 2;  // any other non-zero value: all, metadata too
    c.tables = r.Tables();
    if (r.ok && r.s.size() == 8) c.source = r.U(8);
    out = std::move(c);
  } else if (kind == 'P') {
    const uint64_t flags = r.U(1);
    if (flags > 1) return std::nullopt;
    out = ReleaseControl{flags == 1};
  } else {
    return std::nullopt;
  }
  if (!r.ok || !r.s.empty()) return std::nullopt;
  return out;
}

}  // namespace hyperpool::protocol
