#pragma once
// One admin console connection's protocol (include/hyperpool/admin.h),
// without I/O: the simple query protocol only (PostgreSQL docs, "Message
// Flow" > "Simple Query"). A Query is answered by ExecuteAdminQuery plus
// ReadyForQuery 'I'; Terminate closes. An extended-protocol message gets
// ERROR 0A000 at once (so a driver waiting after Parse+Flush does not hang)
// and, as PostgreSQL's error recovery does, the rest up to Sync is
// discarded and Sync answers ReadyForQuery. Any other message: FATAL 08P01.

#include <cstdint>
#include <string>
#include <string_view>

#include "hyperpool/admin.h"
#include "ops/admin_console.h"

namespace hyperpool::ops {

class AdminProtocolSession : public AdminSession {
 public:
  // `backend` must outlive the session.
  AdminProtocolSession(AdminBackend& backend, AdminLogin login) : backend_(backend), login_(std::move(login)) {}

  void Greeting(std::string& out) override;
  bool OnMessage(char tag, std::string_view body, std::string& out) override;

 private:
  AdminBackend& backend_;
  const AdminLogin login_;
  bool skipping_to_sync_ = false;  // an extended message failed: wait for Sync
};

}  // namespace hyperpool::ops
