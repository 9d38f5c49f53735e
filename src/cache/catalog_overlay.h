// What has changed in the origin's catalog since the Endpoint last read it
// (docs/architecture.md, "Query cache", "Catalog reads"): the names DDL sent
// through hyperpool touched, and whether anything beyond names may have
// changed. A decision that meets none of them is made on the catalog read
// before the DDL; one that meets any of them finds its name unknown (and the
// Endpoint reads the catalog again).
//
// A change is opened when its statement is sent and settled when the
// transaction that ran it ends (committed or not): until then a catalog read
// may not see it, so no read clears it. A read clears what was settled
// before it began. Pure and single-threaded (the Endpoint's executor).
#ifndef HYPERPOOL_CACHE_CATALOG_OVERLAY_H_
#define HYPERPOOL_CACHE_CATALOG_OVERLAY_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "cache/cacheability.h"
#include "cache/sql_analysis.h"

namespace hyperpool::cache {

// One statement's (or transaction's) possible catalog change.
// Merged changes keep every part's count (a transaction's two DO blocks are
// two opens of `all`): Open and Settle pair by count, so a merge that kept
// one would leave the overlay unknown for good, and the Endpoint reading the
// catalog again after every read.
struct CatalogChange {
  uint32_t all = 0;                // anything (no name bounds it): how many such changes
  std::vector<std::string> names;  // unqualified names; repeats kept
  // Dependents of the names dropped too (DROP ... CASCADE): an unqualified
  // relation or type name held by several schemas may resolve elsewhere.
  // How many such changes.
  uint32_t cascade = 0;
  bool any() const { return all > 0 || cascade > 0 || !names.empty(); }
  void Merge(const CatalogChange& other);
  // The change `analysis`'s statements may make (catalog_names,
  // catalog_unbounded).
  static CatalogChange Of(const StatementAnalysis& analysis);
  static CatalogChange All() { return CatalogChange{1, {}, 0}; }
};

class CatalogOverlay {
 public:
  // A statement that may make `change` was sent.
  void Open(const CatalogChange& change);
  // The transaction that ran `change` (opened before) ended.
  void Settle(const CatalogChange& change);
  // A change already committed (the WAL feed saw it).
  void Committed(const CatalogChange& change) {
    Open(change);
    Settle(change);
  }
  // A catalog read is about to be sent: its token.
  uint64_t ReadStarting() const { return epoch_; }
  // The read that started at `token` was loaded: what was settled before it
  // is in it.
  void ReadLoaded(uint64_t token);

  // Nothing may be decided on the loaded catalog (an unbounded change).
  bool all_unknown() const { return Pending(all_); }
  // A cascade's dependents are unknown: shadowed names are (OverlayOracle).
  bool cascade_pending() const { return Pending(cascade_); }
  bool empty() const { return !all_unknown() && !cascade_pending() && names_.empty(); }
  bool Changed(std::string_view name) const;
  size_t size() const { return names_.size(); }
  // Changes with every Open, Settle and ReadLoaded that changes anything:
  // what OverlayOracle answers may differ only across a change of it.
  uint64_t version() const { return version_; }

 private:
  struct Entry {
    uint32_t open = 0;     // statements sent whose transactions have not ended
    uint64_t settled = 0;  // the epoch of the last settle (0: none pending)
  };
  void OpenEntry(Entry& e, uint32_t count = 1) { e.open += count; }
  void SettleEntry(Entry& e, uint32_t count = 1) {
    e.open -= std::min(e.open, count);
    e.settled = ++epoch_;
  }
  static bool Clearable(const Entry& e, uint64_t token) { return e.open == 0 && e.settled <= token; }
  static bool Pending(const Entry& e) { return e.open > 0 || e.settled != 0; }

  uint64_t epoch_ = 0;
  uint64_t version_ = 0;
  Entry all_;
  Entry cascade_;
  absl::flat_hash_map<std::string, Entry> names_;
};

// `base` (the catalog as read) with every name `overlay` holds answered as
// unknown, and a view unknown when anything it depends on is. Both must
// outlive it.
class OverlayOracle final : public VolatilityOracle {
 public:
  OverlayOracle(const VolatilityOracle* base, const CatalogOverlay* overlay) : base_(base), overlay_(overlay) {}
  void set_base(const VolatilityOracle* base) { base_ = base; }

  std::optional<Volatility> FunctionVolatility(const QualifiedName& name) const override;
  std::optional<RelationInfo> Relation(const QualifiedName& name) const override;
  bool IsBuiltinFunction(const QualifiedName& name) const override;
  std::optional<Volatility> OperatorVolatility(const QualifiedName& name) const override;
  std::optional<Volatility> TypeVolatility(const QualifiedName& name) const override;
  std::optional<Volatility> AttributeCallVolatility(std::string_view name) const override;
  bool Unsettled(std::string_view name) const override;
  bool Shadowed(std::string_view name) const override;

 private:
  const VolatilityOracle* base_;
  const CatalogOverlay* overlay_;
};

}  // namespace hyperpool::cache

#endif  // HYPERPOOL_CACHE_CATALOG_OVERLAY_H_
