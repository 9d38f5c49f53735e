// The cache hit path: build the key, look it up in the memory cache, replay
// a 10-row result into a reused output buffer.
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <vector>

#include "cache/cache_key.h"
#include "cache/memory_cache.h"
#include "cache/result_store.h"
#include "protocol/codec.h"

namespace {

using namespace hyperpool;
using namespace std::chrono_literals;

std::string TenRowResult() {
  protocol::RowDescription rd;
  rd.fields.push_back(protocol::FieldDescription{"id", 16384, 1, 23, 4, -1, 0});
  rd.fields.push_back(protocol::FieldDescription{"name", 16384, 2, 25, -1, -1, 0});
  rd.fields.push_back(protocol::FieldDescription{"email", 16384, 3, 25, -1, -1, 0});
  std::string out;
  protocol::Encode(rd, out);
  for (int i = 0; i < 10; ++i) {
    std::string id = std::to_string(i), name = "user" + id, email = name + "@example.com";
    std::vector<protocol::NullableValue> cols = {id, name, email};
    protocol::EncodeDataRow(cols, out);
  }
  protocol::Encode(protocol::CommandComplete{"SELECT 10"}, out);
  return out;
}

void BM_CacheHit(benchmark::State& state) {
  cache::SessionSettings settings = {{"search_path", "\"$user\", public"},
                                     {"TimeZone", "UTC"},
                                     {"DateStyle", "ISO, MDY"},
                                     {"client_encoding", "UTF8"},
                                     {"standard_conforming_strings", "on"}};
  std::vector<uint32_t> types = {23};
  std::vector<cache::ParamValue> params = {cache::ParamValue{"42", 0}};
  cache::CacheKeyInput in;
  in.database = "app";
  in.role = "app_user";
  in.settings = &settings;
  in.sql = "SELECT id, name, email FROM users WHERE org_id = $1 ORDER BY id LIMIT 10";
  in.param_types = types;
  in.params = params;
  in.form = cache::ProtocolForm::kExtended;

  cache::MemoryCache mc(MemoryCacheLimits{});
  std::string key = cache::BuildCacheKey(in);
  mc.Lookup(key, nullptr);
  CacheEntry e;
  e.messages = TenRowResult();
  e.expires = std::chrono::steady_clock::now() + 3600s;
  e.stale_until = e.expires + 15s;
  e.database = "app";
  e.tables = {"public.users"};
  mc.Complete(key, std::move(e));

  cache::ReplayRequest req{cache::ProtocolForm::kExtended, false, true,
                           cache::ReplayRequest::Describe::kPortal, true, true};
  std::string k, out;
  for (auto _ : state) {
    k.clear();
    cache::AppendCacheKey(in, k);
    CacheLookup l = mc.Lookup(k, nullptr);
    if (l.status != CacheLookupStatus::kHit) state.SkipWithError("not a hit");
    out.clear();
    (void)cache::AppendReplay(l.entry->messages, req, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * out.size()));
}
BENCHMARK(BM_CacheHit);

}  // namespace

BENCHMARK_MAIN();
