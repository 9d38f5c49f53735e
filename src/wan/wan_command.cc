// `hyperpool wan`: argument parsing and a signal wait around a WanProxy on its
// own thread. Deliberately free of Asio (one Asio translation unit is enough).
#include "wan/wan_command.h"

#include <pthread.h>
#include <signal.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "absl/status/status.h"

namespace hyperpool::wan {
namespace {

constexpr std::string_view kUsage =
    "usage: hyperpool wan --target HOST:PORT --rtt MS [--listen HOST:PORT] [--max-queued BYTES]\n"
    "  Relays TCP connections from --listen (default 127.0.0.1:0) to --target, delaying\n"
    "  each direction by RTT/2 and holding each new connection one RTT. Prints the\n"
    "  listening address as the first line of stdout; runs until SIGINT or SIGTERM.\n";

template <typename Int>
bool ParseInt(std::string_view text, Int& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

}  // namespace

absl::StatusOr<std::pair<std::string, uint16_t>> ParseHostPort(std::string_view text) {
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return absl::InvalidArgumentError(fmt::format("bad address '{}': want [V6]:PORT", text));
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return absl::InvalidArgumentError(fmt::format("bad address '{}': want HOST:PORT", text));
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  uint16_t number = 0;
  if (host.empty() || !ParseInt(port, number)) {
    return absl::InvalidArgumentError(fmt::format("bad address '{}': want HOST:PORT", text));
  }
  return std::make_pair(std::string(host), number);
}

absl::StatusOr<WanOptions> ParseWanArgs(int argc, const char* const* argv) {
  WanOptions options;
  bool have_target = false;
  bool have_rtt = false;
  for (int i = 0; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    bool inline_value = false;
    if (const std::size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    auto next = [&]() -> absl::StatusOr<std::string_view> {
      if (inline_value) return value;
      if (i + 1 >= argc) return absl::InvalidArgumentError(fmt::format("{} needs a value", arg));
      return std::string_view(argv[++i]);
    };
    if (arg == "--listen" || arg == "--target") {
      auto text = next();
      if (!text.ok()) return text.status();
      auto host_port = ParseHostPort(*text);
      if (!host_port.ok()) return host_port.status();
      if (arg == "--listen") {
        std::tie(options.listen_host, options.listen_port) = *host_port;
      } else {
        std::tie(options.target_host, options.target_port) = *host_port;
        have_target = true;
      }
    } else if (arg == "--rtt") {
      auto text = next();
      if (!text.ok()) return text.status();
      const std::string copy(*text);
      char* end = nullptr;
      const double ms = std::strtod(copy.c_str(), &end);
      if (copy.empty() || end != copy.c_str() + copy.size() || !std::isfinite(ms) || ms < 0 || ms > 3.6e6) {
        return absl::InvalidArgumentError(fmt::format("bad --rtt '{}': want milliseconds >= 0", copy));
      }
      options.rtt = std::chrono::microseconds(std::llround(ms * 1000.0));
      have_rtt = true;
    } else if (arg == "--max-queued") {
      auto text = next();
      if (!text.ok()) return text.status();
      if (!ParseInt(*text, options.max_queued_bytes) || options.max_queued_bytes == 0) {
        return absl::InvalidArgumentError(fmt::format("bad --max-queued '{}'", *text));
      }
    } else {
      return absl::InvalidArgumentError(fmt::format("unknown argument '{}'", arg));
    }
  }
  if (!have_target) return absl::InvalidArgumentError("--target HOST:PORT is required");
  if (!have_rtt) return absl::InvalidArgumentError("--rtt MS is required");
  return options;
}

int RunWanCommand(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fwrite(kUsage.data(), 1, kUsage.size(), stdout);
      return 0;
    }
  }
  auto options = ParseWanArgs(argc > 0 ? argc - 1 : 0, argc > 0 ? argv + 1 : argv);
  if (!options.ok()) {
    std::fprintf(stderr, "hyperpool wan: %s\n%.*s", std::string(options.status().message()).c_str(),
                 static_cast<int>(kUsage.size()), kUsage.data());
    return 2;
  }

  // Block the signals before the proxy thread exists so that it inherits the
  // mask and sigwait() below is the only receiver.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigset_t previous;
  pthread_sigmask(SIG_BLOCK, &signals, &previous);

  auto proxy = WanProxy::StartThread(*options);
  if (!proxy.ok()) {
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    std::fprintf(stderr, "hyperpool wan: %s\n", std::string(proxy.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n", (*proxy)->listen_address().c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "hyperpool wan: %s -> %s:%u, rtt %.3f ms\n", (*proxy)->listen_address().c_str(),
               options->target_host.c_str(), static_cast<unsigned>(options->target_port),
               static_cast<double>(options->rtt.count()) / 1000.0);

  int received = 0;
  sigwait(&signals, &received);
  (*proxy)->Stop();
  const WanStats stats = (*proxy)->stats();
  std::fprintf(stderr, "hyperpool wan: %s; %llu connections, %llu bytes to target, %llu bytes to client\n",
               received == SIGINT ? "SIGINT" : "SIGTERM",
               static_cast<unsigned long long>(stats.connections_accepted),
               static_cast<unsigned long long>(stats.bytes_client_to_target),
               static_cast<unsigned long long>(stats.bytes_target_to_client));
  proxy->reset();
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return 0;
}

}  // namespace hyperpool::wan
