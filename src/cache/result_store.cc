#include "cache/result_store.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "protocol/backend_messages.h"
#include "protocol/frame_reader.h"

namespace hyperpool::cache {
namespace {

constexpr std::string_view kParseComplete("1\0\0\0\4", 5);
constexpr std::string_view kBindComplete("2\0\0\0\4", 5);
constexpr std::string_view kNoData("n\0\0\0\4", 5);
constexpr std::string_view kReadyIdle("Z\0\0\0\5I", 6);
constexpr std::string_view kPortalSuspended("s\0\0\0\4", 5);

// The whole frame at the start of `s` if its tag is `tag`, else empty.
std::string_view FrameIf(std::string_view s, char tag) {
  std::optional<protocol::Frame> f = protocol::PeekTaggedFrame(s);
  return f && f->tag == tag ? f->raw : std::string_view();
}

}  // namespace

std::string_view RejectName(ResultCapture::Reject r) {
  using R = ResultCapture::Reject;
  switch (r) {
    case R::kNone: return "none";
    case R::kError: return "error";
    case R::kNotice: return "notice";
    case R::kParameterStatus: return "parameterstatus";
    case R::kOversized: return "oversizedresult";
    case R::kSuspended: return "suspended";
    case R::kEmptyQuery: return "emptyquery";
    case R::kMultipleResults: return "multipleresults";
    case R::kUnexpected: return "unexpected";
    case R::kNotIdle: return "notidle";
  }
  return "unknown";
}

ResultCapture::State ResultCapture::Fail(Reject r) {
  state_ = State::kRejected;
  reject_ = r;
  std::string().swap(messages_);  // Stop holding memory for a result we drop.
  return state_;
}

ResultCapture::State ResultCapture::Feed(char tag, std::string_view raw) {
  if (state_ != State::kCapturing) return state_;
  bool store = false;
  switch (tag) {
    case '1':  // ParseComplete
    case '2':  // BindComplete
    case '3':  // CloseComplete
    case 'n':  // NoData
    case 'A':  // NotificationResponse: asynchronous, not part of the result.
      if (have_complete_ && tag != 'A') return Fail(Reject::kUnexpected);
      return state_;
    case 't':
      if (have_param_desc_ || have_row_desc_ || have_rows_ || have_complete_) {
        return Fail(Reject::kUnexpected);
      }
      have_param_desc_ = true;
      store = true;
      break;
    case 'T':
      if (have_row_desc_ || have_rows_ || have_complete_) return Fail(Reject::kMultipleResults);
      have_row_desc_ = true;
      store = true;
      break;
    case 'D':
      if (have_complete_) return Fail(Reject::kMultipleResults);
      have_rows_ = true;
      store = true;
      break;
    case 'C':
      if (have_complete_) return Fail(Reject::kMultipleResults);
      have_complete_ = true;
      store = true;
      break;
    case 'Z':
      if (!have_complete_) return Fail(Reject::kUnexpected);
      if (raw.size() != 6 || raw[5] != 'I') return Fail(Reject::kNotIdle);
      state_ = State::kComplete;
      return state_;
    case 'E': return Fail(Reject::kError);
    case 'N': return Fail(Reject::kNotice);
    case 'S': return Fail(Reject::kParameterStatus);
    case 's': return Fail(Reject::kSuspended);
    case 'I': return Fail(Reject::kEmptyQuery);
    default: return Fail(Reject::kUnexpected);
  }
  if (store) {
    if (messages_.size() + raw.size() > max_bytes_) return Fail(Reject::kOversized);
    // Room for a short row and the CommandComplete after the first frame:
    // a one-row result is one allocation instead of three.
    if (messages_.empty()) messages_.reserve(std::min(max_bytes_, raw.size() + 64));
    messages_.append(raw);
  }
  return state_;
}

absl::StatusOr<StoredResultView> SplitStored(std::string_view stored) {
  StoredResultView v;
  v.parameter_description = FrameIf(stored, 't');
  stored.remove_prefix(v.parameter_description.size());
  v.row_description = FrameIf(stored, 'T');
  stored.remove_prefix(v.row_description.size());
  if (stored.size() < 5 || (stored[0] != 'D' && stored[0] != 'C')) {
    return absl::InvalidArgumentError("not a stored result");
  }
  v.rows_and_complete = stored;
  return v;
}

namespace {
// 'D'... 'C' as a limited Execute of `max_rows` (0: none) answers it.
bool AppendRows(std::string_view rows_and_complete, int32_t max_rows, std::string& out) {
  if (max_rows <= 0) {
    out.append(rows_and_complete);
    return true;
  }
  std::string_view rest = rows_and_complete;
  int64_t rows = 0;
  while (rest.size() >= 5 && rest[0] == 'D') {
    std::optional<protocol::Frame> row = protocol::PeekTaggedFrame(rest);
    if (!row) return false;
    if (rows == max_rows) break;
    rest.remove_prefix(row->size());
    ++rows;
  }
  if (rows < max_rows) {
    out.append(rows_and_complete);  // complete within the limit
    return true;
  }
  out.append(rows_and_complete.substr(0, rows_and_complete.size() - rest.size()));
  out.append(kPortalSuspended);
  return true;
}
}  // namespace

absl::Status AppendReplay(std::string_view stored, const ReplayRequest& req, std::string& out) {
  absl::StatusOr<StoredResultView> v = SplitStored(stored);
  if (!v.ok()) return v.status();
  size_t start = out.size();
  auto fail = [&](std::string_view why) {
    out.resize(start);
    return absl::FailedPreconditionError(std::string(why));
  };
  if (req.form == ProtocolForm::kSimple) {
    if (v->row_description.empty()) return fail("stored result has no RowDescription");
    out.reserve(out.size() + v->row_description.size() + v->rows_and_complete.size() + 6);
    out.append(v->row_description);
    out.append(v->rows_and_complete);
    out.append(kReadyIdle);
    return absl::OkStatus();
  }
  if (req.parse) out.append(kParseComplete);
  if (req.describe == ReplayRequest::Describe::kStatement) {
    // A Parse/Describe S ... without Bind answers before BindComplete.
    if (v->parameter_description.empty()) return fail("stored result has no ParameterDescription");
    out.append(v->parameter_description);
    if (v->row_description.empty()) {
      out.append(kNoData);
    } else if (!protocol::AppendWithTextFormats(v->row_description, out)) {
      return fail("malformed stored RowDescription");
    }
  }
  if (req.bind) out.append(kBindComplete);
  if (req.describe == ReplayRequest::Describe::kPortal) {
    if (v->row_description.empty()) return fail("stored result has no RowDescription");
    out.append(v->row_description);
  }
  if (req.execute && !AppendRows(v->rows_and_complete, req.max_rows, out)) return fail("malformed stored rows");
  if (req.sync) out.append(kReadyIdle);
  return absl::OkStatus();
}

}  // namespace hyperpool::cache
