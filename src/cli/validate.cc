// `hyperpool validate URL [--timeout MS]`: the Endpoint's origin check.

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "cli/commands.h"
#include "hyperpool/validate.h"

namespace hyperpool::cli {

const char* const kValidateUsage = R"(usage: hyperpool validate URL [--timeout MS]

Connects to the origin database URL (postgresql://... or key=value), logs in
and runs an empty query. Prints one line saying what worked or what is wrong;
exits 0 on success and a distinct code per failure:
  11 bad origin string   12 unknown host        13 connection refused
  14 timeout             15 TLS unavailable     16 TLS certificate rejected
  17 bad credentials     18 no such database    19 test query failed
  20 other
Options:
  --timeout MS                 bound on the whole check (default 15000)
  --origin-password-file FILE  the origin's password (first line; mode 0600) when URL has
                               none; else PGPASSWORD, then PGPASSFILE or ~/.pgpass
)";

int Validate(int argc, char** argv) {
  EndpointOptions options;
  std::string& origin = options.origin;
  std::chrono::milliseconds timeout{15000};
  for (int i = 2; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kValidateUsage, stdout);
      return 0;
    }
    if (arg == "--origin-password-file") {
      if (i + 1 >= argc) break;
      options.origin_password_file = argv[++i];
    } else if (arg == "--timeout" || arg.substr(0, 10) == "--timeout=") {
      std::string value;
      if (arg == "--timeout") {
        if (i + 1 >= argc) break;
        value = argv[++i];
      } else {
        value = std::string(arg.substr(10));
      }
      int64_t ms;
      if (!absl::SimpleAtoi(value, &ms) || ms <= 0) {
        std::fprintf(stderr, "hyperpool validate: bad --timeout '%s'\n", value.c_str());
        return 2;
      }
      timeout = std::chrono::milliseconds(ms);
    } else if (origin.empty()) {
      origin = std::string(arg);
    } else {
      std::fprintf(stderr, "hyperpool validate: unexpected argument\n\n%s", kValidateUsage);
      return 2;
    }
  }
  if (origin.empty()) {
    std::fputs(kValidateUsage, stderr);
    return 2;
  }
  ValidationResult result = ValidateOrigin(options, timeout);
  std::printf("%s\n", result.message.c_str());
  if (!result.wal_invalidation.empty()) std::printf("%s\n", result.wal_invalidation.c_str());
  return result.exit_code();
}

}  // namespace hyperpool::cli
