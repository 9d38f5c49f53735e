// Calibrates the WAN simulator against the real PostgreSQL: with a WanProxy of
// RTT 50 ms in front of it, a query on an established connection must cost one
// RTT, a trust login two (connect hold + StartupMessage round trip), and a
// fresh psql with SCRAM about five. Messages are hand-encoded on a blocking
// socket (PostgreSQL protocol 55.7 "Message Formats"): the test measures the
// proxy, not a client library, and links no libpq.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "support/pg_fixture.h"
#include "wan/wan_proxy.h"

namespace hyperpool::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr auto kRtt = milliseconds(50);

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void AppendInt32(std::string& out, uint32_t v) {
  const uint32_t be = htonl(v);
  out.append(reinterpret_cast<const char*>(&be), 4);
}

// StartupMessage, protocol 3.0 (55.7): length, 196608, then name/value pairs.
std::string StartupMessage(const std::string& user, const std::string& database) {
  std::string body;
  AppendInt32(body, 196608);
  for (const std::string& s : {std::string("user"), user, std::string("database"), database}) {
    body.append(s);
    body.push_back('\0');
  }
  body.push_back('\0');
  std::string out;
  AppendInt32(out, static_cast<uint32_t>(body.size() + 4));
  return out + body;
}

// Query ('Q'): the simple query protocol (55.2.2).
std::string QueryMessage(std::string_view sql) {
  std::string out = "Q";
  AppendInt32(out, static_cast<uint32_t>(sql.size() + 5));
  out.append(sql);
  out.push_back('\0');
  return out;
}

// A blocking client socket to 127.0.0.1:port, closed on destruction.
class RawConnection {
 public:
  explicit RawConnection(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    timeval tv{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }
  ~RawConnection() { close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  void Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      REQUIRE(n > 0);
      data.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  // Reads backend messages until ReadyForQuery ('Z'); an ErrorResponse ('E')
  // or a closed connection is an error.
  absl::Status ReadUntilReady() {
    for (;;) {
      std::string header = Read(5);
      if (header.size() < 5) return absl::UnavailableError("connection closed");
      uint32_t length;
      std::copy_n(header.data() + 1, 4, reinterpret_cast<char*>(&length));
      length = ntohl(length);
      if (length < 4) return absl::DataLossError("bad message length");
      const std::string body = Read(length - 4);
      if (body.size() < length - 4) return absl::UnavailableError("connection closed");
      if (header[0] == 'E') return absl::InternalError("ErrorResponse: " + body);
      if (header[0] == 'Z') return absl::OkStatus();
    }
  }

 private:
  std::string Read(std::size_t n) {
    std::string out(n, '\0');
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = recv(fd_, out.data() + got, n - got, 0);
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    out.resize(got);
    return out;
  }

  int fd_ = -1;
};

std::unique_ptr<wan::WanProxy> ProxyTo(const PgCluster& pg, std::chrono::microseconds rtt) {
  wan::WanOptions options;
  options.target_host = pg.host;
  options.target_port = pg.port;
  options.rtt = rtt;
  auto proxy = wan::WanProxy::StartThread(options);
  REQUIRE(proxy.ok());
  return std::move(*proxy);
}

TEST_CASE("through a 50 ms WAN, a trust login costs two RTTs and SELECT 1 one RTT") {
  const PgCluster& pg = SharedPgCluster();
  auto proxy = ProxyTo(pg, kRtt);

  // Lower bounds hold for every sample; upper bounds are checked on the
  // fastest, as load on a shared machine only adds delay.
  std::vector<Clock::duration> logins;
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    RawConnection login(proxy->port());
    login.Send(StartupMessage(pg.trust.user, pg.database));
    REQUIRE(login.ReadUntilReady().ok());
    logins.push_back(Clock::now() - start);
    login.Send(std::string("X\0\0\0\4", 5));  // Terminate.
    CAPTURE(Ms(logins.back()));
    CHECK(logins.back() >= 2 * kRtt);
  }
  const auto fastest_login = *std::min_element(logins.begin(), logins.end());
  CAPTURE(Ms(fastest_login));
  CHECK(fastest_login <= 2 * kRtt + milliseconds(40));  // Backend start-up included.

  RawConnection conn(proxy->port());
  conn.Send(StartupMessage(pg.trust.user, pg.database));
  REQUIRE(conn.ReadUntilReady().ok());

  std::vector<Clock::duration> samples;
  for (int i = 0; i < 7; ++i) {
    const auto start = Clock::now();
    conn.Send(QueryMessage("SELECT 1"));
    REQUIRE(conn.ReadUntilReady().ok());
    samples.push_back(Clock::now() - start);
  }
  std::sort(samples.begin(), samples.end());
  for (auto sample : samples) {
    CAPTURE(Ms(sample));
    CHECK(sample >= kRtt);
  }
  const auto median = samples[samples.size() / 2];
  CAPTURE(Ms(samples.front()), Ms(median), Ms(samples.back()));
  CHECK(samples.front() <= kRtt + milliseconds(20));
  conn.Send(std::string("X\0\0\0\4", 5));  // Terminate.
}

// Runs `psql -c 'select 1'` as hp_scram (SCRAM-SHA-256, no TLS) against port;
// returns its wall time.
Clock::duration TimePsql(const PgCluster& pg, uint16_t port) {
  const std::string conninfo = "host=127.0.0.1 port=" + std::to_string(port) + " user=" + pg.scram.user +
                               " dbname=" + pg.database + " sslmode=disable gssencmode=disable";
  const auto start = Clock::now();
  auto result = RunCommand({pg.pgbin + "/psql", "-X", "-A", "-t", "-q", "-c", "select 1", conninfo},
                           {"PGPASSWORD=" + pg.scram.password, "PGCONNECT_TIMEOUT=10"});
  const auto elapsed = Clock::now() - start;
  REQUIRE(result.ok());
  CAPTURE(result->err);
  REQUIRE(result->exit_code == 0);
  CHECK(result->out == "1\n");
  return elapsed;
}

TEST_CASE("through a 50 ms WAN, a fresh psql with SCRAM costs about five RTTs") {
  // Connect hold 1 + StartupMessage -> AuthenticationSASL 1 + SASLInitialResponse
  // -> SASLContinue 1 + SASLResponse -> SASLFinal..ReadyForQuery 1 + query 1.
  const PgCluster& pg = SharedPgCluster();
  auto proxy = ProxyTo(pg, kRtt);
  // The fastest of a few runs: psql's own start-up (exec, SCRAM's PBKDF2) is
  // noise measured directly against PostgreSQL and subtracted.
  Clock::duration direct = Clock::duration::max();
  Clock::duration proxied = Clock::duration::max();
  for (int i = 0; i < 3; ++i) {
    direct = std::min(direct, TimePsql(pg, pg.port));
    proxied = std::min(proxied, TimePsql(pg, proxy->port()));
  }
  const double rtts = Ms(proxied - direct) / Ms(kRtt);
  CAPTURE(Ms(direct), Ms(proxied), rtts);
  CHECK(rtts >= 4.5);
  CHECK(rtts <= 7.0);
  CHECK(proxy->stats().connections_accepted == 3);
}

}  // namespace
}  // namespace hyperpool::testing
