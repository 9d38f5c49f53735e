// CopyTracker: which frontend messages a ReadyForQuery answers once COPY is
// involved. Each case is a message sequence a driver really sends (or a
// misbehaving one), with the ReadyForQuery count PostgreSQL 15 produces for
// it (copyfromparse.c ignores Sync/Flush in copy-in and turns any other
// message into an 08P01 error without executing it).
#include "endpoint/copy_tracker.h"

#include <string>

#include <catch2/catch_test_macros.hpp>

namespace hyperpool::endpoint {
namespace {

// Feeds frontend tags; returns how many were counted.
int Send(CopyTracker& t, const std::string& tags) {
  int counted = 0;
  for (char tag : tags) counted += t.OnFrontend(tag) ? 1 : 0;
  return counted;
}

// Feeds backend tags; returns the requests given up on.
int Receive(CopyTracker& t, const std::string& tags, bool* reopened = nullptr) {
  int dropped = 0;
  for (char tag : tags) {
    CopyTracker::BackendEffect e = t.OnBackend(tag);
    dropped += static_cast<int>(e.unanswered);
    if (reopened != nullptr && e.unit_reopened) *reopened = true;
  }
  return dropped;
}

TEST_CASE("outside COPY every Query, Sync and FunctionCall is answered") {
  CopyTracker t;
  CHECK(Send(t, "QPBDESFH") == 3);
  CHECK(Receive(t, "TDCZ12TDCZVZ") == 0);
  CHECK_FALSE(t.in_copy_in());
  CHECK_FALSE(t.uncertain());
}

TEST_CASE("simple COPY FROM STDIN: the Query is answered after CopyDone; data is not counted") {
  CopyTracker t;
  CHECK(Send(t, "Q") == 1);
  CHECK(Receive(t, "G") == 0);
  CHECK(t.in_copy_in());
  CHECK(Send(t, "ddd") == 0);
  CHECK(t.in_copy_in());
  CHECK(Send(t, "c") == 0);
  CHECK_FALSE(t.in_copy_in());
  CHECK(Receive(t, "CZ") == 0);
  CHECK_FALSE(t.uncertain());
}

TEST_CASE("libpq's extended COPY: the Sync sent with Execute is ignored, the one after CopyDone answers") {
  CopyTracker t;
  CHECK(Send(t, "PBDES") == 1);  // PQexecParams("COPY t FROM STDIN") sends all at once
  bool reopened = false;
  CHECK(Receive(t, "12nG", &reopened) == 1);
  CHECK(reopened);
  CHECK(t.in_copy_in());
  CHECK(Send(t, "dd") == 0);
  CHECK(Send(t, "cS") == 1);  // PQputCopyEnd: CopyDone + Sync
  CHECK(Receive(t, "CZ") == 0);
  CHECK_FALSE(t.in_copy_in());
  CHECK_FALSE(t.uncertain());
}

TEST_CASE("extended COPY with CopyDone pipelined before the Sync: that Sync is answered") {
  CopyTracker t;
  CHECK(Send(t, "PBEddcS") == 1);
  CHECK(Receive(t, "12G") == 0);
  CHECK_FALSE(t.in_copy_in());
  CHECK(Receive(t, "CZ") == 0);
}

TEST_CASE("a Sync or Flush in the middle of COPY FROM is ignored by the backend") {
  CopyTracker t;
  CHECK(Send(t, "Q") == 1);
  Receive(t, "G");
  CHECK(Send(t, "dSHd") == 0);
  CHECK(t.in_copy_in());
  CHECK(Send(t, "c") == 0);
  CHECK(Receive(t, "CZ") == 0);
  CHECK_FALSE(t.uncertain());
}

TEST_CASE("a Query in the middle of COPY FROM aborts it and gets no ReadyForQuery of its own") {
  CopyTracker t;
  CHECK(Send(t, "Q") == 1);
  Receive(t, "G");
  CHECK(Send(t, "dQ") == 0);
  CHECK_FALSE(t.in_copy_in());
  CHECK(Receive(t, "EZ") == 0);  // 08P01, then the COPY Query's ReadyForQuery
  CHECK(Send(t, "Q") == 1);      // from here on, normal
}

TEST_CASE("Syncs and a Query pipelined before CopyInResponse are reconciled when it arrives") {
  CopyTracker t;
  CHECK(Send(t, "QSSQ") == 4);
  CHECK(Receive(t, "G") == 3);  // two Syncs ignored, the Query consumed as the error trigger
  CHECK_FALSE(t.in_copy_in());
  CHECK(Receive(t, "EZ") == 0);
}

TEST_CASE("the COPY in the first of two Executes: the second aborts it and the Sync is answered") {
  CopyTracker t;
  CHECK(Send(t, "PBEPBES") == 1);
  CHECK(Receive(t, "12G") == 0);
  CHECK_FALSE(t.in_copy_in());
}

TEST_CASE("the backend aborting COPY while an uncounted Sync was in flight makes the count uncertain") {
  CopyTracker t;
  Send(t, "Q");
  Receive(t, "G");
  Send(t, "dS");
  Receive(t, "EZ");
  CHECK(t.uncertain());
}

TEST_CASE("COPY TO STDOUT is tracked until the backend's CopyDone") {
  CopyTracker t;
  CHECK(Send(t, "Q") == 1);
  Receive(t, "H");
  CHECK(t.in_copy_out());
  Receive(t, "ddc");
  CHECK_FALSE(t.in_copy_out());
  CHECK(Receive(t, "CZ") == 0);
  CHECK_FALSE(t.uncertain());
}

TEST_CASE("Reset forgets a COPY in progress") {
  CopyTracker t;
  Send(t, "Q");
  Receive(t, "G");
  t.Reset();
  CHECK_FALSE(t.in_copy_in());
  CHECK(Send(t, "S") == 1);
}

TEST_CASE("after an extended-query error the Queries up to the next Sync get no ReadyForQuery") {
  // Parse (fails), Query, FunctionCall, Sync, Query: the first two skipped.
  CopyTracker t;
  CHECK(Send(t, "PQFSQ") == 4);
  CopyTracker::BackendEffect e = t.OnSkipToSync();
  CHECK(e.unanswered == 2);
  CHECK_FALSE(t.skipping_to_sync());
  CHECK(Receive(t, "ZTDCZ") == 0);

  // A Query's own error (nothing extended before it) skips nothing.
  CopyTracker own;
  CHECK(Send(own, "QPBES") == 2);
  CHECK(own.OnSkipToSync().unanswered == 0);
  CHECK_FALSE(own.skipping_to_sync());

  // Ending at the head's own Sync: nothing to skip.
  CopyTracker synced;
  CHECK(Send(synced, "PBESQ") == 2);
  CHECK(synced.OnSkipToSync().unanswered == 0);

  // No Sync sent yet: skipping until one is, which is counted again.
  CopyTracker open;
  CHECK(Send(open, "PBEQ") == 1);
  CHECK(open.OnSkipToSync().unanswered == 1);
  CHECK(open.skipping_to_sync());
  CHECK(Send(open, "S") == 1);
  CHECK_FALSE(open.skipping_to_sync());
  CHECK(Receive(open, "Z") == 0);

  // An extended message in flight and nothing counted: skipping.
  CopyTracker bare;
  CHECK(Send(bare, "PH") == 0);
  CHECK(bare.OnSkipToSync().unanswered == 0);
  CHECK(bare.skipping_to_sync());
}

}  // namespace
}  // namespace hyperpool::endpoint
