#include "support/pg_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include "absl/strings/numbers.h"

extern char** environ;

namespace hyperpool::testing {
namespace {

std::string ScriptPath(const char* name) {
  return std::string(HYPERPOOL_SOURCE_DIR) + "/tests/support/" + name;
}

absl::Status ErrnoError(std::string_view what) {
  return absl::InternalError(fmt::format("{}: {}", what, std::strerror(errno)));
}

// A directory under $TMPDIR (or /tmp) that exists only for this process.
absl::StatusOr<std::string> MakeTempDir(std::string_view prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = fmt::format("{}/{}XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
  if (mkdtemp(templ.data()) == nullptr) return ErrnoError("mkdtemp " + templ);
  return templ;
}

// Reads both pipes until EOF without deadlocking on a full pipe.
void DrainPipes(int out_fd, int err_fd, std::string& out, std::string& err) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&out, &err};
  int open_count = 2;
  char buf[8192];
  while (open_count > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
}

// The cluster this process started itself, stopped at exit.
struct OwnedCluster {
  std::string dir;
  PgCluster cluster;
};

std::optional<OwnedCluster>& OwnedClusterSlot() {
  static std::optional<OwnedCluster> slot;
  return slot;
}

void StopOwnedCluster() {
  auto& slot = OwnedClusterSlot();
  if (!slot) return;
  auto result = RunCommand({ScriptPath("pgcluster.sh"), "stop", slot->dir});
  if (!result.ok() || result->exit_code != 0) {
    fmt::print(stderr, "pg_fixture: stopping the cluster in {} failed\n", slot->dir);
  }
  slot.reset();
}

absl::StatusOr<PgCluster> StartOwnedCluster() {
  auto dir = MakeTempDir("hyperpool-pg-");
  if (!dir.ok()) return dir.status();
  // Registered before starting: stop also cleans up a half-started cluster.
  OwnedClusterSlot() = OwnedCluster{*dir, {}};
  std::atexit(StopOwnedCluster);
  auto result = RunCommand({ScriptPath("pgcluster.sh"), "start", *dir});
  if (!result.ok()) return result.status();
  if (result->exit_code != 0) {
    return absl::UnavailableError(
        fmt::format("pgcluster.sh start {} failed ({}): {}", *dir, result->exit_code, result->err));
  }
  auto cluster = LoadPgClusterEnv(*dir + "/env");
  if (cluster.ok()) OwnedClusterSlot()->cluster = *cluster;
  return cluster;
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(fmt::format("cannot open {}", path));
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

absl::StatusOr<PgCluster> LoadPgClusterEnv(const std::string& env_path) {
  auto text = ReadFile(env_path);
  if (!text.ok()) return text.status();
  std::map<std::string, std::string, std::less<>> kv;
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  std::vector<std::string> missing;
  auto get = [&](const char* key) {
    auto it = kv.find(key);
    if (it == kv.end()) {
      missing.push_back(key);
      return std::string();
    }
    return it->second;
  };
  PgCluster c;
  c.pgbin = get("PGBIN");
  c.pgdata = get("PGDATA");
  c.host = get("PGHOST");
  std::string port = get("PGPORT");
  c.sockdir = get("PGSOCKDIR");
  c.database = get("PGDATABASE");
  c.ca_cert = get("CA_CERT");
  c.client_cert = get("CLIENT_CERT");
  c.client_key = get("CLIENT_KEY");
  c.server_cert = get("SERVER_CERT");
  c.server_key = get("SERVER_KEY");
  c.admin = {get("ADMIN_USER"), get("ADMIN_PASSWORD")};
  c.scram = {get("SCRAM_USER"), get("SCRAM_PASSWORD")};
  c.md5 = {get("MD5_USER"), get("MD5_PASSWORD")};
  c.password = {get("PASSWORD_USER"), get("PASSWORD_PASSWORD")};
  c.trust = {get("TRUST_USER"), get("TRUST_PASSWORD")};
  c.sslonly = {get("SSLONLY_USER"), get("SSLONLY_PASSWORD")};
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    return absl::InvalidArgumentError(fmt::format("{} lacks {}", env_path, list));
  }
  uint32_t port_number = 0;
  if (!absl::SimpleAtoi(port, &port_number) || port_number == 0 || port_number > 65535) {
    return absl::InvalidArgumentError(fmt::format("{}: bad PGPORT '{}'", env_path, port));
  }
  c.port = static_cast<uint16_t>(port_number);
  return c;
}

const PgCluster& SharedPgCluster() {
  // Tests of one binary share one cluster; the mutex covers the rare test that
  // asks from several threads at once.
  static std::mutex mu;
  static std::optional<absl::StatusOr<PgCluster>> shared;
  std::lock_guard lock(mu);
  if (!shared) {
    const char* env = std::getenv("HYPERPOOL_TEST_PG_ENV");
    shared = (env && *env) ? LoadPgClusterEnv(env) : StartOwnedCluster();
  }
  if (!shared->ok()) FAIL("no PostgreSQL for this test: " << shared->status().ToString());
  return **shared;
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& extra_env) {
  if (argv.empty()) return absl::InvalidArgumentError("RunCommand: empty argv");
  // Build argv/envp before fork: the child may only call async-signal-safe functions.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const auto& e : extra_env) env_strings.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoError("pipe");
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return ErrnoError("pipe");
  }
  pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    return ErrnoError("fork");
  }
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execvpe(args[0], args.data(), envp.data());
    static const char kMsg[] = "exec failed\n";
    (void)!write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  CommandResult result;
  DrainPipes(out_pipe[0], err_pipe[0], result.out, result.err);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return ErrnoError("waitpid");
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

absl::StatusOr<std::string> RunPsql(const PgCluster& cluster, std::string_view sql,
                                    const PsqlOptions& options) {
  const std::string host = options.unix_socket ? cluster.sockdir : cluster.host;
  const std::string& database = options.database.empty() ? cluster.database : options.database;
  auto result = RunCommand(
      {cluster.pgbin + "/psql", "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-h", host, "-p",
       std::to_string(cluster.port), "-U", cluster.admin.user, "-d", database, "-c",
       std::string(sql)},
      // Not in argv: other processes can read argv. sslmode=disable keeps psql
      // independent of the server's TLS setup, which tests may be exercising.
      {"PGPASSWORD=" + cluster.admin.password, "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10"});
  if (!result.ok()) return result.status();
  if (result->exit_code != 0) {
    return absl::InternalError(
        fmt::format("psql exited with {}: {}", result->exit_code, result->err));
  }
  std::string out = std::move(result->out);
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

absl::StatusOr<uint16_t> PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    auto status = ErrnoError("bind 127.0.0.1:0");
    close(fd);
    return status;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

absl::StatusOr<TestCerts> GenerateTestCerts() {
  auto dir = MakeTempDir("hyperpool-certs-");
  if (!dir.ok()) return dir.status();
  // Each call gets its own directory; remove them all at exit.
  static std::mutex mu;
  static std::vector<std::string>* dirs = nullptr;
  {
    std::lock_guard lock(mu);
    if (dirs == nullptr) {
      dirs = new std::vector<std::string>();
      std::atexit([] {
        std::error_code ignored;
        for (const auto& d : *dirs) std::filesystem::remove_all(d, ignored);
      });
    }
    dirs->push_back(*dir);
  }
  auto result = RunCommand({ScriptPath("gencerts.sh"), *dir});
  if (!result.ok()) return result.status();
  if (result->exit_code != 0) {
    return absl::InternalError(fmt::format("gencerts.sh failed: {}", result->err));
  }
  const std::string& d = *dir;
  return TestCerts{d,
                   d + "/ca.crt",
                   d + "/ca.key",
                   d + "/other-ca.crt",
                   d + "/server.crt",
                   d + "/server.key",
                   d + "/client.crt",
                   d + "/client.key",
                   d + "/wrongname.crt",
                   d + "/wrongname.key"};
}

const TestCerts& SharedTestCerts() {
  static const TestCerts certs = [] {
    auto generated = GenerateTestCerts();
    if (!generated.ok()) FAIL("cannot generate certificates: " << generated.status().ToString());
    return *generated;
  }();
  return certs;
}

}  // namespace hyperpool::testing
