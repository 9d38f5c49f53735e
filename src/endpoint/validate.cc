// ValidateOrigin: the seed's "Edge Validator". Connects and logs in exactly
// like the Endpoint's pool does (ConnectOrigin), then runs an empty query.
#include "hyperpool/validate.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "endpoint/origin_config.h"
#include "endpoint/origin_connection.h"
#include "endpoint/origin_password.h"
#include "protocol/backend_messages.h"
#include "protocol/codec.h"

namespace hyperpool {
namespace {

std::string ServerVersion(const endpoint::OriginConnection& conn) {
  for (const auto& [name, value] : conn.parameters()) {
    if (name == "server_version") return value;
  }
  return "unknown";
}

// What --wal-invalidation would find: wal_level and whether the role may
// replicate (REPLICATION or superuser). test_decoding's presence shows only
// when the slot is created (the feed logs it).
asio::awaitable<std::string> WalInvalidationCheck(endpoint::OriginConnection& conn) {
  std::string out;
  const std::string sql =
      "SELECT current_setting('wal_level'), (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = "
      "current_user)";
  protocol::AppendFrame(out, 'Q', std::string_view(sql.c_str(), sql.size() + 1));
  if (!(co_await conn.Write(out)).ok()) co_return std::string();
  std::vector<std::string> values;
  while (true) {
    absl::StatusOr<protocol::Frame> f = co_await conn.ReadFrame();
    if (!f.ok()) co_return std::string();
    if (f->tag == 'D') {
      absl::StatusOr<protocol::DataRow> row = protocol::DecodeDataRow(f->payload);
      if (row.ok()) {
        for (protocol::NullableValue v : *row) values.emplace_back(v ? std::string(*v) : std::string());
      }
    }
    if (f->tag == 'Z') break;
  }
  if (values.size() != 2) co_return std::string("wal invalidation: could not be checked");
  const bool logical = values[0] == "logical";
  const bool replication = values[1] == "t";
  if (logical && replication) {
    co_return std::string("wal invalidation: available (wal_level = logical, the role may replicate)");
  }
  std::string why;
  if (!logical) why = fmt::format("wal_level is {} (needs logical: ALTER SYSTEM SET wal_level = logical, then restart)", values[0]);
  if (!replication) {
    if (!why.empty()) why += "; ";
    why += "the role lacks REPLICATION (ALTER ROLE ... REPLICATION)";
  }
  co_return fmt::format("wal invalidation: unavailable: {}; --wal-invalidation auto would work by max age", why);
}

asio::awaitable<void> Validate(asio::any_io_executor executor, const OriginConfig& config,
                               std::chrono::milliseconds timeout, ValidationResult& result) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  endpoint::ConnectOptions options;
  options.timeout = timeout;
  if (config.connect_timeout.count() > 0) {
    options.timeout = std::min<std::chrono::milliseconds>(timeout, config.connect_timeout);
  }
  endpoint::ConnectResult connected = co_await endpoint::ConnectOrigin(executor, config, options);
  if (!connected.ok()) {
    result.failure = connected.failure.failure;
    result.message = connected.failure.message;
    co_return;
  }
  endpoint::OriginConnection& conn = *connected.connection;

  // The rest of the time budget bounds the test query.
  auto done = std::make_shared<bool>(false);
  auto timed_out = std::make_shared<bool>(false);
  asio::steady_timer guard(executor);
  guard.expires_at(deadline);
  guard.async_wait([&conn, done, timed_out](const std::error_code& ec) {
    if (ec || *done) return;
    *timed_out = true;
    conn.CloseNow();
  });
  absl::Status ping = co_await conn.Ping();
  *done = true;
  guard.cancel();
  if (*timed_out) {
    result.failure = ValidationFailure::kTimeout;
    result.message = fmt::format("logged in, but the test query did not finish within {} ms", timeout.count());
    co_return;
  }
  if (!ping.ok()) {
    result.failure = ValidationFailure::kQueryFailed;
    result.message = fmt::format("logged in, but the test query failed: {}", std::string(ping.message()));
    co_return;
  }
  result.wal_invalidation = co_await WalInvalidationCheck(conn);
  result.failure = ValidationFailure::kNone;
  result.message = fmt::format("connected to {}:{}{}, logged in as {} to database {} (PostgreSQL {}); test query OK",
                               config.host, config.port,
                               conn.is_tls() ? fmt::format(" over {}", conn.tls_version()) : std::string(" without TLS"),
                               config.user, config.dbname.empty() ? config.user : config.dbname, ServerVersion(conn));
  co_await conn.Close();
}

}  // namespace

ValidationResult ValidateOrigin(const std::string& origin, std::chrono::milliseconds timeout) {
  EndpointOptions options;
  options.origin = origin;
  return ValidateOrigin(options, timeout);
}

ValidationResult ValidateOrigin(const EndpointOptions& options, std::chrono::milliseconds timeout) {
  ValidationResult result;
  auto config = ParseOriginConfig(options.origin);
  if (config.ok()) {
    if (absl::Status s = endpoint::ResolveOriginPassword(*config, endpoint::PasswordSourcesOf(options)); !s.ok()) {
      config = s;
    }
  }
  if (!config.ok()) {
    result.failure = ValidationFailure::kBadOriginString;
    result.message = std::string(config.status().message());
    return result;
  }
  if (timeout.count() <= 0) timeout = std::chrono::milliseconds(15000);
  asio::io_context io;
  result.failure = ValidationFailure::kOther;
  result.message = "validation did not finish";
  asio::co_spawn(io, Validate(io.get_executor(), *config, timeout, result), asio::detached);
  io.run();
  return result;
}

}  // namespace hyperpool
