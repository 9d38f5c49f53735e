#pragma once
// Per-session state that a transaction-mode pooler must carry between origin
// connections, without I/O (unit-tested in
// tests/unit/endpoint/session_settings_test.cc):
//
//  - Settings (GUCs): the session's startup parameters (the hello) plus the
//    effects of its own SET / RESET / RESET ALL / set_config / DISCARD. They
//    are *replayed* onto whichever connection the session borrows: the
//    Endpoint keeps, per origin connection, the settings that connection
//    carries (beyond its own login defaults) and sends only the difference
//    (BuildSettingsDiff) before the session's work.
//  - Capture: instead of interpreting SET statements (SET LOCAL, SET inside a
//    rolled-back transaction, functions with SET clauses, RESET to a startup
//    value all behave differently), the Endpoint asks the connection, after a
//    unit of work that may have changed settings ended at ReadyForQuery 'I',
//    which settings are now session-level (BuildCaptureQuery) and stores
//    that. pg_settings does not list custom placeholders ("app.tenant"), so
//    their names are collected from the statements and read with
//    current_setting(name, true).
//  - Pins: state that cannot be replayed (temporary tables, session advisory
//    locks, WITH HOLD cursors, SET ROLE / SESSION AUTHORIZATION, SQL-level
//    PREPARE) keeps the session on its connection until the session ends
//    (PinSet, read by DecideRelease). LISTEN does not pin: the Endpoint's
//    listener connection carries it (listen_state.h, listener.h).
//
// Setting names are case-insensitive in PostgreSQL; maps here are keyed by
// the lowercased name.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "cache/sql_analysis.h"
#include "cache/string_hash.h"
#include "common/intern_table.h"
#include "pool/release_policy.h"

