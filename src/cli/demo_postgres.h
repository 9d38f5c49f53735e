// A scratch PostgreSQL 15 for `hyperpool demo`: initdb into a private temp
// directory, a free port on 127.0.0.1, SCRAM password authentication only,
// started with pg_ctl and removed again at the end. As root the PostgreSQL
// tools run as the `postgres` OS user through runuser (initdb refuses root),
// the same way tests/support/pgcluster.sh does it.
#ifndef HYPERPOOL_CLI_DEMO_POSTGRES_H_
#define HYPERPOOL_CLI_DEMO_POSTGRES_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/demo_cleanup.h"

namespace hyperpool::cli::demo {

// Runs argv[0] (looked up in PATH) with stdin from /dev/null and stdout and
// stderr appended to `log_path` (or /dev/null when empty). The child gets an
// empty signal mask, default signal dispositions and no inherited descriptor
// above 2 (Asio sockets are not close-on-exec). Returns the exit status
// (128 + signal number if it was killed).
absl::StatusOr<int> RunProcess(const std::vector<std::string>& argv, const std::string& log_path);

class ScratchPostgres {
 public:
  // Creates, configures and starts the cluster; registers its removal with
  // `cleanup` before anything is created on disk, so an interrupted start
  // still leaves nothing behind. `log` receives progress lines.
  // (Shared: the cleanup action holds a reference too.)
  static absl::StatusOr<std::shared_ptr<ScratchPostgres>> Start(CleanupList& cleanup,
                                                                std::function<void(const std::string&)> log);
  ~ScratchPostgres();

  // Stops the server (immediate shutdown; SIGKILL if pg_ctl fails) and removes
  // the directory. Idempotent and thread-safe.
  void Stop();

  uint16_t port() const { return port_; }
  const std::string& dir() const { return dir_; }
  std::string data_dir() const { return dir_ + "/data"; }
  // The bootstrap superuser (SCRAM, random password).
  const std::string& admin_user() const { return admin_user_; }
  const std::string& admin_password() const { return admin_password_; }

 private:
  ScratchPostgres() = default;
  void StopLocked();  // Stop() with mu_ held
  // Prefixes a PostgreSQL tool with runuser when we are root.
  std::vector<std::string> AsPostgres(std::vector<std::string> argv) const;

  std::mutex mu_;               // held by Start() throughout, and by Stop()
  std::atomic<bool> cancelled_{false};
  bool stopped_ = false;
  bool as_root_ = false;
  uint32_t pg_uid_ = 0;
  uint32_t pg_gid_ = 0;
  std::string bin_;
  std::string dir_;
  uint16_t port_ = 0;
  std::string admin_user_ = "hyperpool_admin";
  std::string admin_password_;
};

}  // namespace hyperpool::cli::demo

#endif  // HYPERPOOL_CLI_DEMO_POSTGRES_H_
