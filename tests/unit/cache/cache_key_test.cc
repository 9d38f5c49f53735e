#include "cache/cache_key.h"

#include <set>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

namespace hyperpool::cache {
namespace {

struct Owned {
  std::string database = "db";
  std::string role = "alice";
  SessionSettings settings = {{"search_path", "public"}, {"TimeZone", "UTC"}};
  bool settings_null = false;
  std::string sql = "SELECT $1";
  std::vector<uint32_t> types = {23};
  std::vector<std::optional<std::string>> values = {std::string("1")};
  std::vector<int16_t> value_formats = {0};
  std::vector<int16_t> result_formats = {};
  ProtocolForm form = ProtocolForm::kExtended;

  std::string Key() const {
    std::vector<ParamValue> params;
    for (size_t i = 0; i < values.size(); ++i) {
      ParamValue p;
      if (values[i]) p.value = std::string_view(*values[i]);
      p.format = value_formats[i];
      params.push_back(p);
    }
    CacheKeyInput in;
    in.database = database;
    in.role = role;
    in.settings = settings_null ? nullptr : &settings;
    in.sql = sql;
    in.param_types = types;
    in.params = params;
    in.result_formats = result_formats;
    in.form = form;
    return BuildCacheKey(in);
  }
};

TEST_CASE("each component changes the key") {
  using Mut = void (*)(Owned&);
  auto [name, mut] = GENERATE(table<std::string, Mut>({
      {"database", [](Owned& o) { o.database = "db2"; }},
      {"role", [](Owned& o) { o.role = "bob"; }},
      {"search_path", [](Owned& o) { o.settings["search_path"] = "app"; }},
      {"timezone (mixed case)", [](Owned& o) { o.settings["TimeZone"] = "Europe/Paris"; }},
      {"datestyle added", [](Owned& o) { o.settings["datestyle"] = "ISO, DMY"; }},
      {"setting removed", [](Owned& o) { o.settings.erase("search_path"); }},
      {"setting empty vs unset", [](Owned& o) { o.settings["bytea_output"] = ""; }},
      {"irrelevant setting ignored?", [](Owned& o) { o.settings["lc_time"] = "C"; }},
      {"sql", [](Owned& o) { o.sql = "SELECT $1 "; }},
      {"param type", [](Owned& o) { o.types = {20}; }},
      {"param type count", [](Owned& o) { o.types = {}; }},
      {"param value", [](Owned& o) { o.values = {std::string("2")}; }},
      {"param null vs empty", [](Owned& o) { o.values = {std::string()}; }},
      {"param null", [](Owned& o) { o.values = {std::nullopt}; }},
      {"param format", [](Owned& o) { o.value_formats = {1}; }},
      {"result formats", [](Owned& o) { o.result_formats = {1}; }},
      {"protocol form", [](Owned& o) { o.form = ProtocolForm::kSimple; }},
  }));
  Owned base;
  Owned changed;
  mut(changed);
  INFO(name);
  CHECK(base.Key() != changed.Key());
  CHECK(base.Key() == Owned().Key());
}

TEST_CASE("settings outside the result-affecting list do not change the key") {
  Owned a, b;
  b.settings["application_name"] = "x";
  CHECK(a.Key() == b.Key());
}

TEST_CASE("unset settings map equals an empty one") {
  Owned a, b;
  a.settings.clear();
  b.settings_null = true;
  CHECK(a.Key() == b.Key());
}

TEST_CASE("no collisions by moving bytes between adjacent components") {
  // Pairs of inputs whose naive concatenations are equal.
  std::vector<Owned> v(8);
  v[0].database = "ab"; v[0].role = "c";
  v[1].database = "a"; v[1].role = "bc";
  v[2].sql = "SELECT 1"; v[2].values = {std::string("x")};
  v[3].sql = "SELECT 1x"; v[3].values = {std::string("")};
  v[4].values = {std::string("ab"), std::string("c")}; v[4].value_formats = {0, 0};
  v[5].values = {std::string("a"), std::string("bc")}; v[5].value_formats = {0, 0};
  v[6].types = {23, 23}; v[6].values = {std::string("1")};
  v[7].types = {23}; v[7].values = {std::string("1"), std::nullopt}; v[7].value_formats = {0, 0};
  std::set<std::string> keys;
  for (const Owned& o : v) keys.insert(o.Key());
  CHECK(keys.size() == v.size());
}

TEST_CASE("AppendCacheKey appends") {
  Owned o;
  std::string out = "prefix";
  CacheKeyInput in;
  in.sql = "x";
  AppendCacheKey(in, out);
  CHECK(out.starts_with("prefixhpk1"));
}

}  // namespace
}  // namespace hyperpool::cache
