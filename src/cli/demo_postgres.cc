// The demo's scratch PostgreSQL 15 (see demo_postgres.h).

#include "cli/demo_postgres.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "protocol/auth/auth_util.h"

namespace hyperpool::cli::demo {
namespace {

constexpr const char* kDefaultPgBin = "/usr/lib/postgresql/15/bin";

// The child RunProcess is waiting for, so that a signal-time Stop() can end
// an initdb or pg_ctl that is still running.
std::atomic<pid_t> running_child{0};

std::string HexRandom(size_t bytes) {
  absl::StatusOr<std::string> random = auth::RandomBytes(bytes);
  std::string out;
  if (!random.ok()) {  // Only an unseeded CSPRNG fails; a throwaway cluster on 127.0.0.1 survives it.
    for (size_t i = 0; i < bytes; ++i) out += fmt::format("{:02x}", static_cast<unsigned>(std::rand() & 0xff));
    return out;
  }
  for (unsigned char c : *random) out += fmt::format("{:02x}", c);
  return out;
}

absl::StatusOr<uint16_t> FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return absl::InternalError(fmt::format("bind: {}", std::strerror(errno)));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

absl::Status WriteFile(const std::string& path, const std::string& text, bool append, mode_t mode) {
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(fmt::format("cannot write {}", path));
  chmod(path.c_str(), mode);
  return absl::OkStatus();
}

std::string Tail(const std::string& path, size_t max_lines) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  for (size_t i = lines.size() > max_lines ? lines.size() - max_lines : 0; i < lines.size(); ++i) {
    out += "    " + lines[i] + "\n";
  }
  return out;
}

}  // namespace

absl::StatusOr<int> RunProcess(const std::vector<std::string>& argv, const std::string& log_path) {
  // Everything the child needs is prepared before fork: after it only
  // async-signal-safe calls are allowed (we have threads).
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int log_fd = open(log_path.empty() ? "/dev/null" : log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) return absl::InternalError(fmt::format("cannot open {}: {}", log_path, std::strerror(errno)));
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    return absl::InternalError(fmt::format("fork: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);  // its own process group, so Stop() can end it with everything it started
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}) signal(s, SIG_DFL);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    close_range(3, ~0U, 0);
    execvp(args[0], args.data());
    _exit(127);
  }
  setpgid(pid, pid);  // also here: whichever runs first wins the race
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
  running_child.store(pid);
  int status = 0;
  pid_t waited;
  do {
    waited = waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);
  running_child.store(0);
  if (waited < 0) return absl::InternalError(fmt::format("waitpid: {}", std::strerror(errno)));
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

