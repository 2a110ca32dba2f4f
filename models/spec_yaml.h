// Internal to models/spec*.cpp: typed, located reads of a yaml-cpp tree. Every failure is a te::InputError that
// starts with `FILE:LINE:COL` (or the `--set` argument that put the node there) and the field path.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "models/spec.h"

namespace te::spec_detail {

class Ctx {
 public:
  Ctx(std::string source, std::vector<SpecOverride> overrides)
      : source_(std::move(source)), overrides_(std::move(overrides)) {}
  const std::string& source() const { return source_; }
  // "--set a.b=1" when an override created `path` (or a parent of it), else "FILE:LINE:COL" of `node`.
  std::string location(const YAML::Node& node, const std::string& path) const;
  bool overridden(const std::string& path) const;
  [[noreturn]] void fail(const YAML::Node& node, const std::string& path, const std::string& what,
                         const std::string& hint) const;

 private:
  std::string source_;
  std::vector<SpecOverride> overrides_;
};

// "a map", "a list", "null", "'text'" — how a node is described in "expected X, got Y".
std::string describe(const YAML::Node& n);

// The keys of one YAML map: rejects non-maps, duplicate keys and unknown keys (with a did-you-mean suggestion).
class Fields {
 public:
  // A null node (`key:` with nothing) is accepted as an empty map when `null_ok`.
  Fields(const Ctx& ctx, const YAML::Node& node, std::string path, std::vector<std::string> allowed,
         bool null_ok = true);
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  YAML::Node get(const std::string& key) const;  // only after has()
  std::string sub(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const YAML::Node& node() const { return node_; }
  const std::string& path() const { return path_; }
  // The first key in file order (layer items are one-key maps).
  const std::vector<std::string>& keys() const { return order_; }
  // Requires `key`; the error points at this map.
  YAML::Node require(const std::string& key, const std::string& hint) const;

 private:
  const Ctx& ctx_;
  YAML::Node node_;
  std::string path_;
  std::map<std::string, YAML::Node> values_;
  std::vector<std::string> order_;
};

int64_t read_int(const Ctx& c, const YAML::Node& n, const std::string& path, int64_t min, int64_t max,
                 const std::string& hint);
double read_float(const Ctx& c, const YAML::Node& n, const std::string& path);
bool read_bool(const Ctx& c, const YAML::Node& n, const std::string& path);
std::string read_string(const Ctx& c, const YAML::Node& n, const std::string& path);

// A value from a fixed list of names, with a did-you-mean suggestion.
[[noreturn]] void fail_enum(const Ctx& c, const YAML::Node& n, const std::string& path, const std::string& got,
                            const std::vector<std::string>& names);
template <class E>
E read_enum(const Ctx& c, const YAML::Node& n, const std::string& path,
            const std::vector<std::pair<std::string, E>>& table) {
  const std::string s = read_string(c, n, path);
  std::vector<std::string> names;
  for (const auto& [name, value] : table) {
    if (name == s) return value;
    names.push_back(name);
  }
  fail_enum(c, n, path, s, names);
}

// Applies --set overrides to the tree (creating missing maps along the path).
void apply_overrides(YAML::Node& root, const std::vector<SpecOverride>& overrides);

}  // namespace te::spec_detail
