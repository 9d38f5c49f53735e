// The query cache's write tracking of what a session forwards
// (endpoint_cache.h, SessionCache::OnForward): the effect of each text
// (writes, catalog changes, session state), the statements and portals of
// the extended protocol, and the invalidations they cause.
#include <algorithm>
#include <string>
#include <string_view>

#include "endpoint/endpoint_cache.h"
#include "protocol/codec.h"

namespace hyperpool::endpoint {

SessionCache::Effect SessionCache::EffectOf(const cache::SqlText& text, bool apply_settings) {
  Effect e;
  if (text.simple_read()) return e;  // one SELECT calling no function: no state change, no write
  // A session whose names resolve as the catalog's: a text that changes no
  // session state has the effect the Endpoint's memo holds for its shape.
  const bool session_precise = !state_changed_ && !hello_unsupported_ && !pending_setting_change_;
  const bool scs = StandardConformingStrings();
  if (session_precise) {
    if (const cache::MemoEffect* m = cache_->FindEffect(text, scs)) {
      e.write = m->write;
      e.own_write = m->own_write;
      e.catalog = m->catalog;
      if (e.write.any()) cache_->WantCatalog();
      return e;
    }
  }
  const cache::SessionCacheSettings before = settings_;
  cache::StatementEffects fx = cache::ClassifyStatements(text, apply_settings ? &settings_ : nullptr);
  if (!(settings_ == before)) settings_set_ = true;
  e.changes_state = fx.changes_session_state;
  e.settings_only = fx.only_setting_changes;
  const bool precise = session_precise && !e.changes_state;
  e.write = cache::WriteEffectOf(text, cache_->Oracle(), precise, scs);
  if (e.write.any()) cache_->WantCatalog();
  const absl::StatusOr<cache::StatementAnalysis>& a = text.analysis();
  // The session's own write (no stale-if-error for it after): anything the
  // write tracker invalidates for, except a plain read it judged
  // conservatively (no catalog yet) -- a SELECT that calls no function.
  bool plain_read = a.ok() && a->functions.empty();
  if (a.ok()) {
    for (cache::StatementKind k : a->kinds) {
      using K = cache::StatementKind;
      if (k != K::kSelect && k != K::kEmpty && k != K::kShow && k != K::kTransaction && k != K::kCopyTo) {
        plain_read = false;
      }
    }
  }
  e.own_write = e.write.any() && !plain_read;
  // What it may change in the catalog the decisions are made with: the
  // names its parse tree holds, or anything when the text is not judged.
  const bool judged = a.ok() && text.sql().size() <= (8u << 20) &&
                      (scs || text.sql().find('\\') == std::string_view::npos);
  e.catalog = judged ? cache::CatalogChange::Of(*a) : cache::CatalogChange::All();
  if (session_precise && !fx.changes_session_state && !fx.only_setting_changes && !fx.only_cache_settings) {
    cache_->KeepEffect(cache::MemoEffect{e.write, e.own_write, e.catalog});
  }
  return e;
}

void SessionCache::NoteRun(const Effect& e, UnitState& u) {
  if (e.catalog.any()) cache_->OpenCatalogChange(e.catalog);
  NoteStateChange(e);
  if (e.own_write) wrote_ = true;
  if (e.write.any()) {
    // A unit that starts inside a transaction block (the origin's latest
    // ReadyForQuery said so, and nothing is outstanding that could change
    // it) writes rows nobody else sees before its COMMIT, and this session
    // reads nothing from the tiers until the block ends (Intercept: only
    // when idle): `txn_written` invalidates at the commit point (the
    // ReadyForQuery 'I' that ends it; OnOriginFrame). DDL keeps its
    // invalidations at once (it drops the Clients' statement metadata).
    const bool rows_in_block = !e.write.all && !e.write.schema && u.pending.empty() &&
                               (last_status_ == 'T' || last_status_ == 'E');
    if (!rows_in_block) cache_->Invalidate(e.write, /*for_clients=*/false);
    u.txn_written.Merge(e.write);
  }
}

void SessionCache::OnForward(const protocol::Frame& frame, const cache::SqlText* text) {
  UnitState& u = U();
  switch (frame.tag) {
    case 'Q': {
      u.describe_window = DescribeWindow::kNone;
      if (stmts_) {
        // A simple Query destroys the unnamed statement and portal.
        stmts_->unnamed_known = false;
        stmts_->effects.erase(std::string());
        stmts_->portals.erase(std::string());
      }
      Effect e;
      if (text != nullptr) {  // decoded once by the session
        e = EffectOf(*text, /*apply_settings=*/true);
      } else if (auto q = protocol::DecodeQuery(frame.payload); q.ok()) {
        cache::SqlText own(q->query);
        e = EffectOf(own, /*apply_settings=*/true);
      } else {
        e.write.all = e.write.schema = true;
        e.catalog = cache::CatalogChange::All();
      }
      NoteRun(e, u);
      u.pending.push_back(std::move(e));
      break;
    }
    case 'P': {
      auto p = protocol::DecodeParse(frame.payload);
      if (!p.ok()) break;
      cache::SqlText own(text != nullptr ? std::string_view() : p->query);
      Statements& st = S();
      st.effects[std::string(p->statement)] = EffectOf(text != nullptr ? *text : own, /*apply_settings=*/true);
      RecordParse(*p);
      NoteDescribeWindow('P');
      if (p->statement.empty()) {
        st.unnamed_known = true;
        st.unnamed_text.sql = std::string(p->query);
        st.unnamed_text.types.assign(p->parameter_types.begin(), p->parameter_types.end());
      }
      break;
    }
    case 'D': {
      auto d = protocol::DecodeDescribe(frame.payload);
      const bool statement = d.ok() && d->kind == protocol::ObjectKind::kStatement;
      NoteDescribeWindow(statement ? 'D' : 'x');
      if (statement && u.describe_window == DescribeWindow::kOpen) {
        ++u.window_describes;
        u.window_describes_unnamed = d->name.empty();
      }
      break;
    }
    case 'H':
      break;  // a Flush keeps the window open
    case 'B': {
      u.describe_window = DescribeWindow::kNone;
      // The names are all this needs: read them without decoding the rest.
      std::string_view rest = frame.payload;
      std::string_view portal;
      std::string_view statement;
      if (protocol::TakeCString(rest, portal) && protocol::TakeCString(rest, statement)) {
        S().portals[std::string(portal)] = std::string(statement);
      }
      break;
    }
    case 'E': {
      u.describe_window = DescribeWindow::kNone;
      auto x = protocol::DecodeExecute(frame.payload);
      Effect e;
      e.write.all = e.write.schema = true;  // unknown portal or statement: anything may have run
      e.catalog = cache::CatalogChange::All();
      if (x.ok() && stmts_) {
        auto portal = stmts_->portals.find(std::string(x->portal));
        if (portal != stmts_->portals.end()) {
          auto st = stmts_->effects.find(portal->second);
          if (st != stmts_->effects.end()) e = st->second;
        }
      }
      NoteRun(e, u);
      u.building.Merge(e);
      break;
    }
    case 'C': {
      u.describe_window = DescribeWindow::kNone;
      auto c = protocol::DecodeClose(frame.payload);
      if (c.ok() && stmts_) {
        if (c->kind == protocol::ObjectKind::kStatement) {
          stmts_->effects.erase(std::string(c->name));
          stmts_->texts.erase(std::string(c->name));
        } else {
          stmts_->portals.erase(std::string(c->name));
        }
      }
      break;
    }
    case 'F': {
      u.describe_window = DescribeWindow::kNone;
      Effect e;
      e.write.all = e.write.schema = true;  // a FunctionCall may run anything
      e.catalog = cache::CatalogChange::All();
      e.changes_state = true;
      e.own_write = true;
      NoteRun(e, u);
      u.pending.push_back(std::move(e));
      break;
    }
    case 'S':
      u.describe_window = DescribeWindow::kNone;
      u.pending.push_back(std::move(u.building));
      u.building = Effect{};
      break;
    default:
      break;
  }
}

void SessionCache::OnSkipped(std::size_t units) {
  if (!unit_) return;
  // (Their effects were noted when they went: invalidating for a write that
  // never ran costs a miss, never a stale row.) Their catalog changes were
  // opened when they went: settled with the transaction, as a completed
  // one's, else the overlay would hold them open for good.
  for (; units > 0 && !unit_->pending.empty(); --units) {
    unit_->txn_catalog.Merge(unit_->pending.front().catalog);
    unit_->pending.pop_front();
  }
}

void SessionCache::RecordParse(const protocol::Parse& p) {
  if (p.statement.empty()) return;
  // Re-parsing a name that exists with another text fails at the origin
  // (42P05) or redefines it through the statement registry: either way,
  // which text the name runs is not certain here until it is closed.
  auto [it, inserted] = S().texts.try_emplace(std::string(p.statement));
  if (inserted) {
    it->second.sql = std::string(p.query);
    it->second.types.assign(p.parameter_types.begin(), p.parameter_types.end());
  } else if (it->second.sql != p.query ||
             !std::equal(it->second.types.begin(), it->second.types.end(), p.parameter_types.begin(),
                         p.parameter_types.end())) {
    it->second.poisoned = true;
  }
}

}  // namespace hyperpool::endpoint
