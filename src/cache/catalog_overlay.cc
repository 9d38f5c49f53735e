#include "cache/catalog_overlay.h"

#include <algorithm>

namespace hyperpool::cache {

void CatalogChange::Merge(const CatalogChange& other) {
  all += other.all;
  cascade += other.cascade;
  names.insert(names.end(), other.names.begin(), other.names.end());
}

CatalogChange CatalogChange::Of(const StatementAnalysis& a) {
  CatalogChange c;
  c.all = a.catalog_unbounded ? 1 : 0;
  if (c.all == 0) {
    c.names = a.catalog_names;
    c.cascade = a.catalog_cascade ? 1 : 0;
  }
  return c;
}

void CatalogOverlay::Open(const CatalogChange& change) {
  if (change.any()) ++version_;
  if (change.all > 0) OpenEntry(all_, change.all);
  if (change.cascade > 0) OpenEntry(cascade_, change.cascade);
  for (const std::string& n : change.names) OpenEntry(names_[n]);
}

void CatalogOverlay::Settle(const CatalogChange& change) {
  if (change.any()) ++version_;
  if (change.all > 0) SettleEntry(all_, change.all);
  if (change.cascade > 0) SettleEntry(cascade_, change.cascade);
  for (const std::string& n : change.names) {
    auto it = names_.find(n);
    if (it != names_.end()) SettleEntry(it->second);
  }
}

void CatalogOverlay::ReadLoaded(uint64_t token) {
  ++version_;
  if (Clearable(all_, token)) all_ = Entry{};
  if (Clearable(cascade_, token)) cascade_ = Entry{};
  absl::erase_if(names_, [token](const auto& kv) { return Clearable(kv.second, token); });
}

bool CatalogOverlay::Changed(std::string_view name) const {
  return !names_.empty() && names_.contains(absl::string_view(name.data(), name.size()));
}

std::optional<Volatility> OverlayOracle::FunctionVolatility(const QualifiedName& n) const {
  if (overlay_->Changed(n.name)) return std::nullopt;
  return base_->FunctionVolatility(n);
}

std::optional<RelationInfo> OverlayOracle::Relation(const QualifiedName& n) const {
  if (overlay_->Changed(n.name)) return std::nullopt;
  if (overlay_->cascade_pending() && n.schema.empty() && base_->Shadowed(n.name)) return std::nullopt;
  std::optional<RelationInfo> info = base_->Relation(n);
  if (!info) return info;
  // A partition's root, a view's base tables and whatever a view's
  // definition reads or calls.
  for (const std::string& t : info->base_tables) {
    const size_t dot = t.rfind('.');
    if (overlay_->Changed(dot == std::string::npos ? std::string_view(t) : std::string_view(t).substr(dot + 1))) {
      return std::nullopt;
    }
  }
  for (const std::string& d : info->depends_on) {
    if (overlay_->Changed(d)) return std::nullopt;
  }
  return info;
}

bool OverlayOracle::IsBuiltinFunction(const QualifiedName& n) const {
  return !overlay_->Changed(n.name) && base_->IsBuiltinFunction(n);
}

std::optional<Volatility> OverlayOracle::OperatorVolatility(const QualifiedName& n) const {
  if (overlay_->Changed(n.name)) return std::nullopt;
  return base_->OperatorVolatility(n);
}

std::optional<Volatility> OverlayOracle::TypeVolatility(const QualifiedName& n) const {
  if (overlay_->Changed(n.name)) return std::nullopt;
  if (overlay_->cascade_pending() && n.schema.empty() && base_->Shadowed(n.name)) return std::nullopt;
  return base_->TypeVolatility(n);
}

std::optional<Volatility> OverlayOracle::AttributeCallVolatility(std::string_view name) const {
  return base_->AttributeCallVolatility(name);
}

bool OverlayOracle::Unsettled(std::string_view name) const {
  return overlay_->Changed(name) || base_->Unsettled(name);
}

bool OverlayOracle::Shadowed(std::string_view name) const { return base_->Shadowed(name); }

}  // namespace hyperpool::cache
