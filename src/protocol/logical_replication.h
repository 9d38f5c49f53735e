// The logical replication stream, sans I/O (PostgreSQL docs, "Streaming
// Replication Protocol" > START_REPLICATION, and "Logical Streaming
// Replication Protocol"): once START_REPLICATION ... LOGICAL has answered
// CopyBothResponse ('W'), both directions carry CopyData ('d') frames whose
// payload starts with a one-byte kind:
//
//   server -> client  'w' XLogData: Int64 start of the data's WAL, Int64 the
//                     server's WAL end, Int64 send time (µs since
//                     2000-01-01), then the output plugin's bytes.
//                     'k' Primary keepalive: Int64 WAL end, Int64 send time,
//                     Byte1 1 = reply requested.
//   client -> server  'r' Standby status update: Int64 written, flushed and
//                     applied LSNs (+1 of the last byte), Int64 send time,
//                     Byte1 1 = reply requested.
//
// For a logical walsender (PostgreSQL 15 walsender.c) an XLogData's start is
// the LSN of the decoded change (for a COMMIT: the commit record's end) and
// its "WAL end" is the same value; a keepalive's WAL end is how far the
// walsender has decoded (sentPtr), not the server's flush position.
//
// Also here: the text lines of the test_decoding output plugin (shipped
// with PostgreSQL, contrib/test_decoding), which the Endpoint's change feed
// uses because it needs no publication:
//
//   BEGIN [xid]
//   table public.t: INSERT: id[integer]:1 v[text]:'a'      (UPDATE, DELETE)
//   table public.t, public."My T": TRUNCATE: (no-flags)
//   message: transactional: 1 prefix: p, sz: 2 content:xy
//   COMMIT [xid] [(at timestamp)]
//
// Relation names are quote_qualified_identifier()'s: quoted where needed.
#ifndef HYPERPOOL_PROTOCOL_LOGICAL_REPLICATION_H_
#define HYPERPOOL_PROTOCOL_LOGICAL_REPLICATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace hyperpool::protocol {

// A WAL position (XLogRecPtr).
using Lsn = uint64_t;

// "16/B374D848" -> Lsn; nullopt if malformed.
std::optional<Lsn> ParseLsn(std::string_view text);
// Lsn -> "16/B374D848" (PostgreSQL's %X/%X).
std::string FormatLsn(Lsn lsn);

// 'w' (payload of a CopyData frame). `data` views the payload.
struct XLogData {
  Lsn wal_start = 0;
  Lsn wal_end = 0;
  int64_t send_time = 0;
  std::string_view data;
};
// 'k'.
struct PrimaryKeepalive {
  Lsn wal_end = 0;
  int64_t send_time = 0;
  bool reply_requested = false;
};
using ReplicationMessage = std::variant<XLogData, PrimaryKeepalive>;

// Decodes a server CopyData payload of the replication stream. An unknown
// kind or a short message is InvalidArgument (a peer error, never fatal).
absl::StatusOr<ReplicationMessage> DecodeReplicationMessage(std::string_view copy_data_payload);

// Appends a whole CopyData frame carrying a standby status update ('r') with
// written = flushed = applied = `position` (the client has applied
// everything before it).
void AppendStandbyStatusUpdate(std::string& out, Lsn position, int64_t send_time, bool reply_requested);

// Microseconds since 2000-01-01 00:00 UTC (the protocol's timestamps) for a
// Unix time in microseconds.
constexpr int64_t kPostgresEpochOffsetMicros = 946684800LL * 1000000LL;

// ---------------------------------------------------------------------------
// test_decoding lines.
// ---------------------------------------------------------------------------

// A relation as test_decoding names it, unquoted (the catalog's spelling).
struct RelationName {
  std::string schema;
  std::string name;
  bool operator==(const RelationName&) const = default;
};

struct TestDecodingLine {
  enum class Kind : uint8_t {
    kBegin,     // BEGIN [xid]
    kCommit,    // COMMIT [xid] ...
    kChange,    // table s.n: INSERT|UPDATE|DELETE: ...  (relations has one)
    kTruncate,  // table a, b: TRUNCATE: ...
    kMessage,   // message: ... (pg_logical_emit_message)
    kOther,     // anything else (a newer plugin's line): ignored
  };
  Kind kind = Kind::kOther;
  std::vector<RelationName> relations;
};

// Parses one line. A "table" line whose names do not parse is an error: the
// caller cannot know what changed (and invalidates everything).
absl::StatusOr<TestDecodingLine> ParseTestDecodingLine(std::string_view line);

}  // namespace hyperpool::protocol

#endif  // HYPERPOOL_PROTOCOL_LOGICAL_REPLICATION_H_
