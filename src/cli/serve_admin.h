#pragma once
// `hyperpool serve`'s admin console (docs/architecture.md, "Admin console"):
// the Client's AdminConsole seam and the commands' AdminBackend, over the
// running Connection. Reload and shutdown are the host's (serve.cc), passed
// in as callbacks.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "hyperpool/admin.h"
#include "hyperpool/hyperpool.h"
#include "ops/admin_console.h"

namespace hyperpool::cli {

class ServeAdmin final : public AdminConsole, public ops::AdminBackend {
 public:
  struct Static {
    std::string database;
    std::string user;
    std::string pool_mode;
    // Several databases ([databases]): name -> pool mode; empty: `database` alone.
    std::map<std::string, std::string> pool_modes;
    std::vector<ops::AdminSnapshot::ConfigRow> config;
  };

  ServeAdmin(std::function<absl::Status()> reload, std::function<void()> shutdown)
      : reload_(std::move(reload)), shutdown_(std::move(shutdown)) {}

  // Set once connect() returned; cleared before Close().
  void SetConnection(Connection* connection);
  // At start and after each accepted reload.
  void SetAdminUsers(std::vector<std::string> users);
  void SetStatic(Static s);

  // AdminConsole
  bool IsAdmin(std::string_view user) const override;
  std::unique_ptr<AdminSession> Open(const AdminLogin& login) override;

  // ops::AdminBackend
  ops::AdminSnapshot Snapshot() override;
  std::vector<OriginServerInfo> Servers() override;
  void Pause(std::string_view database) override;
  void Resume(std::string_view database) override;
  void Reconnect(std::string_view database) override;
  bool KillClient(std::uint64_t id) override;
  absl::Status Reload() override { return reload_(); }
  void Shutdown() override { shutdown_(); }

 private:
  // Requires mu_ and a connection: the Endpoints `database` names (empty: all).
  std::vector<Endpoint*> Endpoints(std::string_view database) const;

  const std::function<absl::Status()> reload_;
  const std::function<void()> shutdown_;
  mutable std::mutex mu_;
  Connection* connection_ = nullptr;  // guarded by mu_
  std::set<std::string, std::less<>> admin_users_;
  Static static_;
};

}  // namespace hyperpool::cli
