#include "client/statement_metadata.h"

#include "cache/sql_analysis.h"

namespace hyperpool::client {
namespace {

void PutU32(std::string& out, uint32_t v) {
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<char>(v >> (8 * i)));
}

size_t SizeOf(const std::string& key, const StatementMetadata& m) {
  return key.size() + m.parameter_description.size() + m.row_description.size() + 64;
}

}  // namespace

std::string StatementMetadataKey(std::string_view database, std::string_view hello_fingerprint,
                                 const std::vector<uint32_t>& param_types, std::string_view sql) {
  std::string k("hpm1");
  PutU32(k, static_cast<uint32_t>(database.size()));
  k.append(database);
  PutU32(k, static_cast<uint32_t>(hello_fingerprint.size()));
  k.append(hello_fingerprint);
  PutU32(k, static_cast<uint32_t>(param_types.size()));
  for (uint32_t t : param_types) PutU32(k, t);
  k.append(sql);
  return k;
}

bool IsDeferrable(std::string_view sql, std::string_view row_description) {
  if (!row_description.empty() && row_description[0] == 'n') return true;  // NoData stays NoData
  const absl::StatusOr<cache::StatementAnalysis> a = cache::AnalyzeStatement(sql);
  if (!a.ok() || a->statement_count != 1) return false;
  if (a->kind != cache::StatementKind::kSelect && a->kind != cache::StatementKind::kShow) return false;
  return !a->has_row_locks && !a->has_data_modifying_cte && !a->has_select_into;
}

StatementMetadataStore::StatementMetadataStore(size_t max_entries, size_t max_bytes)
    : max_entries_(max_entries), max_bytes_(max_bytes) {}

std::shared_ptr<const StatementMetadata> StatementMetadataStore::Get(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second;
}

uint64_t StatementMetadataStore::generation() {
  std::lock_guard lock(mu_);
  return generation_;
}

void StatementMetadataStore::Put(const std::string& key, StatementMetadata metadata, uint64_t generation) {
  std::lock_guard lock(mu_);
  if (generation != generation_) return;  // invalidated since the Describe was sent
  const size_t size = SizeOf(key, metadata);
  if (size > max_bytes_ / 4) return;
  auto [it, inserted] = entries_.try_emplace(key);
  if (!inserted) bytes_ -= SizeOf(key, *it->second);
  it->second = std::make_shared<const StatementMetadata>(std::move(metadata));
  bytes_ += size;
  if (inserted) order_.push_back(key);
  ++stats_.stores;
  while ((entries_.size() > max_entries_ || bytes_ > max_bytes_) && !order_.empty()) {
    auto victim = entries_.find(order_.front());
    if (victim != entries_.end()) {
      bytes_ -= SizeOf(victim->first, *victim->second);
      entries_.erase(victim);
    }
    order_.pop_front();
  }
  // Dropped keys linger in order_; keep it bounded too.
  if (order_.size() > 2 * max_entries_ + 16) {
    std::deque<std::string> live;
    for (std::string& k : order_) {
      if (entries_.count(k) != 0) live.push_back(std::move(k));
    }
    order_ = std::move(live);
  }
}

void StatementMetadataStore::Drop(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  bytes_ -= SizeOf(it->first, *it->second);
  entries_.erase(it);
}

void StatementMetadataStore::InvalidateAll() {
  std::lock_guard lock(mu_);
  ++generation_;
  ++stats_.invalidations;
  entries_.clear();
  order_.clear();
  bytes_ = 0;
}

void StatementMetadataStore::NoteLocalAnswer() {
  std::lock_guard lock(mu_);
  ++stats_.local_answers;
}

void StatementMetadataStore::NoteMismatch() {
  std::lock_guard lock(mu_);
  ++stats_.mismatches;
}

void StatementMetadataStore::NoteDeferredFailure() {
  std::lock_guard lock(mu_);
  ++stats_.deferred_failures;
}

StatementMetadataStats StatementMetadataStore::Stats() {
  std::lock_guard lock(mu_);
  StatementMetadataStats s = stats_;
  s.entries = entries_.size();
  return s;
}

}  // namespace hyperpool::client
