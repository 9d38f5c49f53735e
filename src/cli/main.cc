// The hyperpool binary. Subcommands are dispatched from here; each lives in
// its own file under src/cli/.
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cli/cli_options.h"

#include "cli/commands.h"
#include "hyperpool/version.h"
#include "tls/tls_info.h"
#include "wan/wan_command.h"

namespace {

constexpr const char* kUsage = R"(usage: hyperpool <command> [options]

Commands:
  serve         run a local endpoint for applications, pooling one origin database
                (hyperpool serve --help for every option)
  endpoint      run only the Endpoint half near the origin database, for remote Clients
                over TLS (hyperpool endpoint --help)
  client        run only the Client half beside the application, its links going to a
                remote `hyperpool endpoint` (hyperpool client --help)
  place         probe several Endpoints and print the ranking a Client would use,
                with their client and origin round trips (hyperpool place --help)
  validate      check that an origin database is reachable and accepts the login
                (hyperpool validate --help)
  demo          the Hyperdrive write-up's benchmark on this machine: direct vs pooled vs
                cached across a simulated WAN (default RTT 125 ms), with a scratch
                PostgreSQL 15 unless --origin is given (hyperpool demo --help)
  wan           a WAN simulator (TCP delay line) in front of any TCP server
                (hyperpool wan --help)
  selfcheck     run a short self-check of the codec, authentication and TLS
  --version     print the version and the TLS library in use
  --help        print this help
)";

// Each application connection and each origin connection is a descriptor:
// start with the soft limit raised to the hard one (1024 is a common soft
// default; 10,000 idle clients need more), as PostgreSQL's postmaster does
// for its own files.
void RaiseDescriptorLimit() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  (void)::setrlimit(RLIMIT_NOFILE, &limit);
}

int PrintVersion() {
  std::printf("hyperpool %s (TLS: %s, %s; event loop: %s)\n", hyperpool::kVersion,
              hyperpool::tls::LibraryName().c_str(), hyperpool::tls::LibraryVersion().c_str(), hyperpool::kEventLoop);
  return 0;
}

// glibc raises its mmap threshold (up to 32 MiB) each time a large mmapped
// block is freed, so after one big message every later one comes from the
// heap and its pages stay with the process when freed (106-160 MB kept after
// three 50 MB queries). A fixed 1 MiB threshold returns every large buffer
// to the system when it is freed; below it nothing changes.
void ConfigureAllocator() {
#if defined(__GLIBC__)
  ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
}

int Dispatch(int argc, char** argv);

}  // namespace

int main(int argc, char** argv) {
  // The commands read a private copy of the arguments; the originals, which
  // /proc/PID/cmdline shows to every local user, lose their passwords.
  std::vector<std::string> owned(argv, argv + argc);
  std::vector<char*> copies;
  for (std::string& arg : owned) copies.push_back(arg.data());
  copies.push_back(nullptr);
  hyperpool::cli::HideSecretsInArgv(argc, argv);
  argv = copies.data();
  RaiseDescriptorLimit();
  ConfigureAllocator();
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  // Asio throws where it cannot set up its event loop (io_uring_queue_init
  // refused by a seccomp profile, in a build with -DHYPERPOOL_IO_URING=ON):
  // say so instead of terminating with an uncaught exception.
  try {
    return Dispatch(argc, argv);
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "hyperpool: %s (event loop: %s)%s\n", e.what(), hyperpool::kEventLoop,
                 std::string_view(hyperpool::kEventLoop) == "io_uring"
                     ? "; this system refuses io_uring: rebuild with -DHYPERPOOL_IO_URING=OFF (epoll)"
                     : "");
    return 1;
  }
}

namespace {

int Dispatch(int argc, char** argv) {
  std::string_view cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kUsage, stdout);
    std::fputs("\n", stdout);
    std::fputs(hyperpool::cli::kServeUsage, stdout);
    std::fputs("\n", stdout);
    std::fputs(hyperpool::cli::kEndpointUsage, stdout);
    std::fputs("\n", stdout);
    std::fputs(hyperpool::cli::kClientUsage, stdout);
    std::fputs("\n", stdout);
    std::fputs(hyperpool::cli::kPlaceUsage, stdout);
    std::fputs("\n", stdout);
    std::fputs(hyperpool::cli::kValidateUsage, stdout);
    std::fputs("\n", stdout);
    std::fputs(hyperpool::cli::kDemoUsage, stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "-V") return PrintVersion();
  if (cmd == "serve") return hyperpool::cli::Serve(argc, argv);
  if (cmd == "endpoint") return hyperpool::cli::RunEndpoint(argc, argv);
  if (cmd == "client") return hyperpool::cli::RunClient(argc, argv);
  if (cmd == "place") return hyperpool::cli::RunPlace(argc, argv);
  if (cmd == "validate") return hyperpool::cli::Validate(argc, argv);
  if (cmd == "demo") return hyperpool::cli::Demo(argc, argv);
  if (cmd == "wan") return hyperpool::wan::RunWanCommand(argc - 1, argv + 1);
  if (cmd == "selfcheck") {
    PrintVersion();
    std::puts("selfcheck: ok");
    return 0;
  }
  std::fprintf(stderr, "hyperpool: unknown command '%s'\n\n%s", argv[1], kUsage);
  return 2;
}

}  // namespace
