#include "client/database_router.h"

#include <cstdint>
#include <utility>
#include <variant>

#include "client/client_util.h"
#include "protocol/frontend_messages.h"
#include "protocol/frame_reader.h"

namespace hyperpool::client {

std::optional<std::string> HelloDatabase(std::string_view initial_bytes) {
  std::optional<protocol::Frame> startup = protocol::PeekStartupPacket(initial_bytes);
  if (!startup) return std::nullopt;
  absl::StatusOr<protocol::StartupPacket> packet = protocol::DecodeStartupPacket(startup->payload);
  if (!packet.ok()) return std::nullopt;
  const auto* hello = std::get_if<protocol::StartupMessage>(&*packet);
  if (hello == nullptr) return std::nullopt;
  for (const auto& [name, value] : hello->parameters) {
    if (name == kDatabaseParam) return std::string(value);
  }
  return std::nullopt;
}

std::string OriginForDatabase(std::string_view origin, std::string_view database) {
  std::string out(origin);
  if (origin.starts_with("postgresql://") || origin.starts_with("postgres://")) {
    out += origin.find('?') == std::string_view::npos ? '?' : '&';
    out += "dbname=" + PercentEncode(database);
    return out;
  }
  out += " dbname='";
  for (char c : database) {
    if (c == '\\' || c == '\'') out += '\\';
    out += c;
  }
  out += '\'';
  return out;
}

void DatabaseRouter::SetFallback(Fallback fallback) {
  std::lock_guard lock(mu_);
  fallback_ = std::move(fallback);
}

void DatabaseRouter::Set(std::string name, std::shared_ptr<Transport> transport) {
  std::lock_guard lock(mu_);
  routes_[std::move(name)] = std::move(transport);
}

void DatabaseRouter::Remove(std::string_view name) {
  std::lock_guard lock(mu_);
  if (auto it = routes_.find(name); it != routes_.end()) routes_.erase(it);
}

void DatabaseRouter::SetDefault(std::string name) {
  std::lock_guard lock(mu_);
  default_ = std::move(name);
}

std::vector<std::string> DatabaseRouter::Names() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> names;
  for (const auto& [name, transport] : routes_) names.push_back(name);
  return names;
}

std::shared_ptr<Transport> DatabaseRouter::Find(const std::optional<std::string>& database) const {
  std::lock_guard lock(mu_);
  auto it = routes_.find(database ? *database : default_);
  if (it == routes_.end() && !database && !routes_.empty()) it = routes_.begin();
  return it == routes_.end() ? nullptr : it->second;
}

asio::awaitable<absl::StatusOr<std::unique_ptr<Link>>> DatabaseRouter::Open(asio::any_io_executor executor,
                                                                             std::string initial_bytes) {
  const std::optional<std::string> database = HelloDatabase(initial_bytes);
  // Held for the Open: a reload may remove the route meanwhile.
  std::shared_ptr<Transport> transport = Find(database);
  Fallback fallback;
  if (transport == nullptr && database) {
    std::lock_guard lock(mu_);
    fallback = fallback_;
  }
  if (fallback) {
    absl::StatusOr<std::shared_ptr<Transport>> made = fallback(*database);
    if (!made.ok()) co_return made.status();
    transport = *std::move(made);
  }
  if (transport == nullptr) {
    co_return absl::NotFoundError("database \"" + database.value_or("") + "\" is no longer served");
  }
  co_return co_await transport->Open(std::move(executor), std::move(initial_bytes));
}

}  // namespace hyperpool::client
