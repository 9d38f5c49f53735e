// Capturing one statement's result from the backend message stream, and
// replaying it to a client (PostgreSQL docs, "Message Flow" > "Simple Query"
// and "Extended Query").
//
// The stored form is the backend frames themselves, copied as received:
//   [ParameterDescription 't'] [RowDescription 'T'] DataRow 'D'... CommandComplete 'C'
// so a hit appends bytes (one memcpy for all the rows) and never re-encodes.
// The protocol-flow messages (ParseComplete, BindComplete, NoData,
// ReadyForQuery) are not stored: replay synthesises the ones the client's
// own messages call for.
#ifndef HYPERPOOL_CACHE_RESULT_STORE_H_
#define HYPERPOOL_CACHE_RESULT_STORE_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache/cache_key.h"

namespace hyperpool::cache {

// Feeds one request's backend frames; stops copying at the first reason not
// to store.
class ResultCapture {
 public:
  enum class State {
    kCapturing,  // Feed more.
    kComplete,   // ReadyForQuery('I') after one CommandComplete: TakeMessages().
    kRejected,   // Do not store (see reject_reason()); later frames are ignored.
  };
  enum class Reject {
    kNone,
    kError,             // ErrorResponse.
    kNotice,            // NoticeResponse (conservative: warnings may depend on state).
    kParameterStatus,   // A setting changed while running.
    kOversized,         // Over max_bytes: Hyperdrive's "oversizedresult".
    kSuspended,         // PortalSuspended: Execute with a row limit, partial result.
    kEmptyQuery,        // EmptyQueryResponse.
    kMultipleResults,   // A second CommandComplete / RowDescription.
    kUnexpected,        // COPY, FunctionCallResponse, out-of-order messages.
    kNotIdle,           // ReadyForQuery 'T' or 'E'.
  };

  explicit ResultCapture(size_t max_bytes) : max_bytes_(max_bytes) {}

  // `tag` and `raw` are Frame::tag and Frame::raw of a backend frame.
  State Feed(char tag, std::string_view raw);
  State state() const { return state_; }
  Reject reject_reason() const { return reject_; }
  // kComplete: the stored form (moves it out).
  std::string TakeMessages() { return std::move(messages_); }

 private:
  State Fail(Reject r);

  size_t max_bytes_;
  State state_ = State::kCapturing;
  Reject reject_ = Reject::kNone;
  bool have_param_desc_ = false;
  bool have_row_desc_ = false;
  bool have_rows_ = false;
  bool have_complete_ = false;
  std::string messages_;
};
std::string_view RejectName(ResultCapture::Reject r);

// Which messages the client sent for the statement being answered from the
// cache.
struct ReplayRequest {
  enum class Describe { kNone, kPortal, kStatement };
  ProtocolForm form = ProtocolForm::kSimple;
  // Extended only:
  bool parse = false;  // A Parse was sent: ParseComplete first.
  bool bind = true;    // A Bind was sent: BindComplete.
  // Describe sent before Execute. kStatement answers ParameterDescription +
  // RowDescription (format codes zeroed, as a statement Describe reports).
  Describe describe = Describe::kNone;
  bool execute = true;  // Execute sent: DataRows + CommandComplete.
  bool sync = true;     // Sync sent: ReadyForQuery('I'). Simple Query always ends with it.
  // The Execute's row limit (0: none). A stored result of at least this many
  // rows is answered as PostgreSQL answers a limited Execute: the first
  // max_rows DataRows, then PortalSuspended instead of CommandComplete
  // (PostgreSQL suspends when the limit is reached, even by the last row).
  int32_t max_rows = 0;
};

// The parts of a stored form, as views into it.
struct StoredResultView {
  std::string_view parameter_description;  // Whole 't' frame, or empty.
  std::string_view row_description;        // Whole 'T' frame, or empty.
  std::string_view rows_and_complete;      // 'D'... 'C'.
};
// Splits a stored form; InvalidArgument if it is not one.
absl::StatusOr<StoredResultView> SplitStored(std::string_view stored);

// Appends what the client needs to `out`. FailedPrecondition if the stored
// form lacks what the request needs (a RowDescription for a Describe or a
// simple Query, a ParameterDescription for Describe statement): treat as a
// miss.
absl::Status AppendReplay(std::string_view stored, const ReplayRequest& request, std::string& out);

}  // namespace hyperpool::cache

#endif  // HYPERPOOL_CACHE_RESULT_STORE_H_
