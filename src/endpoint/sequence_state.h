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
// have left sequence state on it (SequenceOwner) and sends DISCARD SEQUENCES
// in the settings replay (one Query, src/endpoint/settings_replay.h) when the
// connection passes to a different session. Which units "may have left
// state" is decided by MayUseSequences: cheap and conservative (false
// positives cost one DISCARD SEQUENCES, a false negative a leak).
//
// Left alone: a view or rule whose definition calls nextval, read by a
// plain SELECT without any other function call. A session that lands on
// another connection does not see its own currval there (it gets 55000, or
// its own older value on a backend it used before; never another
// session's).

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
// (0: none; session serials start at 1 and are never reused by an Endpoint).
class SequenceOwner {
 public:
  // The connection is being lent to session `serial`: true if another
  // session's sequence state may be on it (DISCARD SEQUENCES first).
  bool NeedsDiscardFor(std::uint64_t serial) const { return owner_ != 0 && owner_ != serial; }
  // DISCARD SEQUENCES (or DISCARD ALL) ran.
  void Discarded() { owner_ = 0; }
  // Session `serial` ran a unit that may have used sequences.
  void UsedBy(std::uint64_t serial) { owner_ = serial; }
  std::uint64_t owner() const { return owner_; }

 private:
  std::uint64_t owner_ = 0;
};

}  // namespace hyperpool::endpoint
