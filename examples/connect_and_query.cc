// Example: make an origin database "local" with hyperpool::connect(), then
// run a few queries through the returned connection string.
//
//   example_connect_and_query 'postgresql://user:pass@db.example.com/app?sslmode=require'
//
// The queries run in psql, a child process: libpq (OpenSSL) must never share
// a process with hyperpool's BoringSSL. Any driver in any process can use the
// connection string the same way.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "hyperpool/hyperpool.h"

namespace {

// Runs psql with `url` and `sql`; returns its exit status.
int RunPsql(const std::string& psql, const std::string& url, const std::string& sql) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    std::vector<const char*> argv = {psql.c_str(), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                                     "-d",         url.c_str(), "-c", sql.c_str(), nullptr};
    execvp(argv[0], const_cast<char* const*>(argv.data()));
    std::perror("execvp psql");
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s ORIGIN_URL [PSQL]\n", argv[0]);
    return 2;
  }
  std::string psql = argc > 2 ? argv[2] : "psql";

  hyperpool::ConnectOptions options;
  options.endpoint.origin = argv[1];
  options.endpoint.pool.max_size = 2;
  options.threads = 1;
  auto connection = hyperpool::connect(std::move(options));
  if (!connection.ok()) {
    std::fprintf(stderr, "connect failed: %s\n", std::string(connection.status().message()).c_str());
    return 1;
  }
  const std::string& url = (*connection)->connection_string();
  std::printf("local connection string: %s\n", url.c_str());
  std::fflush(stdout);

  const char* queries[] = {
      "SELECT version()",
      "SELECT 6 * 7 AS answer",
      "BEGIN; SELECT txid_current() IS NOT NULL; COMMIT",
      "SELECT count(*) FROM generate_series(1, 1000)",
  };
  for (const char* sql : queries) {
    std::printf("-- %s\n", sql);
    std::fflush(stdout);
    if (int rc = RunPsql(psql, url, sql); rc != 0) {
      std::fprintf(stderr, "psql failed with status %d\n", rc);
      return 1;
    }
  }
  (*connection)->Close();
  return 0;
}
