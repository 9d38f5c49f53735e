#pragma once
// Which frontend messages a ReadyForQuery will answer, with the COPY
// sub-protocol taken into account (PostgreSQL docs, "Frontend/Backend
// Protocol" > "Message Flow" > "COPY Operations"). No I/O: the Endpoint
// session feeds it every frontend message it forwards and every backend
// message it reads, and adjusts its count of outstanding requests by what
// it returns.
//
// Why this is needed: outside COPY each Query, Sync and FunctionCall is
// answered by exactly one ReadyForQuery. Inside COPY FROM STDIN the backend
// *ignores* Sync and Flush, and consumes any other non-COPY message as the
// trigger of an error (08P01) without executing or answering it. Counting
// those as outstanding would leave the session waiting for a ReadyForQuery
// that never comes, holding its pooled connection forever (the psycopg
// hang). Messages the client pipelined before the backend's CopyInResponse
// (libpq's PQexecParams("COPY ... FROM STDIN") sends Parse/Bind/Execute/Sync
// at once, so its first Sync is ignored) are reconciled when the
// CopyInResponse arrives: the tracker remembers, per counted request, what
// was sent before it.
//
// States (from the frontend stream's point of view):
//   kNormal  - messages are processed normally by the backend
//   kCopyIn  - the backend is reading COPY data for this client: it entered
//              copy-in (CopyInResponse / CopyBothResponse seen) and the
//              client has not ended it (CopyDone, CopyFail, or a message
//              that makes the backend abort the COPY)
#include <cstddef>

#include "common/small_fifo.h"

namespace hyperpool::endpoint {

class CopyTracker {
 public:
  enum class State {
    kNormal,  // see above
    kCopyIn,  // see above
  };

  // A frontend message about to be forwarded to the origin. Returns true if
  // it is a request the backend will answer with its own ReadyForQuery (the
  // caller adds one to its outstanding count).
  bool OnFrontend(char tag);

  // What a backend message changes for the caller's counting.
  struct BackendEffect {
    // Requests counted earlier that will never be answered (subtract them
    // from the outstanding count).
    std::size_t unanswered = 0;
    // The Sync of the extended-protocol unit that started this COPY was
    // ignored: the unit stays open until the client's next Sync (libpq sends
    // CopyDone + Sync), so its connection must not be released before.
    bool unit_reopened = false;
  };
  // A backend message just read.
  BackendEffect OnBackend(char tag);
  // The ErrorResponse just read failed an extended-query message
  // (StatementSession::TakeSkipStarted): PostgreSQL now skips everything up
  // to the next Sync, so a Query or FunctionCall counted after the failed
  // message and before that Sync gets no ReadyForQuery (`unanswered`).
  // With no Sync sent yet, skipping_to_sync() holds until one is: the
  // session drops what comes meanwhile, as the origin would ignore it.
  // (A head request whose span held no extended message failed by itself:
  // a Query's own error skips nothing.)
  BackendEffect OnSkipToSync();
  bool skipping_to_sync() const { return skipping_to_sync_; }

  State state() const { return state_; }
  // True while the client owes the backend COPY data: a session that ends
  // now must send CopyFail (+ Sync) for the origin connection to come back.
  bool in_copy_in() const { return state_ == State::kCopyIn; }
  // The backend produces COPY data for the client (CopyOutResponse seen, no
  // CopyDone yet).
  bool in_copy_out() const { return copy_out_; }
  // Set when the count may be wrong (e.g. the backend aborted a COPY while
  // the client's Syncs were in flight): never return such a connection to
  // the pool, close it.
  bool uncertain() const { return uncertain_; }

  // A new origin connection (or none): forget everything. The queue keeps
  // its storage (a unit per lend would allocate it again each time); an
  // idle session gives it back with ReleaseStorage.
  void Reset() {
    SmallFifo<Record> records = std::move(records_);
    records.clear();
    *this = CopyTracker();
    records_ = std::move(records);
  }
  void ReleaseStorage() { records_.release(); }

 private:
  // One counted request not yet answered, and what the client sent between
  // the previous counted request and it.
  struct Record {
    char tag = 0;              // 'Q', 'S' or 'F'
    bool clean_span = true;    // nothing but CopyData/Flush before it in its span
    bool clean_after_exec = true;  // ditto, after the span's last Execute
    std::size_t executes = 0;  // Execute messages in its span
    bool extended = false;     // a Parse, Bind, Describe, Execute or Close in its span
  };

  // The backend entered copy-in: decide which records were (or will be)
  // read by it inside COPY.
  BackendEffect ReconcileCopyStart();

  State state_ = State::kNormal;
  bool copy_out_ = false;
  bool uncertain_ = false;
  // An uncounted Sync/Flush/Query went out during the current copy-in.
  bool uncounted_in_copy_ = false;
  SmallFifo<Record> records_;
  // The span being built (messages since the last counted request).
  bool span_clean_ = true;
  bool span_clean_after_exec_ = true;
  std::size_t span_executes_ = 0;
  bool span_extended_ = false;
  bool skipping_to_sync_ = false;  // OnSkipToSync found no Sync sent
  // Execute results (CommandComplete, EmptyQueryResponse, PortalSuspended,
  // ErrorResponse) since the last ReadyForQuery: which Execute of the head
  // unit started a COPY.
  std::size_t results_in_unit_ = 0;
};

}  // namespace hyperpool::endpoint
