// EndpointCache's sessions by Client and the invalidations it broadcasts to
// them (endpoint_cache.h; docs/architecture.md, the link protocol's `I`
// control).
#include <string>
#include <vector>

#include "cache/tier.h"
#include "endpoint/endpoint_cache.h"

namespace hyperpool::endpoint {

void EndpointCache::Broadcast(const cache::InvalidateControl& control, const std::string& except_client,
                              bool remote) {
  // A local write's own session tells its Client in its batch; a remote
  // one reaches every Client.
  if (!remote && sessions_.size() <= 1) return;
  // A Client's invalidation watches (they hear every invalidation, whether
  // or not the Client has a session open), else one session of the Client.
  // Targets first: delivering may end a watch that falls too far behind
  // (it unregisters).
  std::vector<SessionCache*> targets;
  for (const auto& [client, c] : clients_) {
    if (client == except_client) continue;
    if (!c.watches.empty()) {
      targets.insert(targets.end(), c.watches.begin(), c.watches.end());
    } else if (!c.sessions.empty()) {
      targets.push_back(*c.sessions.begin());
    }
  }
  if (targets.empty()) return;  // (the writer's own Client is the only one: encoded for nobody)
  std::string bytes;
  cache::AppendControl(bytes, control);
  for (SessionCache* s : targets) {
    if (sessions_.contains(s)) s->Deliver(bytes);
  }
}

bool EndpointCache::LastEarOf(const std::string& client_id, const SessionCache* s) const {
  if (clients_.size() <= 1) return false;  // no other Client's writes to hear
  auto it = clients_.find(client_id);
  if (it == clients_.end() || !it->second.watches.empty()) return false;
  const auto& sessions = it->second.sessions;
  return sessions.size() == 1 && sessions.contains(const_cast<SessionCache*>(s));
}

void EndpointCache::Index(SessionCache* s) {
  if (!sessions_.contains(s)) return;
  ClientSessions& c = clients_[s->client_id()];
  (watches_.contains(s) ? c.watches : c.sessions).insert(s);
}

void EndpointCache::Unindex(SessionCache* s, const std::string& client_id) {
  auto it = clients_.find(client_id);
  if (it == clients_.end()) return;
  it->second.sessions.erase(s);
  it->second.watches.erase(s);
  if (it->second.sessions.empty() && it->second.watches.empty()) clients_.erase(it);
}

void EndpointCache::Register(SessionCache* s) {
  sessions_.insert(s);
  Index(s);
}

void EndpointCache::Rekey(SessionCache* s, const std::string& old_client_id) {
  Unindex(s, old_client_id);
  Index(s);
}

void EndpointCache::Unregister(SessionCache* s) {
  Unindex(s, s->client_id());
  watches_.erase(s);
  sessions_.erase(s);
}

void EndpointCache::AddWatch(SessionCache* s) {
  Unindex(s, s->client_id());
  watches_.insert(s);
  Index(s);
}

void EndpointCache::RemoveWatch(SessionCache* s) {
  Unindex(s, s->client_id());
  watches_.erase(s);
  Index(s);
}

}  // namespace hyperpool::endpoint
