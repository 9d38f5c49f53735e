#include "endpoint/copy_tracker.h"

namespace hyperpool::endpoint {

bool CopyTracker::OnFrontend(char tag) {
  if (state_ == State::kCopyIn) {
    switch (tag) {
      case 'd':  // CopyData
        return false;
      case 'c':  // CopyDone
      case 'f':  // CopyFail
        state_ = State::kNormal;
        return false;
      case 'S':  // Sync and Flush are ignored in copy-in ("for the convenience of client libraries")
      case 'H':
        uncounted_in_copy_ = true;
        return false;
      default:
        // Anything else ends the COPY with an error ("unexpected message type
        // ... during COPY from stdin"); the message itself is consumed, never
        // executed, so a Query or FunctionCall gets no ReadyForQuery of its own.
        if (tag == 'Q' || tag == 'F') uncounted_in_copy_ = true;
        state_ = State::kNormal;
        return false;
    }
  }
  if (tag == 'S') skipping_to_sync_ = false;  // the origin resumes with this Sync
  switch (tag) {
    case 'Q':
    case 'F':
    case 'S':
      records_.push_back(Record{tag, span_clean_, span_clean_after_exec_, span_executes_, span_extended_});
      span_clean_ = span_clean_after_exec_ = true;
      span_executes_ = 0;
      span_extended_ = false;
      return true;
    case 'E':  // Execute: a COPY may start here
      ++span_executes_;
      span_clean_ = false;
      span_clean_after_exec_ = true;
      span_extended_ = true;
      return false;
    case 'P':
    case 'B':
    case 'D':
    case 'C':
      span_clean_ = span_clean_after_exec_ = false;
      span_extended_ = true;
      return false;
    case 'd':  // CopyData (outside COPY the backend ignores it) and Flush keep a span clean
    case 'H':
      return false;
    default:  // CopyDone/CopyFail would end a COPY; Parse, Bind... would abort it
      span_clean_ = span_clean_after_exec_ = false;
      return false;
  }
}

CopyTracker::BackendEffect CopyTracker::OnBackend(char tag) {
  switch (tag) {
    case 'G':  // CopyInResponse
    case 'W':  // CopyBothResponse (replication): the client sends data too
      return ReconcileCopyStart();
    case 'H':  // CopyOutResponse
      copy_out_ = true;
      break;
    case 'c':  // CopyDone from the backend: the COPY TO data is complete
      copy_out_ = false;
      break;
    case 'C':  // CommandComplete, EmptyQueryResponse, PortalSuspended: one Execute's result
    case 'I':
    case 's':
      ++results_in_unit_;
      break;
    case 'E':
      ++results_in_unit_;
      copy_out_ = false;
      if (state_ == State::kCopyIn) {
        // The backend aborted the COPY by itself (bad data, a constraint):
        // it processes what follows normally. A Sync we did not count may
        // have reached it before or after this: the count is a guess now.
        state_ = State::kNormal;
        if (uncounted_in_copy_) uncertain_ = true;
      }
      break;
    case 'Z':
      if (!records_.empty()) records_.pop_front();
      results_in_unit_ = 0;
      copy_out_ = false;
      if (state_ == State::kCopyIn) {
        // Not possible per protocol before the COPY ended.
        state_ = State::kNormal;
        uncertain_ = true;
      }
      break;
    default:
      break;
  }
  return {};
}

CopyTracker::BackendEffect CopyTracker::OnSkipToSync() {
  BackendEffect effect;
  if (records_.empty() ? !span_extended_ : (records_.front().tag == 'S' || !records_.front().extended)) {
    return effect;  // the skip ends at the head's own Sync, or nothing extended could have failed
  }
  while (!records_.empty() && records_.front().tag != 'S') {
    records_.pop_front();
    ++effect.unanswered;
  }
  if (effect.unanswered > 0) results_in_unit_ = 0;  // the next answer is the Sync's unit's
  if (records_.empty()) skipping_to_sync_ = true;
  return effect;
}

CopyTracker::BackendEffect CopyTracker::ReconcileCopyStart() {
  uncounted_in_copy_ = false;
  BackendEffect effect;
  if (records_.empty()) {
    // A CopyInResponse nobody asked for: a broken origin.
    uncertain_ = true;
    state_ = State::kCopyIn;
    return effect;
  }
  std::size_t& dropped = effect.unanswered;
  bool copy_on = true;
  auto it = records_.begin();
  if (it->tag == 'S') {
    // Extended protocol: the COPY is the Execute whose result this is. Only
    // if it is the unit's last Execute and nothing but CopyData followed it
    // does the unit's Sync reach the backend inside COPY (and is ignored).
    const Record& head = *it;
    if (head.executes == 0) uncertain_ = true;
    const bool last_execute = results_in_unit_ + 1 >= head.executes;
    if (last_execute && head.clean_after_exec) {
      it = records_.erase(it);
      ++dropped;
      effect.unit_reopened = true;
    } else {
      copy_on = false;
      ++it;
    }
  } else {
    ++it;  // a Query (or FunctionCall): answered once the COPY ends
  }
  // Requests the client pipelined after the COPY statement.
  while (copy_on && it != records_.end()) {
    if (!it->clean_span) {
      copy_on = false;  // CopyDone/CopyFail or an aborting message came first
      break;
    }
    uncounted_in_copy_ = true;
    ++dropped;
    const bool sync = it->tag == 'S';
    it = records_.erase(it);
    if (!sync) copy_on = false;  // a Query inside COPY: consumed as the error trigger
  }
  if (copy_on && !span_clean_) copy_on = false;  // ended by what was sent since
  state_ = copy_on ? State::kCopyIn : State::kNormal;
  return effect;
}

}  // namespace hyperpool::endpoint
