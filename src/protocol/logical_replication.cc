#include "protocol/logical_replication.h"

#include <cstdio>

#include "absl/status/status.h"
#include "protocol/wire_reader.h"
#include "protocol/wire_writer.h"

namespace hyperpool::protocol {
namespace {

bool ReadInt64(WireReader& r, uint64_t& value, const char* field) {
  std::string_view bytes;
  if (!r.ReadBytes(8, bytes, field)) return false;
  value = 0;
  for (char c : bytes) value = (value << 8) | static_cast<unsigned char>(c);
  return true;
}

void AppendInt64(std::string& out, uint64_t value) {
  AppendInt32(out, static_cast<int32_t>(static_cast<uint32_t>(value >> 32)));
  AppendInt32(out, static_cast<int32_t>(static_cast<uint32_t>(value)));
}

std::optional<uint32_t> ParseHex32(std::string_view s) {
  if (s.empty() || s.size() > 8) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    uint32_t d;
    if (c >= '0' && c <= '9') {
      d = static_cast<uint32_t>(c - '0');
    } else if (c >= 'A' && c <= 'F') {
      d = static_cast<uint32_t>(c - 'A' + 10);
    } else if (c >= 'a' && c <= 'f') {
      d = static_cast<uint32_t>(c - 'a' + 10);
    } else {
      return std::nullopt;
    }
    v = (v << 4) | d;
  }
  return v;
}

// One identifier as quote_identifier() writes it, taken off the front of
// `in`: "a""b" -> a"b; unquoted ones run to the next '.', ',' or ':' (they
// are plain lowercase names, digits, '_' and '$').
bool TakeIdentifier(std::string_view& in, std::string& out) {
  out.clear();
  if (in.empty()) return false;
  if (in.front() == '"') {
    size_t i = 1;
    while (i < in.size()) {
      if (in[i] == '"') {
        if (i + 1 < in.size() && in[i + 1] == '"') {
          out.push_back('"');
          i += 2;
          continue;
        }
        in.remove_prefix(i + 1);
        return !out.empty();
      }
      out.push_back(in[i++]);
    }
    return false;  // no closing quote
  }
  size_t i = 0;
  while (i < in.size() && in[i] != '.' && in[i] != ',' && in[i] != ':' && in[i] != ' ') ++i;
  if (i == 0) return false;
  out.assign(in.substr(0, i));
  in.remove_prefix(i);
  return true;
}

absl::Status BadLine(std::string_view line) {
  return absl::InvalidArgumentError(
      std::string("test_decoding: cannot read relation names in: ").append(line.substr(0, 120)));
}

}  // namespace

std::optional<Lsn> ParseLsn(std::string_view text) {
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  std::optional<uint32_t> hi = ParseHex32(text.substr(0, slash));
  std::optional<uint32_t> lo = ParseHex32(text.substr(slash + 1));
  if (!hi || !lo) return std::nullopt;
  return (static_cast<Lsn>(*hi) << 32) | *lo;
}

std::string FormatLsn(Lsn lsn) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%X/%X", static_cast<unsigned>(lsn >> 32), static_cast<unsigned>(lsn));
  return buf;
}

absl::StatusOr<ReplicationMessage> DecodeReplicationMessage(std::string_view payload) {
  if (payload.empty()) return absl::InvalidArgumentError("replication message: empty CopyData");
  const char kind = payload.front();
  if (kind == 'w') {
    WireReader r(payload.substr(1), "XLogData");
    XLogData m;
    uint64_t time = 0;
    if (!ReadInt64(r, m.wal_start, "start") || !ReadInt64(r, m.wal_end, "end") || !ReadInt64(r, time, "time")) {
      return r.status();
    }
    m.send_time = static_cast<int64_t>(time);
    m.data = r.ReadRest();
    return m;
  }
  if (kind == 'k') {
    WireReader r(payload.substr(1), "PrimaryKeepalive");
    PrimaryKeepalive m;
    uint64_t time = 0;
    uint8_t reply = 0;
    if (!ReadInt64(r, m.wal_end, "end") || !ReadInt64(r, time, "time") || !r.ReadByte(reply, "reply")) {
      return r.status();
    }
    m.send_time = static_cast<int64_t>(time);
    m.reply_requested = reply != 0;
    if (absl::Status s = r.Finish(); !s.ok()) return s;
    return m;
  }
  return absl::InvalidArgumentError(std::string("replication message: unknown kind '") + kind + "'");
}

void AppendStandbyStatusUpdate(std::string& out, Lsn position, int64_t send_time, bool reply_requested) {
  MessageStart m = BeginMessage(out, 'd');
  AppendByte(out, 'r');
  AppendInt64(out, position);  // written
  AppendInt64(out, position);  // flushed: what the slot may release
  AppendInt64(out, position);  // applied
  AppendInt64(out, static_cast<uint64_t>(send_time));
  AppendByte(out, reply_requested ? 1 : 0);
  FinishMessage(out, m);
}

absl::StatusOr<TestDecodingLine> ParseTestDecodingLine(std::string_view line) {
  TestDecodingLine out;
  using Kind = TestDecodingLine::Kind;
  auto word = [&](std::string_view w) {
    return line.size() >= w.size() && line.substr(0, w.size()) == w &&
           (line.size() == w.size() || line[w.size()] == ' ' || line[w.size()] == ':');
  };
  if (word("BEGIN")) {
    out.kind = Kind::kBegin;
    return out;
  }
  if (word("COMMIT")) {
    out.kind = Kind::kCommit;
    return out;
  }
  if (word("message")) {
    out.kind = Kind::kMessage;
    return out;
  }
  if (!line.starts_with("table ")) return out;  // kOther
  std::string_view rest = line.substr(6);
  while (true) {
    RelationName rel;
    if (!TakeIdentifier(rest, rel.schema) || rest.empty() || rest.front() != '.') return BadLine(line);
    rest.remove_prefix(1);
    if (!TakeIdentifier(rest, rel.name)) return BadLine(line);
    out.relations.push_back(std::move(rel));
    if (rest.starts_with(", ")) {
      rest.remove_prefix(2);
      continue;
    }
    if (rest.starts_with(": ")) {
      rest.remove_prefix(2);
      break;
    }
    return BadLine(line);
  }
  if (rest.starts_with("TRUNCATE:")) {
    out.kind = Kind::kTruncate;
  } else if (out.relations.size() == 1 &&
             (rest.starts_with("INSERT:") || rest.starts_with("UPDATE:") || rest.starts_with("DELETE:"))) {
    out.kind = Kind::kChange;
  } else {
    // A change kind this parser does not know, on named tables: still a
    // change to them (the safe reading).
    out.kind = Kind::kChange;
  }
  return out;
}

}  // namespace hyperpool::protocol
