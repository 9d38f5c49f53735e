// OriginConnection: one origin connection's frames, idle watch and close
// (connecting and logging in: origin_login.cc).
#include "endpoint/origin_connection.h"

#include "endpoint/origin_stream.h"

namespace hyperpool::endpoint {

using namespace origin_detail;  // NOLINT(build/namespaces): this file's helpers


// ---------------------------------------------------------------------------
// OriginConnection
// ---------------------------------------------------------------------------

OriginConnection::OriginConnection(std::unique_ptr<Stream> stream, std::uint32_t max_message_length)
    : stream_(std::move(stream)),
      reader_(protocol::FrameReader::Mode::kTagged, protocol::FrameLimits{max_message_length}),
      last_ready_(std::chrono::steady_clock::now()) {}

OriginConnection::~OriginConnection() {
  if (stream_) stream_->Close();
}

bool OriginConnection::HasBufferedFrame() const {
  std::string_view pending(buffer_.data() + consumed_, end_ - consumed_);
  return reader_.Read(pending).is_frame();
}

protocol::FrameReader::Result OriginConnection::NextBuffered() {
  protocol::FrameReader::Result r = reader_.Read(std::string_view(buffer_.data() + consumed_, end_ - consumed_));
  if (r.is_frame()) {
    consumed_ += r.frame().size();
    OnFrame(r.frame());
  } else if (r.is_error()) {
    broken_ = true;
  }
  return r;
}

absl::Status OriginConnection::ViolationError(const protocol::FrameReader::Result& r) {
  return absl::InvalidArgumentError(
      fmt::format("protocol violation by the origin: {}", std::string(r.status().message())));
}

absl::StatusOr<std::optional<protocol::Frame>> OriginConnection::TakeBufferedFrame() {
  if (broken_) return absl::UnavailableError("the origin connection is closed");
  protocol::FrameReader::Result r = NextBuffered();
  if (r.is_frame()) return std::optional<protocol::Frame>(r.frame());
  if (r.is_error()) return ViolationError(r);
  return std::optional<protocol::Frame>();
}

std::size_t OriginConnection::PrepareRead(std::size_t bytes_needed) {
  // Keep only the partial frame, then read after it.
  if (consumed_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + consumed_, end_ - consumed_);
    end_ -= consumed_;
    consumed_ = 0;
    if (end_ == 0 && buffer_.size() > kKeepBufferCapacity) {
      std::string().swap(buffer_);
    }
  }
  const std::size_t have = end_;
  const std::size_t missing = bytes_needed > have ? bytes_needed - have : 0;
  const std::size_t want = std::clamp(missing, kReadChunk, std::max(kReadChunk, kMaxReadStep));
  // buffer_ keeps its size between reads (end_ marks the data): resizing
  // it to the data and back zero-filled 16 KiB per read (issue 11).
  if (buffer_.size() < have + want) buffer_.resize(have + want);
  return want;
}

bool OriginConnection::SupportsTryFill() const { return stream_ && stream_->tls() == nullptr; }

std::optional<absl::StatusOr<bool>> OriginConnection::TryFill(bool* full) {
  *full = false;
  if (broken_ || !stream_) return absl::StatusOr<bool>(absl::UnavailableError("the origin connection is closed"));
  if (stream_->tls() != nullptr) return std::nullopt;
  const protocol::FrameReader::Result r = reader_.Read(std::string_view(buffer_.data() + consumed_, end_ - consumed_));
  const std::size_t want = PrepareRead(r.is_need_more() ? r.bytes_needed() : 0);
  const std::size_t have = end_;
  std::optional<absl::StatusOr<std::size_t>> n = stream_->TryReadSome(asio::buffer(buffer_.data() + have, want));
  if (!n->ok()) {
    broken_ = true;
    return absl::StatusOr<bool>(n->status());
  }
  end_ = have + **n;
  *full = **n == want;
  return absl::StatusOr<bool>(**n > 0);
}

void OriginConnection::WaitReadable(absl::AnyInvocable<void(std::error_code)> ready) {
  stream_->AsyncWaitReadable(std::move(ready));
}

void OriginConnection::CancelWaitReadable() {
  if (stream_) stream_->CancelWait();
}

asio::awaitable<absl::StatusOr<protocol::Frame>> OriginConnection::ReadFrame() {
  if (broken_) co_return absl::UnavailableError("the origin connection is closed");
  for (;;) {
    protocol::FrameReader::Result r = NextBuffered();
    if (r.is_frame()) co_return r.frame();
    if (r.is_error()) co_return ViolationError(r);
    const std::size_t want = PrepareRead(r.bytes_needed());
    const std::size_t have = end_;
    auto n = co_await stream_->ReadSome(asio::buffer(buffer_.data() + have, want));
    if (n.ok()) end_ = have + *n;
    if (!n.ok()) {
      broken_ = true;
      co_return n.status();
    }
  }
}

