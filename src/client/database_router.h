// DatabaseRouter: the Transport of a Client that serves several databases
// from one listener (hyperpool serve's [databases]). Each database has its
// own Endpoint (pool, cache tier, statement registry, pins, cancel keys)
// reached through its own transport; a link goes where its hello's
// hyperpool.database parameter says (the app's StartupMessage database).
// A hello without one (the Client's parameter probe) goes to the default
// database. Nothing is shared between databases but the Client's listener.
// With a fallback (PgBouncer's "*" entry), a hello naming a database not
// routed asks it for a transport (which starts that database's Endpoint).
#ifndef HYPERPOOL_CLIENT_DATABASE_ROUTER_H_
#define HYPERPOOL_CLIENT_DATABASE_ROUTER_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hyperpool/transport.h"

namespace hyperpool::client {

// The hyperpool.database parameter of a link hello at the start of
// `initial_bytes` (a StartupMessage); nullopt when there is none or the
// bytes do not start with a StartupMessage.
std::optional<std::string> HelloDatabase(std::string_view initial_bytes);

// `origin` (a libpq URI or key=value string) with its database replaced by
// `database` (a URI gets a dbname query parameter, which wins over its path;
// a key=value string a quoted dbname, which wins over an earlier one).
std::string OriginForDatabase(std::string_view origin, std::string_view database);

class DatabaseRouter final : public Transport {
 public:
  // Adds or replaces `name`'s transport (links already open stay where they are).
  void Set(std::string name, std::shared_ptr<Transport> transport);
  // New links to `name` fail from now on (open ones keep running).
  void Remove(std::string_view name);
  // Where hellos without a database go.
  void SetDefault(std::string name);
  std::vector<std::string> Names() const;
  // Called (without the router's lock) for a hello naming a database not
  // routed: its transport, or the error the link fails with (a status may
  // carry a SQLSTATE, protocol/pooler_errors.h's kSqlStatePayload).
  using Fallback = std::function<absl::StatusOr<std::shared_ptr<Transport>>(const std::string& database)>;
  void SetFallback(Fallback fallback);

  // NotFound when the hello names a database not (or no longer) served.
  asio::awaitable<absl::StatusOr<std::unique_ptr<Link>>> Open(asio::any_io_executor executor,
                                                               std::string initial_bytes) override;

 private:
  std::shared_ptr<Transport> Find(const std::optional<std::string>& database) const;

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Transport>, std::less<>> routes_;
  std::string default_;
  Fallback fallback_;
};

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_DATABASE_ROUTER_H_
