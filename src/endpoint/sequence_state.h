#pragma once
// Sequence state (currval / lastval) across pooled sessions, without I/O
// (unit-tested in tests/unit/endpoint/sequence_state_test.cc).
//
// PostgreSQL keeps, per backend, the last value nextval() returned for each
// sequence; currval() and lastval() read it. Through a pooler one session's
// values would show in the next session that borrows the backend (the
// `constraints` regression saw currval 4 where a direct session sees 8). A
// fresh backend answers 55000 "currval of sequence ... is not yet defined in
// this session", and DISCARD SEQUENCES gives exactly that.
//
// The Endpoint therefore remembers, per origin connection, which session may
// have left sequence state on it and when (SequenceOwner: the session's
// serial and its sequence generation, which grows each time one of its
// units that may have used sequences ends on some connection), and sends
// DISCARD SEQUENCES in the settings replay (one Query,
// src/endpoint/settings_replay.h) when the connection is lent to a
// different session, or to the same session after it used sequences on
// another connection (the values here may be older than its latest). So
// currval/lastval give the session's latest value or 55000, never another
// session's and never a stale one of its own. Which units "may have left
// state" is decided by MayUseSequences: cheap and conservative (false
// positives cost one DISCARD SEQUENCES, a false negative a leak).
//
// Left alone: a view or rule whose definition calls nextval, read by a
// plain SELECT without any other function call.

#include <cstdint>
#include <string_view>

namespace hyperpool::endpoint {

// Whether executing `sql` may call nextval() or setval() and so leave
// sequence state on the backend: nextval/setval named anywhere; any
// statement that writes rows (INSERT, UPDATE, DELETE, MERGE, COPY,
// TRUNCATE: serial/identity defaults and triggers), runs code (DO, CALL,
// EXECUTE, REFRESH) or changes the schema (CREATE, ALTER: a new serial
// column fills existing rows); any call of a function other than a list of
// common built-ins, or of a schema-qualified or quoted name. A word scan,
// not a parse: words inside strings and comments count too (harmless).
bool MayUseSequences(std::string_view sql);

// The session that may have left sequence state on one origin connection
// (0: none; session serials start at 1 and are never reused by an Endpoint),
// and that session's sequence generation then.
class SequenceOwner {
 public:
  // The connection is being lent to session `serial`, whose sequence
  // generation is `generation`: true if it may hold another session's
  // values, or values of this session older than its latest (DISCARD
  // SEQUENCES first).
  bool NeedsDiscardFor(std::uint64_t serial, std::uint64_t generation) const {
    return owner_ != 0 && (owner_ != serial || generation_ != generation);
  }
  // DISCARD SEQUENCES (or DISCARD ALL) ran.
  void Discarded() { owner_ = generation_ = 0; }
  // A unit of session `serial` that may have used sequences ended here;
  // `generation` is the session's generation counting that unit.
  void UsedBy(std::uint64_t serial, std::uint64_t generation) {
    owner_ = serial;
    generation_ = generation;
  }
  std::uint64_t owner() const { return owner_; }

 private:
  std::uint64_t owner_ = 0;
  std::uint64_t generation_ = 0;
};

}  // namespace hyperpool::endpoint