namespace hyperpool::endpoint {

// Lowercased setting name -> value (as PostgreSQL reports it in pg_settings,
// or as the client gave it).
using SettingMap = std::map<std::string, std::string>;

// The -c name=value / --name=value settings of a startup `options` string,
// split as PostgreSQL's pg_split_opts does (whitespace separates, a
// backslash escapes the next character); '-' in names becomes '_'. Other
// switches are ignored. Names are lowercased.
std::vector<std::pair<std::string, std::string>> ParseStartupOptions(std::string_view options);

// The settings a session asked for in its hello: every startup parameter
// except user, database, replication, _pq_.* and hyperpool.* (PostgreSQL
// treats every other startup parameter as a setting), with `options`
// expanded. Later entries win.
SettingMap SettingsFromStartup(const std::vector<std::pair<std::string, std::string>>& parameters);

// One simple-Query text (several statements) that turns a connection that
// carries `from` into one that carries `to`: RESET for names only in `from`,
// set_config(name, value, false) for names whose value differs. Empty if
// nothing differs. Safe whatever standard_conforming_strings is (E'' literals).
std::string BuildSettingsDiff(const SettingMap& from, const SettingMap& to);

// The query that reads a connection's session-level settings: pg_settings
// with source 'session' (minus the per-transaction transaction_* ones), plus
// current_setting(name, true) for each custom placeholder name in `custom`,
// plus one row with current_user and session_user. Four columns: name,
// value (NULL for an unknown placeholder), current_user, session_user.
std::string BuildCaptureQuery(const std::set<std::string>& custom);

// Builds a SettingMap from the capture query's rows. A placeholder whose
// value is NULL or '' (the value a placeholder keeps after RESET or a
// rolled-back SET) is left out; transaction_* names are left out.
SettingMap ParseCapturedSettings(const std::vector<std::vector<std::optional<std::string>>>& rows);

// What a capture read: the settings, and who the session is. role and
// session_authorization never appear in pg_settings, so the identity row
// is what proves a connection still runs as its login role before it is
// lent to anyone else (statement analysis is the first line, this the
// second: it also sees a SET ROLE hidden in a function).
struct CapturedState {
  SettingMap settings;
  std::optional<std::string> current_user;
  std::optional<std::string> session_user;
  // current_user and session_user are both `login_role`; false if the
  // identity row is missing (unproven).
  bool RoleIs(std::string_view login_role) const;
};
CapturedState ParseCapture(const std::vector<std::vector<std::optional<std::string>>>& rows);

// What a session's settings are after a capture: the captured session-level
// settings, plus the startup values of names the capture lacks (a RESET or
// DISCARD ALL goes back to the startup value, as on a direct connection
// whose startup packet carried it).
SettingMap MergeWithStartup(const SettingMap& captured, const SettingMap& startup);

// Whether a GUC name is a custom one ("class.name"): pg_settings omits those.
bool IsCustomSettingName(std::string_view name);

// What a statement text (a Query, or a Parse's text) may do to the session.
struct SessionEffects {
  bool settings = false;             // may change settings: capture afterwards
  std::vector<PinReason> pins;       // state that pins the session
  std::set<std::string> custom_names;  // placeholder names it mentions (lowercased)
  bool sequences = false;            // may call nextval/setval (sequence_state.h)
  // May NOTIFY (the word anywhere: NOTIFY, pg_notify, a function's name):
  // kept with a named statement too, so that its later Binds count
  // (notification_pid.h: who sent what the listener connection reads).
  bool notifies = false;
  // Reads pg_backend_pid() (the word anywhere), kept with a named statement
  // too: the origin pid the session has seen (SessionCore::observed_lease).
  bool reads_backend_pid = false;
  bool empty() const {
    return !settings && pins.empty() && custom_names.empty() && !sequences && !notifies && !reads_backend_pid;
  }
};

// Analyses `sql` with the cache's PostgreSQL lexer (src/cache/sql_analysis.h).
// Conservative: text that does not lex counts as possibly changing settings.
// A cheap word scan skips the lexer for texts that cannot matter.
SessionEffects AnalyzeSessionEffects(std::string_view sql);
// The same for a text whose analysis is shared with the session's other
// passes (cache/sql_analysis.h).
SessionEffects AnalyzeSessionEffects(const cache::SqlText& text);

// AnalyzeSessionEffects by the text's shape (cache::SqlText::shape, the
// key cache::EffectMemo keeps a text's writes under): what a text does to
// a session is read from its tokens' kinds and words, never from the value
// of a standalone integer, so texts that differ only in those (TPC-B's
// statements, from one transaction to the next) share one analysis; ~1.3k
// instructions a statement, two lexical passes and three word searches,
// become a look-up under a key the write memo computes anyway. One per
// Endpoint (Endpoint::Impl), confined to its executor; no catalog state
// goes in, so nothing but its size empties it.
class SessionEffectsMemo {
 public:
  static constexpr std::size_t kCapacity = 4096;
  SessionEffects Of(const cache::SqlText& text);
  std::size_t size() const { return map_.size(); }
  std::uint64_t hits() const { return hits_; }

 private:
  absl::flat_hash_map<std::string, SessionEffects, cache::StringHash, cache::StringEq> map_;
  std::uint64_t hits_ = 0;
};

// The reasons a session is pinned; only ever grows (until Clear) while the
// session holds the connection.
class PinSet {
 public:
  // Adds `reason`; true if it was not there yet.
  bool Add(PinReason reason);
  void Clear() { bits_ = 0; }
  bool empty() const { return bits_ == 0; }
  bool Has(PinReason reason) const { return (bits_ & Bit(reason)) != 0; }
  // The first reason present (in enum order), kNone if empty: the value for
  // ReleaseInputs::pin.
  PinReason First() const;

 private:
  static std::uint32_t Bit(PinReason reason) { return 1u << static_cast<unsigned>(reason); }
  std::uint32_t bits_ = 0;
};

// A session's settings bookkeeping: what it wants (`desired`), whether a
// capture is owed, and which placeholder names it has touched. Also
// remembers the effects of the client's named prepared statements, so that a
// later Bind of "SET ..." prepared earlier counts too.
// One Endpoint's startup setting maps, each kept once however many sessions
// start with it (apps mostly send the same few parameters). Confined to the
// Endpoint's executor; entries of maps no session holds any more are pruned
// as the table grows.
class StartupSettingsTable {
 public:
  std::shared_ptr<const SettingMap> Intern(SettingMap settings);
  std::size_t size() const { return maps_.size(); }

