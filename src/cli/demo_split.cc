// The demo's split topology (see demo_split.h).

#include "cli/demo_split.h"

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <fmt/format.h>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "cli/demo_certs.h"
#include "hyperpool/hyperpool.h"
#include "protocol/auth/auth_util.h"
#include "wan/wan_proxy.h"

namespace hyperpool::cli::demo {
namespace {

// How long Stop() lets the Endpoint's links unwind before stopping its thread.
constexpr std::chrono::seconds kDrainLimit{5};

absl::StatusOr<std::string> HexSecret() {
  absl::StatusOr<std::string> random = auth::RandomBytes(32);
  if (!random.ok()) return random.status();
  std::string out;
  for (char c : *random) out += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return out;
}

// A value for a libpq key=value string.
std::string QuoteConnValue(std::string_view value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\'' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "'";
}

// The port of "postgresql://user:pass@host:port/db?...".
std::optional<uint16_t> PortOfUrl(const std::string& url) {
  size_t at = url.rfind('@');
  size_t slash = url.find('/', at == std::string::npos ? 0 : at);
  if (at == std::string::npos || slash == std::string::npos) return std::nullopt;
  std::string hostport = url.substr(at + 1, slash - at - 1);
  size_t colon = hostport.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(hostport.substr(colon + 1), &port) || port == 0 || port > 65535) {
    return std::nullopt;
  }
  return static_cast<uint16_t>(port);
}

}  // namespace

struct SplitPooler::Parts {
  asio::io_context io{1};  // the Endpoint's executor (and its listener's)
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::unique_ptr<Endpoint> endpoint;
  std::unique_ptr<LinkListener> listener;
  std::unique_ptr<wan::WanProxy> wan;
  std::unique_ptr<Connection> client;
  PgLogin login;
  bool stopped = false;

  void Stop() {
    if (stopped) return;
    stopped = true;
    if (client) client->Close();
    if (wan) wan->Stop();
    if (listener) listener->Stop();
    if (endpoint) endpoint->Stop();
    guard.reset();
    if (thread.joinable()) {
      {
        std::unique_lock lock(mu);
        if (!cv.wait_for(lock, kDrainLimit, [&] { return done; })) io.stop();
      }
      thread.join();
    }
    client.reset();
    wan.reset();
    listener.reset();
    endpoint.reset();
  }
};

SplitPooler::SplitPooler(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}
SplitPooler::~SplitPooler() { Stop(); }
void SplitPooler::Stop() { parts_->Stop(); }
const PgLogin& SplitPooler::login() const { return parts_->login; }
EndpointStats SplitPooler::endpoint_stats() const {
  return parts_->endpoint ? parts_->endpoint->Stats() : EndpointStats{};
}

absl::StatusOr<std::unique_ptr<SplitPooler>> SplitPooler::Start(const SplitOptions& options) {
  const std::string cert = options.work_dir + "/link.crt";
  const std::string key = options.work_dir + "/link.key";
  if (absl::Status made = WriteSelfSignedCertificate(cert, key); !made.ok()) return made;
  absl::StatusOr<std::string> secret = HexSecret();
  if (!secret.ok()) return secret.status();

  auto parts = std::make_unique<Parts>();
  Parts& p = *parts;
  std::unique_ptr<SplitPooler> pooler(new SplitPooler(std::move(parts)));
  p.guard.emplace(p.io.get_executor());
  p.thread = std::thread([&p] {
    p.io.run();
    std::lock_guard lock(p.mu);
    p.done = true;
    p.cv.notify_all();
  });

  // Beside the origin: the Endpoint and its listener.
  EndpointOptions endpoint_options;
  endpoint_options.origin =
      fmt::format("host={} port={} user={} password={} dbname={} sslmode=disable", options.origin.host,
                  options.origin.port, QuoteConnValue(options.origin.user), QuoteConnValue(options.origin.password),
                  QuoteConnValue(options.origin.database));
  endpoint_options.cache.enabled = options.cache;
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = Endpoint::Create(p.io.get_executor(), endpoint_options);
  if (!endpoint.ok()) return endpoint.status();
  p.endpoint = *std::move(endpoint);
  LinkListenerOptions listen;
  listen.tls_cert_file = cert;
  listen.tls_key_file = key;
  listen.link_secret = *secret;
  absl::StatusOr<std::unique_ptr<LinkListener>> listener = MakeLinkListener(p.io.get_executor(), *p.endpoint, listen);
  if (!listener.ok()) return listener.status();
  p.listener = *std::move(listener);

  // The long path, in front of the listener.
  wan::WanOptions wan_options;
  wan_options.target_host = "127.0.0.1";
  wan_options.target_port = p.listener->port();
  wan_options.rtt = options.rtt;
  absl::StatusOr<std::unique_ptr<wan::WanProxy>> wan = wan::WanProxy::StartThread(wan_options);
  if (!wan.ok()) return wan.status();
  p.wan = *std::move(wan);

  // Beside the app: the Client, whose links cross the WAN.
  RemoteConnectOptions client_options;
  client_options.endpoint.host = "127.0.0.1";
  client_options.endpoint.port = p.wan->port();
  client_options.endpoint.tls_ca_file = cert;
  client_options.endpoint.link_secret = *secret;
  client_options.client.cache.enabled = options.cache;
  client_options.client.user = "demo";
  absl::StatusOr<std::string> password = HexSecret();
  if (!password.ok()) return password.status();
  client_options.client.password = *password;
  client_options.client.database = "demo";
  client_options.threads = 2;
  absl::StatusOr<std::unique_ptr<Connection>> client = connect_remote(client_options);
  if (!client.ok()) return client.status();
  p.client = *std::move(client);
  std::optional<uint16_t> port = PortOfUrl(p.client->connection_string());
  if (!port) return absl::InternalError("cannot find the port in the Client's connection string");
  p.login.host = "127.0.0.1";
  p.login.port = *port;
  p.login.user = client_options.client.user;
  p.login.password = client_options.client.password;
  p.login.database = client_options.client.database;
  return pooler;
}

}  // namespace hyperpool::cli::demo
