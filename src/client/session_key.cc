#include "client/session_key.h"

#include <cstdint>
#include <memory>
#include <string_view>

#include "cache/sql_analysis.h"
#include "protocol/frame_reader.h"

namespace hyperpool::client {

void SessionKey::Start(std::string_view database, const std::vector<std::pair<std::string, std::string>>& params,
                       const Interner& intern) {
  std::string base;
  if (!database.empty()) {
    // Length-prefixed, so no database name is a prefix of another's key.
    const uint32_t n = static_cast<uint32_t>(database.size());
    for (int shift = 24; shift >= 0; shift -= 8) base.push_back(static_cast<char>((n >> shift) & 0xff));
    base.append(database);
  }
  base += cache::HelloFingerprint(params, &unsupported_);
  base_ = intern ? intern(std::move(base)) : std::make_shared<const std::string>(std::move(base));
  sets_.reset();
}

bool SessionKey::Note(std::string_view sql, const cache::StatementEffects& fx, bool lasts) {
  // A SET of a setting no key depends on (PgJDBC's application_name at
  // connect) leaves keys valid; the Endpoint still captures and replays it.
  if (!fx.changes_session_state || fx.only_unkeyed_settings) return false;
  if (fx.only_setting_changes && lasts && (sets_ ? sets_->texts.size() : 0) + sql.size() < kMaxSets) {
    // Plain SET/RESET of ordinary settings (PgJDBC's extra_float_digits):
    // sessions share keys only with sessions that sent the same ones, which
    // the Endpoint re-keys by the same captured settings. One in a
    // transaction block or beside other statements may be rolled back, so
    // it does not count (`lasts` false): the session bypasses instead.
    if (!sets_) sets_ = std::make_unique<Sets>();
    sets_->texts.append(std::to_string(sql.size())).append(":").append(sql);
    sets_->with_sets = *base_ + std::string("\0sets\0", 6) + sets_->texts;
    return true;
  }
  changed_ = true;
  return false;
}

bool OwnUnit(char tag, const cache::SqlText& text, std::string_view rest) {
  const absl::StatusOr<cache::StatementAnalysis>& a = text.analysis();
  if (!a.ok() || a->statement_count != 1) return false;
  if (tag == 'Q') return true;
  protocol::FrameReader reader(protocol::FrameReader::Mode::kTagged);
  size_t pos = 0;
  for (;;) {
    protocol::FrameReader::Result r = reader.Read(rest.substr(pos));
    if (!r.is_frame()) return false;
    const char t = r.frame().tag;
    if (t == 'S') return true;
    if (t != 'B' && t != 'D' && t != 'E' && t != 'H') return false;
    pos += r.frame().size();
  }
}

}  // namespace hyperpool::client