 private:
  InternTable<SettingMap> maps_;  // by content (name and value, length-prefixed)
};

class SessionSettings {
 public:
  SessionSettings() : startup_(std::make_shared<const SettingMap>()) {}
  // Startup settings from the hello; application_name is '' when the hello
  // has none (the origin login's own name must not show through). With
  // `table`, the map is shared with the Endpoint's other sessions that
  // start with the same settings.
  explicit SessionSettings(const std::vector<std::pair<std::string, std::string>>& hello_parameters,
                           StartupSettingsTable* table = nullptr);

  const SettingMap& startup() const { return *startup_; }
  // What every connection the session borrows must carry.
  const SettingMap& desired() const { return desired_is_startup_ ? *startup_ : changed_->desired; }
  // A unit of work may have changed settings; capture them at the next 'I'.
  bool capture_owed() const { return capture_owed_; }
  void MarkCaptureOwed() { capture_owed_ = true; }
  // A ReadyForQuery 'I' came while a capture was owed: the change is
  // committed on the connection, and nothing but a capture (or closing the
  // connection) accounts for it; a ROLLBACK would not undo it.
  void NoteIdleReady() { committed_uncaptured_ = committed_uncaptured_ || capture_owed_; }
  bool committed_uncaptured() const { return committed_uncaptured_; }

  // Notes a frontend message about to reach the origin (only 'Q', 'P', 'B'
  // and 'C' matter) and returns what it may do. Statement names are the
  // client's own. `text`: the Query's / Parse's text as the session decoded
  // it once (its analysis shared with the other passes), or null to decode
  // it here.
  // `memo`: the Endpoint's analyses by shape, asked instead of analysing
  // the text anew (null: analysed here).
  SessionEffects NoteFrontend(char tag, std::string_view payload, const cache::SqlText* text = nullptr,
                              SessionEffectsMemo* memo = nullptr);

  std::string CaptureQuery() const { return BuildCaptureQuery(changed_ ? changed_->custom_names : std::set<std::string>{}); }
  // Stores a capture: `captured` is what the connection now carries.
  void OnCaptured(const SettingMap& captured);
  // Counts captures: changes whenever desired() has been re-read from a
  // connection (the query cache keys by desired() and checks that a
  // settings change it saw forwarded was followed by a capture).
  std::uint64_t captures() const { return captures_; }
  // What a new session made from the same hello would hold: its startup
  // settings (captures that found them unchanged, as after any statement
  // that calls a function, leave them so), nothing owed, no placeholder
  // name or statement noted (SessionCore::Releasable).
  bool AsStarted() const {
    return desired_is_startup_ && !capture_owed_ &&
           (!changed_ || (changed_->custom_names.empty() && changed_->statements.empty()));
  }

 private:
  void Absorb(const SessionEffects& effects);

  // What only a session that changed something has, made on first use:
  // most sessions keep their startup settings and name no placeholder.
  struct Changed {
    SettingMap desired;  // desired() unless desired_is_startup_ (then empty)
    std::set<std::string> custom_names;
    std::unordered_map<std::string, SessionEffects> statements;  // named statements with effects
  };
  Changed& changed() {
    if (!changed_) changed_ = std::make_unique<Changed>();
    return *changed_;
  }

  std::shared_ptr<const SettingMap> startup_;  // never null
  bool desired_is_startup_ = true;
  std::unique_ptr<Changed> changed_;
  bool capture_owed_ = false;
  bool committed_uncaptured_ = false;  // NoteIdleReady
  std::uint64_t captures_ = 0;
};

}  // namespace hyperpool::endpoint
