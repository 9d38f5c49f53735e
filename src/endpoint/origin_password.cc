#include "endpoint/origin_password.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace hyperpool::endpoint {
namespace {

// One pgpass line split at unescaped ':' with `\:` and `\\` resolved; nullopt
// for comments and lines with fewer than five fields (libpq ignores them).
std::optional<std::vector<std::string>> SplitPgpassLine(std::string_view line) {
  if (line.empty() || line.front() == '#') return std::nullopt;
  std::vector<std::string> fields(1);
  for (std::size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (c == '\\' && i + 1 < line.size()) {
      fields.back() += line[++i];
    } else if (c == ':' && fields.size() < 5) {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  if (fields.size() < 5) return std::nullopt;
  return fields;
}

bool FieldMatches(const std::string& field, std::string_view value) { return field == "*" || field == value; }

// Reads a whole small file; error messages name the file, never its contents.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, bool require_private) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(fmt::format("cannot read password file \"{}\": {}", path, std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(fmt::format("password file \"{}\" is not a plain file", path));
  if (require_private && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return absl::PermissionDeniedError(fmt::format(
        "password file \"{}\" has group or world access; permissions should be u=rw (0600) or less", path));
  }
  if (st.st_size > (1 << 20)) return absl::InvalidArgumentError(fmt::format("password file \"{}\" is too large", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(fmt::format("cannot read password file \"{}\"", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string_view StripLineEnd(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  return line;
}

std::optional<std::string> Get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

}  // namespace

PasswordSources SourcesFromEnvironment() {
  PasswordSources sources;
  sources.environment = true;
  sources.pgpassword = Get("PGPASSWORD");
  sources.pgpassfile = Get("PGPASSFILE");
  sources.home = Get("HOME");
  return sources;
}

PasswordSources PasswordSourcesOf(const EndpointOptions& options) {
  PasswordSources sources;
  if (options.origin_password_from_environment) sources = SourcesFromEnvironment();
  sources.password = options.origin_password;
  sources.password_file = options.origin_password_file;
  return sources;
}

std::optional<std::string> MatchPgpass(std::string_view contents, const OriginConfig& config) {
  const std::string host = config.is_unix_socket() ? std::string("localhost") : config.host;
  const std::string port = std::to_string(config.port);
  const std::string& database = config.dbname.empty() ? config.user : config.dbname;
  std::size_t start = 0;
  while (start < contents.size()) {
    std::size_t end = contents.find('\n', start);
    if (end == std::string_view::npos) end = contents.size();
    std::string_view line = StripLineEnd(contents.substr(start, end - start));
    start = end + 1;
    auto fields = SplitPgpassLine(line);
    if (!fields) continue;
    const auto& f = *fields;
    if (FieldMatches(f[0], host) && FieldMatches(f[1], port) && FieldMatches(f[2], database) &&
        FieldMatches(f[3], config.user)) {
      return f[4];
    }
  }
  return std::nullopt;
}

absl::Status ResolveOriginPassword(OriginConfig& config, const PasswordSources& sources) {
  if (!config.password.empty()) return absl::OkStatus();
  if (!sources.password.empty()) {
    config.password = sources.password;
    return absl::OkStatus();
  }
  if (!sources.password_file.empty()) {
    auto text = ReadSecretFile(sources.password_file, /*require_private=*/true);
    if (!text.ok()) return text.status();
    std::string_view first = *text;
    first = StripLineEnd(first.substr(0, first.find('\n')));
    if (first.empty()) {
      return absl::InvalidArgumentError(fmt::format("password file \"{}\" is empty", sources.password_file));
    }
    config.password = std::string(first);
    return absl::OkStatus();
  }
  if (!sources.environment) return absl::OkStatus();
  if (sources.pgpassword && !sources.pgpassword->empty()) {
    config.password = *sources.pgpassword;
    return absl::OkStatus();
  }
  std::string passfile = config.passfile;
  if (passfile.empty() && sources.pgpassfile) passfile = *sources.pgpassfile;
  if (passfile.empty() && sources.home && !sources.home->empty()) passfile = *sources.home + "/.pgpass";
  if (passfile.empty()) return absl::OkStatus();
  auto text = ReadSecretFile(passfile, /*require_private=*/true);
  if (!text.ok()) {
    // libpq warns about an unsafe pgpass file and otherwise stays silent.
    if (absl::IsPermissionDenied(text.status())) std::fprintf(stderr, "hyperpool: warning: %s\n", std::string(text.status().message()).c_str());
    return absl::OkStatus();
  }
  if (auto password = MatchPgpass(*text, config)) config.password = std::move(*password);
  return absl::OkStatus();
}

bool OriginStringHasPassword(std::string_view origin) {
  auto config = ParseOriginConfig(origin);
  return config.ok() && !config->password.empty();
}

}  // namespace hyperpool::endpoint