std::vector<std::string> ScratchPostgres::AsPostgres(std::vector<std::string> argv) const {
  if (!as_root_) return argv;
  std::vector<std::string> out = {"runuser", "-u", "postgres", "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

absl::StatusOr<std::shared_ptr<ScratchPostgres>> ScratchPostgres::Start(
    CleanupList& cleanup, std::function<void(const std::string&)> log) {
  std::shared_ptr<ScratchPostgres> pg(new ScratchPostgres());
  const char* bin_env = std::getenv("HYPERPOOL_PGBIN");
  pg->bin_ = bin_env != nullptr ? bin_env : kDefaultPgBin;
  if (access((pg->bin_ + "/initdb").c_str(), X_OK) != 0 || access((pg->bin_ + "/pg_ctl").c_str(), X_OK) != 0) {
    return absl::NotFoundError(fmt::format(
        "no PostgreSQL 15 server binaries in {} (apt-get install postgresql-15, or pass --origin URL)", pg->bin_));
  }
  pg->as_root_ = geteuid() == 0;
  if (pg->as_root_) {
    passwd* pw = getpwnam("postgres");
    if (pw == nullptr) return absl::NotFoundError("running as root but there is no 'postgres' OS user to run initdb");
    pg->pg_uid_ = pw->pw_uid;
    pg->pg_gid_ = pw->pw_gid;
  }

  // The directory must be reachable by the postgres user, hence /tmp and not $TMPDIR.
  char tmpl[] = "/tmp/hyperpool-demo-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError(fmt::format("mkdtemp: {}", std::strerror(errno)));
  pg->dir_ = tmpl;
  cleanup.Add([pg] { pg->Stop(); });
  // Held for the whole start: a signal-time Stop() ends the running tool and
  // then waits here, so it never removes the directory under a running step.
  std::unique_lock lock(pg->mu_);
  auto fail = [&](absl::Status status) -> absl::StatusOr<std::shared_ptr<ScratchPostgres>> {
    pg->StopLocked();
    return status;
  };
  auto cancelled = [&] { return pg->cancelled_.load(); };
  if (cancelled()) return fail(absl::CancelledError("interrupted"));
  if (pg->as_root_ && chown(pg->dir_.c_str(), pg->pg_uid_, pg->pg_gid_) != 0) {
    return fail(absl::InternalError(fmt::format("chown {}: {}", pg->dir_, std::strerror(errno))));
  }
  chmod(pg->dir_.c_str(), 0700);

  const std::string log_path = pg->dir_ + "/tools.log";
  const std::string pwfile = pg->dir_ + "/pwfile";
  pg->admin_password_ = HexRandom(16);
  absl::Status wrote = WriteFile(pwfile, pg->admin_password_ + "\n", false, 0600);
  if (!wrote.ok()) return fail(wrote);
  // The log is created by us (root) and appended to by the tools: hand both to postgres.
  wrote = WriteFile(log_path, "", false, 0600);
  if (!wrote.ok()) return fail(wrote);
  if (pg->as_root_) {
    if (chown(pwfile.c_str(), pg->pg_uid_, pg->pg_gid_) != 0 || chown(log_path.c_str(), pg->pg_uid_, pg->pg_gid_) != 0) {
      return fail(absl::InternalError(fmt::format("chown: {}", std::strerror(errno))));
    }
  }

  log(fmt::format("initdb {}/data (PostgreSQL tools from {})", pg->dir_, pg->bin_));
  if (cancelled()) return fail(absl::CancelledError("interrupted"));
  absl::StatusOr<int> rc = RunProcess(
      pg->AsPostgres({pg->bin_ + "/initdb", "-D", pg->data_dir(), "-U", pg->admin_user_, "--pwfile=" + pwfile,
                      "--auth=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync", "--no-instructions"}),
      log_path);
  std::filesystem::remove(pwfile);
  if (cancelled()) return fail(absl::CancelledError("interrupted"));
  if (!rc.ok()) return fail(rc.status());
  if (*rc != 0) return fail(absl::InternalError(fmt::format("initdb failed (exit {}):\n{}", *rc, Tail(log_path, 15))));

  // Only SCRAM over TCP from 127.0.0.1; no Unix socket at all.
  wrote = WriteFile(pg->data_dir() + "/pg_hba.conf",
                    "# hyperpool demo: password (SCRAM) logins from 127.0.0.1 only\n"
                    "host all all 127.0.0.1/32 scram-sha-256\n",
                    false, 0600);
  if (!wrote.ok()) return fail(wrote);
  const std::string conf = pg->data_dir() + "/postgresql.conf";
  const std::string conf_orig = conf + ".orig";
  std::error_code ec;
  std::filesystem::copy_file(conf, conf_orig, ec);
  if (ec) return fail(absl::InternalError(fmt::format("copy {}: {}", conf, ec.message())));

  const std::string server_log = pg->dir_ + "/postgresql.log";
  bool started = false;
  for (int attempt = 1; attempt <= 5 && !started; ++attempt) {
    if (cancelled()) return fail(absl::CancelledError("interrupted"));
    absl::StatusOr<uint16_t> port = FreePort();
    if (!port.ok()) return fail(port.status());
    pg->port_ = *port;
    std::filesystem::copy_file(conf_orig, conf, std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return fail(absl::InternalError(fmt::format("copy {}: {}", conf, ec.message())));
    wrote = WriteFile(conf, fmt::format(R"(
# --- hyperpool demo (scratch cluster, removed at exit) ---
listen_addresses = '127.0.0.1'
port = {}
unix_socket_directories = ''
max_connections = 50
shared_buffers = 16MB
fsync = off
synchronous_commit = off
full_page_writes = off
dynamic_shared_memory_type = mmap
password_encryption = 'scram-sha-256'
)",
                                        pg->port_),
                      true, 0600);
    if (!wrote.ok()) return fail(wrote);
    if (pg->as_root_) {
      for (const std::string& f : {conf, pg->data_dir() + "/pg_hba.conf"}) {
        if (chown(f.c_str(), pg->pg_uid_, pg->pg_gid_) != 0) {
          return fail(absl::InternalError(fmt::format("chown {}: {}", f, std::strerror(errno))));
        }
      }
    }
    rc = RunProcess(pg->AsPostgres({pg->bin_ + "/pg_ctl", "start", "-D", pg->data_dir(), "-l", server_log, "-w",
                                    "-t", "30", "-s"}),
                    log_path);
    if (!rc.ok()) return fail(rc.status());
    if (cancelled()) return fail(absl::CancelledError("interrupted"));
    if (*rc == 0) {
      started = true;
    } else {
      log(fmt::format("start on port {} failed (attempt {})", pg->port_, attempt));
      (void)RunProcess(pg->AsPostgres({pg->bin_ + "/pg_ctl", "stop", "-D", pg->data_dir(), "-m", "immediate", "-s"}),
                       log_path);
    }
  }
  if (!started) {
    return fail(absl::InternalError(fmt::format("could not start PostgreSQL:\n{}", Tail(server_log, 15))));
  }
  return pg;
}

ScratchPostgres::~ScratchPostgres() { Stop(); }

void ScratchPostgres::Stop() {
  cancelled_.store(true);
  // A tool still running (the signal arrived mid-start): end its process
  // group, so that Start() (which holds mu_) fails fast and lets go.
  if (pid_t child = running_child.load(); child > 0) {
    kill(-child, SIGTERM);
    for (int i = 0; i < 20 && running_child.load() == child; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (running_child.load() == child) kill(-child, SIGKILL);
  }
  std::lock_guard lock(mu_);
  StopLocked();
}

void ScratchPostgres::StopLocked() {
  if (stopped_ || dir_.empty()) return;
  stopped_ = true;
  const std::string pid_file = data_dir() + "/postmaster.pid";
  if (access(pid_file.c_str(), F_OK) == 0) {
    pid_t postmaster = 0;
    {
      std::ifstream in(pid_file);
      in >> postmaster;
    }
    // Immediate: a throwaway cluster needs no checkpoint, and it is fast.
    absl::StatusOr<int> rc = RunProcess(
        AsPostgres({bin_ + "/pg_ctl", "stop", "-D", data_dir(), "-m", "immediate", "-w", "-t", "20", "-s"}), "");
    if ((!rc.ok() || *rc != 0) && postmaster > 0 && kill(postmaster, 0) == 0) {
      kill(postmaster, SIGKILL);
      for (int i = 0; i < 50 && kill(postmaster, 0) == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace hyperpool::cli::demo
