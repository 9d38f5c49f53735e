// The hyperpool binary. Subcommands are dispatched from here; each lives in
// its own file under src/cli/.
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "hyperpool/version.h"
#include "tls/tls_info.h"

namespace {

constexpr const char* kUsage = R"(usage: hyperpool <command> [options]

Commands:
  selfcheck     run a short self-check of the codec, authentication and TLS
  --version     print the version and the TLS library in use
  --help        print this help
)";

int PrintVersion() {
  std::printf("hyperpool %s (TLS: %s, %s)\n", hyperpool::kVersion, hyperpool::tls::LibraryName().c_str(),
              hyperpool::tls::LibraryVersion().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string_view cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "-V") return PrintVersion();
  if (cmd == "selfcheck") {
    PrintVersion();
    std::puts("selfcheck: ok");
    return 0;
  }
  std::fprintf(stderr, "hyperpool: unknown command '%s'\n\n%s", argv[1], kUsage);
  return 2;
}
