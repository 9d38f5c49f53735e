#include "cli/serve_admin.h"

#include <fmt/format.h>

#include "hyperpool/version.h"
#include "ops/admin_session.h"

namespace hyperpool::cli {

void ServeAdmin::SetConnection(Connection* connection) {
  std::lock_guard lock(mu_);
  connection_ = connection;
}

void ServeAdmin::SetAdminUsers(std::vector<std::string> users) {
  std::lock_guard lock(mu_);
  admin_users_ = std::set<std::string, std::less<>>(users.begin(), users.end());
}

void ServeAdmin::SetStatic(Static s) {
  std::lock_guard lock(mu_);
  static_ = std::move(s);
}

bool ServeAdmin::IsAdmin(std::string_view user) const {
  std::lock_guard lock(mu_);
  return admin_users_.find(user) != admin_users_.end();
}

std::unique_ptr<AdminSession> ServeAdmin::Open(const AdminLogin& login) {
  return std::make_unique<ops::AdminProtocolSession>(*this, login);
}

// The lock is held while reading the connection: SetConnection(nullptr)
// (before Close()) then waits for commands in progress.
ops::AdminSnapshot ServeAdmin::Snapshot() {
  std::lock_guard lock(mu_);
  ops::AdminSnapshot s;
  s.database = static_.database;
  s.user = static_.user;
  s.pool_mode = static_.pool_mode;
  s.config = static_.config;
  s.version = fmt::format("hyperpool {} ({})", kVersion, kTlsLibrary);
  if (connection_ != nullptr) {
    if (connection_->endpoint() != nullptr) {
      s.endpoint = connection_->endpoint_stats();
      s.cache_report = connection_->endpoint()->CacheReport(20);
    }
    for (const std::string& name : connection_->databases()) {
      Endpoint* endpoint = connection_->endpoint(name);
      if (endpoint == nullptr) continue;  // removed meanwhile
      auto mode = static_.pool_modes.find(name);
      s.pools.push_back({name, mode == static_.pool_modes.end() ? static_.pool_mode : mode->second, endpoint->Stats()});
    }
    s.client = connection_->client_stats();
    if (Client* client = connection_->client()) s.clients = client->Sessions();
  }
  return s;
}

std::vector<Endpoint*> ServeAdmin::Endpoints(std::string_view database) const {
  std::vector<Endpoint*> out;
  const std::vector<std::string> names = connection_->databases();
  if (names.empty()) {
    if (connection_->endpoint() != nullptr) out.push_back(connection_->endpoint());
    return out;
  }
  for (const std::string& name : names) {
    if (!database.empty() && name != database) continue;
    if (Endpoint* endpoint = connection_->endpoint(name)) out.push_back(endpoint);
  }
  return out;
}

std::vector<OriginServerInfo> ServeAdmin::Servers() {
  std::lock_guard lock(mu_);
  if (connection_ == nullptr) return {};
  const std::vector<std::string> names = connection_->databases();
  if (names.empty()) {
    return connection_->endpoint() == nullptr ? std::vector<OriginServerInfo>{} : connection_->endpoint()->Servers();
  }
  std::vector<OriginServerInfo> out;
  for (const std::string& name : names) {
    Endpoint* endpoint = connection_->endpoint(name);
    if (endpoint == nullptr) continue;
    for (OriginServerInfo& server : endpoint->Servers()) {
      server.database = name;
      out.push_back(std::move(server));
    }
  }
  return out;
}

void ServeAdmin::Pause(std::string_view database) {
  std::lock_guard lock(mu_);
  if (connection_ == nullptr) return;
  for (Endpoint* endpoint : Endpoints(database)) endpoint->PausePool();
}

void ServeAdmin::Resume(std::string_view database) {
  std::lock_guard lock(mu_);
  if (connection_ == nullptr) return;
  for (Endpoint* endpoint : Endpoints(database)) endpoint->ResumePool();
}

void ServeAdmin::Reconnect(std::string_view database) {
  std::lock_guard lock(mu_);
  if (connection_ == nullptr) return;
  for (Endpoint* endpoint : Endpoints(database)) endpoint->ReconnectPool();
}

bool ServeAdmin::KillClient(std::uint64_t id) {
  std::lock_guard lock(mu_);
  return connection_ != nullptr && connection_->client() != nullptr && connection_->client()->Kill(id);
}

}  // namespace hyperpool::cli
