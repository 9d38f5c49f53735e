// What keys a Client session's cached results and statement metadata
// (docs/architecture.md, "Query cache" > "Client tier"): its startup
// fingerprint plus, in order, the texts of its own plain SET/RESETs of
// ordinary settings that surely last. Sans-I/O: the session reports each
// Query/Parse text it forwards and gets a decision back.
#ifndef HYPERPOOL_CLIENT_SESSION_KEY_H_
#define HYPERPOOL_CLIENT_SESSION_KEY_H_

#include <cstddef>
#include <memory>
#include <string>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/tier.h"

namespace hyperpool::client {

class SessionKey {
 public:
  // Shares one copy of a key among the sessions that make the same one
  // (ClientCore::Config::intern_key); null: each keeps its own.
  using Interner = std::function<std::shared_ptr<const std::string>(std::string)>;
  // From the startup parameters (cache::HelloFingerprint).
  void Start(const std::vector<std::pair<std::string, std::string>>& params) { Start({}, params); }
  // The same, for a session of `database` (keys of different databases
  // never match: one Client may serve several).
  void Start(std::string_view database, const std::vector<std::pair<std::string, std::string>>& params,
             const Interner& intern = nullptr);

  // A Query or Parse text the session forwards, classified (`fx`).
  // `lasts`: the statement is its own implicit transaction, sent with
  // nothing outstanding outside a transaction block (StatementLasts), so
  // whatever it sets stays set (or fails alike for every session).
  // Returns true when fingerprint() changed.
  bool Note(std::string_view sql, const cache::StatementEffects& fx, bool lasts);
  // A FunctionCall or anything else a key cannot describe.
  void Invalidate() { changed_ = true; }

  const std::string& fingerprint() const {
    static const std::string kNone;
    return sets_ ? sets_->with_sets : base_ ? *base_ : kNone;
  }
  // Keys may be built for the session (cache and statement metadata).
  bool keyable() const { return !unsupported_ && !changed_; }

 private:
  static constexpr size_t kMaxSets = 4096;
  // The database and startup parameters' part: the same for most of a
  // Client's sessions, so shared (an idle session holds a pointer).
  std::shared_ptr<const std::string> base_;
  // Made at the session's first SET that counts (most sessions send none).
  struct Sets {
    std::string texts;
    std::string with_sets;  // base_ and the texts (fingerprint())
  };
  std::unique_ptr<Sets> sets_;
  bool unsupported_ = false;  // startup parameters a key cannot describe (search_path, role, options)
  bool changed_ = false;      // SET ROLE, DISCARD, DO, set_config(), ...: no keys for the rest of the session
};

// Whether a Query (`tag` 'Q') or Parse ('P', followed in the batch by
// `rest`) text is one statement that is its own unit: a Parse's frames
// up to the Sync are only Bind / Describe / Execute / Flush.
bool OwnUnit(char tag, const cache::SqlText& text, std::string_view rest);
inline bool OwnUnit(char tag, std::string_view sql, std::string_view rest) {
  const cache::SqlText text(sql);
  return OwnUnit(tag, text, rest);
}

}  // namespace hyperpool::client

#endif  // HYPERPOOL_CLIENT_SESSION_KEY_H_
