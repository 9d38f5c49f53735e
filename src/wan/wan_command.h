// The `hyperpool wan` subcommand: a WAN simulator in front of any TCP server.
//
//   hyperpool wan --target HOST:PORT --rtt MS [--listen HOST:PORT] [--max-queued BYTES]
//
// Prints the bound listening address ("127.0.0.1:41234") as the first line of
// stdout, then relays until SIGINT or SIGTERM.
#ifndef HYPERPOOL_WAN_WAN_COMMAND_H_
#define HYPERPOOL_WAN_WAN_COMMAND_H_

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "wan/wan_proxy.h"

namespace hyperpool::wan {

// Runs the subcommand. argv[0] is the subcommand's name (ignored); the options
// follow. Options: --listen HOST:PORT (default 127.0.0.1:0), --target HOST:PORT
// (required), --rtt MS (required; fractional milliseconds allowed, 0 passes
// through), --max-queued BYTES, --help. Both "--opt value" and "--opt=value".
// Returns the process exit code: 0 after a signal, 1 on a run-time error,
// 2 on a usage error (message on stderr).
int RunWanCommand(int argc, char** argv);

// Parses the options above (without argv[0]) into WanOptions; exposed for tests.
absl::StatusOr<WanOptions> ParseWanArgs(int argc, const char* const* argv);

// Splits "host:port" or "[v6]:port".
absl::StatusOr<std::pair<std::string, uint16_t>> ParseHostPort(std::string_view text);

}  // namespace hyperpool::wan

#endif  // HYPERPOOL_WAN_WAN_COMMAND_H_
