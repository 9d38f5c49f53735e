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
    s.client = connection_->client_stats();
    if (Client* client = connection_->client()) s.clients = client->Sessions();
  }
  return s;
}

std::vector<OriginServerInfo> ServeAdmin::Servers() {
  std::lock_guard lock(mu_);
  if (connection_ == nullptr || connection_->endpoint() == nullptr) return {};
  return connection_->endpoint()->Servers();
}

void ServeAdmin::Pause() {
  std::lock_guard lock(mu_);
  if (connection_ != nullptr && connection_->endpoint() != nullptr) connection_->endpoint()->PausePool();
}

void ServeAdmin::Resume() {
  std::lock_guard lock(mu_);
  if (connection_ != nullptr && connection_->endpoint() != nullptr) connection_->endpoint()->ResumePool();
}

void ServeAdmin::Reconnect() {
  std::lock_guard lock(mu_);
  if (connection_ != nullptr && connection_->endpoint() != nullptr) connection_->endpoint()->ReconnectPool();
}

bool ServeAdmin::KillClient(std::uint64_t id) {
  std::lock_guard lock(mu_);
  return connection_ != nullptr && connection_->client() != nullptr && connection_->client()->Kill(id);
}

}  // namespace hyperpool::cli
