// The demo's blocking PostgreSQL client (see demo_pg_client.h).

#include "cli/demo_pg_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include "absl/status/status.h"
#include "protocol/auth/password.h"
#include "protocol/auth/scram.h"
#include "protocol/codec.h"

namespace hyperpool::cli::demo {
namespace {

using Clock = std::chrono::steady_clock;

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

std::string Errno(const char* what) { return fmt::format("{}: {}", what, std::strerror(errno)); }

// "SQLSTATE: message" of an ErrorResponse payload.
std::string DescribeError(std::string_view payload) {
  absl::StatusOr<protocol::BackendMessage> decoded =
      protocol::DecodeBackendMessage(protocol::Frame{'E', payload, {}});
  if (!decoded.ok() || !std::holds_alternative<protocol::ErrorResponse>(*decoded)) {
    return "malformed ErrorResponse";
  }
  const auto& error = std::get<protocol::ErrorResponse>(*decoded);
  return fmt::format("{}: {}", std::string(error.sqlstate()), std::string(error.message()));
}

// Non-blocking connect bounded by `deadline`; returns a close-on-exec socket.
absl::StatusOr<int> ConnectTcp(const std::string& host, uint16_t port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) return absl::UnavailableError(fmt::format("cannot resolve {}: {}", host, gai_strerror(rc)));
  std::string last_error = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last_error = Errno("socket");
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last_error = Errno("connect");
      close(fd);
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    int ready = poll(&p, 1, RemainingMs(deadline));
    int so_error = 0;
    socklen_t len = sizeof so_error;
    if (ready == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) == 0 && so_error == 0) {
      freeaddrinfo(found);
      return fd;
    }
    last_error = ready == 0 ? std::string("connect: timed out") : fmt::format("connect: {}", std::strerror(so_error));
    close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(fmt::format("cannot connect to {}:{}: {}", host, port, last_error));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PgClient>> PgClient::Connect(const PgLogin& login) {
  Clock::time_point deadline = Clock::now() + login.timeout;
  absl::StatusOr<int> fd = ConnectTcp(login.host, login.port, deadline);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<PgClient> client(new PgClient(*fd, login.timeout));
  absl::Status status = client->Login(login);
  if (!status.ok()) return status;
  return client;
}

PgClient::~PgClient() { Close(); }

void PgClient::Close() {
  if (fd_ < 0) return;
  std::string out;
  protocol::Encode(protocol::Terminate{}, out);
  (void)SendAll(out);
  close(fd_);
  fd_ = -1;
}

absl::Status PgClient::SendAll(std::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError("connection closed");
  Clock::time_point deadline = Clock::now() + timeout_;
  while (!bytes.empty()) {
    ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      if (poll(&p, 1, RemainingMs(deadline)) == 0) return absl::DeadlineExceededError("send timed out");
      continue;
    }
    return absl::UnavailableError(Errno("send"));
  }
  awaiting_reply_ = true;
  return absl::OkStatus();
}