void OriginConnection::OnFrame(const protocol::Frame& frame) {
  switch (frame.tag) {
    case 'Z':
      if (!frame.payload.empty()) transaction_status_ = frame.payload[0];
      last_ready_ = std::chrono::steady_clock::now();
      break;
    case 'S': {
      auto ps = protocol::DecodeParameterStatus(frame.payload);
      if (ps.ok()) SetParameter(ps->name, ps->value);
      break;
    }
    case 'K': {
      auto key = protocol::DecodeBackendKeyData(frame.payload);
      if (key.ok()) backend_key_ = BackendKey{key->process_id, std::string(key->secret_key)};
      break;
    }
    case 'C':
      // Every prepared statement on the backend is gone, whoever ran it
      // (a client, a reset, the settings replay): forget ours too.
      if (frame.payload == std::string_view("DISCARD ALL\0", 12) ||
          frame.payload == std::string_view("DEALLOCATE ALL\0", 15)) {
        statements_.Clear();
        statements_.unnamed_id = 0;
      }
      break;
    default:
      break;
  }
}

void OriginConnection::SetParameter(std::string_view name, std::string_view value) {
  ++parameter_changes_;
  for (auto& [n, v] : parameters_) {
    if (n == name) {
      v.assign(value.data(), value.size());
      return;
    }
  }
  parameters_.emplace_back(std::string(name), std::string(value));
}

void OriginConnection::WatchIdle(std::function<void()> on_activity) {
  if (!stream_) return;
  if (broken_ || end_ > consumed_) {
    // Broken, or bytes arrived after the last ReadyForQuery: an idle backend
    // has nothing to say but goodbye.
    asio::post(stream_->executor(), std::move(on_activity));
    return;
  }
  watching_idle_ = true;
  // The handler must not touch `this`: the pool may destroy the connection
  // (closing the socket) before an aborted wait completes.
  stream_->AsyncWaitReadable([cb = std::move(on_activity)](std::error_code ec) {
    if (ec != asio::error::operation_aborted) cb();
  });
}

bool OriginConnection::IdleActivity() {
  if (!stream_ || broken_ || end_ > consumed_) return true;
  return stream_->ReadableNow();
}

void OriginConnection::StopWatchingIdle() {
  if (!watching_idle_) return;
  watching_idle_ = false;
  if (stream_) stream_->CancelWait();
}

asio::awaitable<absl::Status> OriginConnection::Write(std::string_view bytes) {
  if (broken_) co_return absl::UnavailableError("the origin connection is closed");
  absl::Status status = co_await stream_->WriteAll(asio::buffer(bytes.data(), bytes.size()));
  if (!status.ok()) broken_ = true;
  co_return status;
}

std::size_t OriginConnection::TryWrite(std::string_view bytes) {
  if (broken_ || !stream_ || bytes.empty()) return 0;
  bool failed = false;
  const std::size_t n = stream_->TryWrite(asio::buffer(bytes.data(), bytes.size()), &failed);
  if (failed) broken_ = true;
  return n;
}

asio::awaitable<absl::Status> OriginConnection::Ping() {
  std::string query;
  protocol::Encode(protocol::Query{""}, query);
  if (absl::Status s = co_await Write(query); !s.ok()) co_return s;
  std::optional<absl::Status> error;
  for (;;) {
    auto frame = co_await ReadFrame();
    if (!frame.ok()) co_return absl::UnavailableError(frame.status().message());
    switch (frame->tag) {
      case 'E': {
        auto e = protocol::DecodeErrorResponse(frame->payload);
        std::string text = e.ok() ? fmt::format("{} (SQLSTATE {})", OneLine(e->message()),
                                                e->sqlstate().empty() ? "none" : e->sqlstate())
                                  : "malformed ErrorResponse";
        if (!error) error = absl::FailedPreconditionError(text);
        break;
      }
      case 'Z':
        if (error) co_return *error;
        if (transaction_status_ != 'I') {
          co_return absl::FailedPreconditionError(
              fmt::format("the origin connection is not idle (status '{}')", transaction_status_));
        }
        co_return absl::OkStatus();
      case 'I':  // EmptyQueryResponse
      case 'N':  // NoticeResponse
      case 'S':  // ParameterStatus
        break;
      default:
        broken_ = true;
        co_return absl::UnavailableError(
            fmt::format("unexpected message '{}' in answer to an empty query", frame->tag));
    }
  }
}

void OriginConnection::CloseNow() {
  broken_ = true;
  if (stream_) stream_->Close();
}

asio::awaitable<void> OriginConnection::Close() {
  if (!broken_) {
    // A stuck origin (full socket buffer) must not hold up the pool: give
    // the Terminate one second, then close regardless.
    auto done = std::make_shared<bool>(false);
    asio::steady_timer guard(co_await asio::this_coro::executor);
    guard.expires_after(std::chrono::seconds(1));
    guard.async_wait([this, done](const std::error_code& ec) {
      if (!ec && !*done) CloseNow();
    });
    static constexpr char kTerminate[] = {'X', 0, 0, 0, 4};
    (void)co_await Write(std::string_view(kTerminate, sizeof(kTerminate)));
    *done = true;
  }
  const bool was_broken = broken_;
  CloseNow();
  if (logger_ && logger_->log_disconnections()) {
    logger_->Log(LogLevel::kInfo, "origin_close",
                 {{"backend_pid", std::to_string(backend_key_.process_id)}, {"broken", was_broken ? "true" : "false"}});
  }
}

bool OriginConnection::is_tls() const { return stream_ && stream_->tls() != nullptr; }

std::string OriginConnection::tls_version() const {
  return is_tls() ? stream_->tls()->protocol_version() : std::string();
}

}  // namespace hyperpool::endpoint
