// Subcommands of the hyperpool binary; each lives in its own file.
#pragma once

namespace hyperpool::cli {

// `hyperpool serve ...`: runs a Client and an Endpoint until SIGINT/SIGTERM.
int Serve(int argc, char** argv);
// `hyperpool validate URL [--timeout MS]`: checks an origin, exit code per failure.
int Validate(int argc, char** argv);
// `hyperpool demo ...`: the seed's benchmark across a simulated WAN (demo.cc).
int Demo(int argc, char** argv);
// `hyperpool endpoint ...` / `hyperpool client ...`: one half each, joined
// over TLS by the socket transport (remote.cc).
int RunEndpoint(int argc, char** argv);
int RunClient(int argc, char** argv);
// `hyperpool place --endpoint A --endpoint B ...`: probes and ranks Endpoints (remote.cc).
int RunPlace(int argc, char** argv);

extern const char* const kServeUsage;
extern const char* const kValidateUsage;
extern const char* const kDemoUsage;
extern const char* const kEndpointUsage;
extern const char* const kClientUsage;
extern const char* const kPlaceUsage;

}  // namespace hyperpool::cli