absl::StatusOr<PgClient::RawFrame> PgClient::ReadFrame(Clock::time_point deadline) {
  if (consumed_ > 0) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  for (;;) {
    protocol::FrameReader::Result result = reader.Read(buffer_);
    if (result.is_error()) return result.status();
    if (result.is_frame()) {
      const protocol::Frame& frame = result.frame();
      consumed_ = frame.size();
      return RawFrame{frame.tag, frame.payload, frame.raw};
    }
    if (fd_ < 0) return absl::FailedPreconditionError("connection closed");
    pollfd p{fd_, POLLIN, 0};
    int ready = poll(&p, 1, RemainingMs(deadline));
    if (ready == 0) return absl::DeadlineExceededError("timed out waiting for the server");
    if (ready < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(Errno("poll"));
    }
    char chunk[16384];
    ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
    if (n == 0) return absl::UnavailableError("server closed the connection");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return absl::UnavailableError(Errno("recv"));
    }
    if (awaiting_reply_) {
      awaiting_reply_ = false;
      ++round_trips_;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

absl::Status PgClient::Login(const PgLogin& login) {
  Clock::time_point deadline = Clock::now() + login.timeout;
  std::string out;
  protocol::StartupMessage startup;
  startup.parameters = {{"user", login.user},
                        {"database", login.database},
                        {"application_name", "hyperpool-demo"},
                        {"client_encoding", "UTF8"}};
  protocol::Encode(startup, out);
  absl::Status sent = SendAll(out);
  if (!sent.ok()) return sent;

  std::optional<auth::ScramClient> scram;
  for (;;) {
    absl::StatusOr<RawFrame> frame = ReadFrame(deadline);
    if (!frame.ok()) return frame.status();
    switch (frame->tag) {
      case 'E':
        return absl::PermissionDeniedError(DescribeError(frame->payload));
      case 'Z':
        login_round_trips_ = round_trips_;
        return absl::OkStatus();
      case 'R': {
        absl::StatusOr<protocol::Authentication> auth = protocol::DecodeAuthentication(frame->payload);
        if (!auth.ok()) return auth.status();
        out.clear();
        if (std::holds_alternative<protocol::AuthenticationOk>(*auth)) {
          continue;
        } else if (std::holds_alternative<protocol::AuthenticationCleartextPassword>(*auth)) {
          auth_method_ = "cleartext";
          protocol::Encode(protocol::PasswordMessage{login.password}, out);
        } else if (const auto* md5 = std::get_if<protocol::AuthenticationMd5Password>(&*auth)) {
          auth_method_ = "MD5";
          absl::StatusOr<std::string> response = auth::Md5PasswordResponse(login.user, login.password, md5->salt);
          if (!response.ok()) return response.status();
          protocol::Encode(protocol::PasswordMessage{*response}, out);
        } else if (const auto* sasl = std::get_if<protocol::AuthenticationSasl>(&*auth)) {
          auth_method_ = "SCRAM-SHA-256";
          absl::StatusOr<auth::ScramMechanismChoice> choice =
              auth::ChooseScramMechanism(absl::MakeConstSpan(sasl->mechanisms), /*have_cert_hash=*/false);
          if (!choice.ok()) return choice.status();
          auth::ScramClient::Options options;
          options.password = login.password;
          options.binding = choice->binding;
          absl::StatusOr<auth::ScramClient> created = auth::ScramClient::Create(std::move(options));
          if (!created.ok()) return created.status();
          scram.emplace(*std::move(created));
          protocol::Encode(protocol::SaslInitialResponse{scram->mechanism(), scram->ClientFirstMessage()}, out);
        } else if (const auto* cont = std::get_if<protocol::AuthenticationSaslContinue>(&*auth)) {
          if (!scram) return absl::InvalidArgumentError("SASLContinue without SASL");
          absl::StatusOr<std::string> final_message = scram->HandleServerFirst(cont->data);
          if (!final_message.ok()) return final_message.status();
          protocol::Encode(protocol::SaslResponse{*final_message}, out);
        } else if (const auto* fin = std::get_if<protocol::AuthenticationSaslFinal>(&*auth)) {
          if (!scram) return absl::InvalidArgumentError("SASLFinal without SASL");
          absl::Status verified = scram->HandleServerFinal(fin->data);
          if (!verified.ok()) return verified;
          continue;
        } else {
          return absl::UnimplementedError("the server asked for an authentication method the demo does not speak");
        }
        sent = SendAll(out);
        if (!sent.ok()) return sent;
        break;
      }
      default:  // ParameterStatus, BackendKeyData, NoticeResponse, NegotiateProtocolVersion
        break;
    }
  }
}

absl::Status PgClient::ReadUntilReady(Clock::time_point deadline, PgResult& result, std::string& error) {
  for (;;) {
    absl::StatusOr<RawFrame> frame = ReadFrame(deadline);
    if (!frame.ok()) return frame.status();
    switch (frame->tag) {
      case 'D': {
        absl::StatusOr<protocol::BackendMessage> row =
            protocol::DecodeBackendMessage(protocol::Frame{'D', frame->payload, frame->raw});
        if (!row.ok()) return row.status();
        std::vector<std::optional<std::string>> values;
        for (protocol::NullableValue v : std::get<protocol::DataRow>(*row)) {
          values.push_back(v ? std::optional<std::string>(std::string(*v)) : std::nullopt);
        }
        result.rows.push_back(std::move(values));
        break;
      }
      case 'C': {
        absl::StatusOr<protocol::BackendMessage> done =
            protocol::DecodeBackendMessage(protocol::Frame{'C', frame->payload, frame->raw});
        if (!done.ok()) return done.status();
        result.command_tags.emplace_back(std::get<protocol::CommandComplete>(*done).tag);
        break;
      }
      case 'E':
        if (error.empty()) error = DescribeError(frame->payload);
        break;
      case 'Z':
        return absl::OkStatus();
      default:  // RowDescription, EmptyQueryResponse, Parse/BindComplete, notices, ParameterStatus
        break;
    }
  }
}

absl::StatusOr<PgResult> PgClient::Query(std::string_view sql) {
  std::string out;
  protocol::Encode(protocol::Query{sql}, out);
  absl::Status sent = SendAll(out);
  if (!sent.ok()) return sent;
  PgResult result;
  std::string error;
  absl::Status read = ReadUntilReady(Clock::now() + timeout_, result, error);
  if (!read.ok()) return read;
  if (!error.empty()) return absl::FailedPreconditionError(error);
  return result;
}

absl::StatusOr<PgResult> PgClient::PreparedQuery(std::string_view name, std::string_view sql,
                                                 const std::vector<std::string>& parameters) {
  Clock::time_point deadline = Clock::now() + timeout_;
  std::string out;
  protocol::Parse parse;
  parse.statement = name;
  parse.query = sql;
  parse.parameter_types.assign(parameters.size(), 0);
  protocol::Encode(parse, out);
  protocol::Encode(protocol::Describe{protocol::ObjectKind::kStatement, name}, out);
  std::string execute;
  protocol::Bind bind;
  bind.statement = name;
  for (const std::string& p : parameters) bind.parameters.push_back(protocol::NullableValue(p));
  protocol::Encode(bind, execute);
  protocol::Encode(protocol::Execute{}, execute);
  protocol::Encode(protocol::Sync{}, execute);
  PgResult result;
  std::string error;
  if (!parameters.empty()) {
    // postgres.js learns the parameter types before it binds (describeFirst).
    protocol::Encode(protocol::Flush{}, out);
    absl::Status sent = SendAll(out);
    if (!sent.ok()) return sent;
    bool described = false;
    while (!described) {
      absl::StatusOr<RawFrame> frame = ReadFrame(deadline);
      if (!frame.ok()) return frame.status();
      switch (frame->tag) {
        case 'T':  // RowDescription or NoData ends a statement's Describe
        case 'n':
          described = true;
          break;
        case 'E': {
          // As postgres.js: Sync, then skip to its ReadyForQuery.
          error = DescribeError(frame->payload);
          std::string sync;
          protocol::Encode(protocol::Sync{}, sync);
          sent = SendAll(sync);
          if (!sent.ok()) return sent;
          absl::Status read = ReadUntilReady(deadline, result, error);
          if (!read.ok()) return read;
          return absl::FailedPreconditionError(error);
        }
        case 'Z':
          return absl::InternalError("ReadyForQuery before the statement was described");
        default:  // ParseComplete, ParameterDescription, notices
          break;
      }
    }
    out.clear();
  }
  out += execute;
  absl::Status sent = SendAll(out);
  if (!sent.ok()) return sent;
  absl::Status read = ReadUntilReady(deadline, result, error);
  if (!read.ok()) return read;
  if (!error.empty()) return absl::FailedPreconditionError(error);
  return result;
}

}  // namespace hyperpool::cli::demo
