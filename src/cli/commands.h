// Subcommands of the hyperpool binary; each lives in its own file.
#pragma once

namespace hyperpool::cli {

// `hyperpool serve ...`: runs a Client and an Endpoint until SIGINT/SIGTERM.
int Serve(int argc, char** argv);
// `hyperpool validate URL [--timeout MS]`: checks an origin, exit code per failure.
int Validate(int argc, char** argv);
// `hyperpool demo ...`: the seed's benchmark across a simulated WAN (demo.cc).
int Demo(int argc, char** argv);

extern const char* const kServeUsage;
extern const char* const kValidateUsage;
extern const char* const kDemoUsage;

}  // namespace hyperpool::cli
