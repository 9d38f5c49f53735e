#pragma once
// The admin console's seam in the Client (docs/architecture.md, "Admin
// console"). An application that logs in to ClientOptions::admin_database
// is not given a link to the Endpoint: once it has authenticated, the
// Client asks the AdminConsole whether the user may use it (else FATAL
// 42501) and then pumps the session's frames through an AdminSession. The
// Client knows nothing of the commands; hyperpool serve implements them
// (src/ops/admin_*).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace hyperpool {

// One admin connection's protocol, without I/O. Called on the session's
// executor only.
class AdminSession {
 public:
  virtual ~AdminSession() = default;
  // Appends what follows AuthenticationOk (ParameterStatus, BackendKeyData,
  // ReadyForQuery) to `out`.
  virtual void Greeting(std::string& out) = 0;
  // Handles one message from the app (`tag`, the body after the length).
  // Appends the answer to `out`; false: close the connection once `out` is
  // written.
  virtual bool OnMessage(char tag, std::string_view body, std::string& out) = 0;
};

struct AdminLogin {
  std::uint64_t client_id = 0;  // as SHOW CLIENTS and KILL_CLIENT name it
  std::string user;
  std::string address;  // the app's address, "host:port" or "unix"
};

// Implemented by the host; thread-safe (sessions on every worker call it).
class AdminConsole {
 public:
  virtual ~AdminConsole() = default;
  // Whether `user` may use the console.
  virtual bool IsAdmin(std::string_view user) const = 0;
  // A session for an admin who has logged in.
  virtual std::unique_ptr<AdminSession> Open(const AdminLogin& login) = 0;
};

}  // namespace hyperpool
