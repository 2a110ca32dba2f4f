#include "models/spec_yaml.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>

#include "engine/error.h"
#include "engine/printable.h"
#include "models/spec_suggest.h"

namespace te::spec_detail {
namespace {
bool path_within(const std::string& path, const std::string& prefix) {
  if (path.compare(0, prefix.size(), prefix) != 0) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '.' || path[prefix.size()] == '[';
}

// A value from the spec or --set as a message echoes it: escaped and cut (engine/printable.h).
std::string shorten(const std::string& s) { return printable(s); }

bool is_quoted(const YAML::Node& n) { return n.Tag() == "!"; }
}  // namespace

bool Ctx::overridden(const std::string& path) const {
  for (const auto& o : overrides_)
    if (path_within(path, o.path)) return true;
  return false;
}

std::string Ctx::location(const YAML::Node& node, const std::string& path) const {
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it)
    if (path_within(path, it->path)) return "--set " + printable(it->text);
  const YAML::Mark m = node.IsDefined() ? node.Mark() : YAML::Mark::null_mark();
  if (m.is_null()) return printable_path(source_);
  return printable_path(source_) + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

void Ctx::fail(const YAML::Node& node, const std::string& path, const std::string& what,
               const std::string& hint) const {
  TE_INPUT_ERROR(location(node, path) << ": " << (path.empty() ? "" : printable(path) + ": ") << what, hint);
}

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "null";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a map";
  return (is_quoted(n) ? "the string '" : "'") + shorten(n.Scalar()) + "'";
}

Fields::Fields(const Ctx& ctx, const YAML::Node& node, std::string path, std::vector<std::string> allowed,
               bool null_ok)
    : ctx_(ctx), node_(node), path_(std::move(path)) {
  if (null_ok && (!node.IsDefined() || node.IsNull())) return;
  if (!node.IsMap())
    ctx_.fail(node, path_, "expected a map with keys " + join_names(allowed, ", ") + ", got " + describe(node),
              "write it as `key: value` lines or `{key: value, ...}`");
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node key = it->first;
    if (!key.IsScalar())
      ctx_.fail(key, path_, "a key is " + describe(key) + ", expected a name", "keys are plain names");
    const std::string k = key.Scalar();
    const std::string p = sub(k);
    bool known = false;
    for (const auto& a : allowed) known = known || a == k;
    if (!known) {
      const std::string near = closest_name(k, allowed);
      ctx_.fail(key, p, "unknown key '" + shorten(k) + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?"),
                "keys allowed in " + (path_.empty() ? std::string("the top level") : path_) + ": " +
                    join_names(allowed, ", "));
    }
    if (values_.count(k))
      ctx_.fail(key, p, "key '" + shorten(k) + "' appears twice", "remove one of them (YAML would silently keep one)");
    values_.emplace(k, it->second);
    order_.push_back(k);
  }
}

YAML::Node Fields::get(const std::string& key) const { return values_.at(key); }

YAML::Node Fields::require(const std::string& key, const std::string& hint) const {
  if (!has(key)) ctx_.fail(node_, sub(key), "is required but missing", hint);
  return get(key);
}

int64_t read_int(const Ctx& c, const YAML::Node& n, const std::string& path, int64_t min, int64_t max,
                 const std::string& hint) {
  int64_t v = 0;
  bool ok = n.IsScalar() && !is_quoted(n);
  if (ok) {
    const std::string& s = n.Scalar();
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    ok = ec == std::errc() && end == s.data() + s.size() && !s.empty();
    if (!ok && ec == std::errc::result_out_of_range)
      c.fail(n, path, "integer " + shorten(s) + " is out of range (must be " + std::to_string(min) + ".." +
                          std::to_string(max) + ")",
             hint);
  }
  if (!ok) c.fail(n, path, "expected an integer, got " + describe(n), hint);
  if (v < min)
    c.fail(n, path,
           std::string(min == 1 ? "must be a positive integer" : "must be ≥ " + std::to_string(min)) + ", got " +
               std::to_string(v),
           hint);
  if (v > max) c.fail(n, path, "must be at most " + std::to_string(max) + ", got " + std::to_string(v), hint);
  return v;
}

double read_float(const Ctx& c, const YAML::Node& n, const std::string& path) {
  bool ok = n.IsScalar() && !is_quoted(n) && !n.Scalar().empty();
  double v = 0;
  if (ok) {
    const std::string& s = n.Scalar();
    char* end = nullptr;
    v = std::strtod(s.c_str(), &end);
    ok = end == s.c_str() + s.size() && s.find_first_of("xXnN") == std::string::npos;  // no hex, inf, nan
  }
  if (!ok) c.fail(n, path, "expected a number, got " + describe(n), "write a decimal number such as 1.0e-5");
  if (!std::isfinite(v)) c.fail(n, path, "must be finite, got " + shorten(n.Scalar()), "write a finite number");
  return v;
}

bool read_bool(const Ctx& c, const YAML::Node& n, const std::string& path) {
  if (n.IsScalar() && !is_quoted(n)) {
    std::string s = n.Scalar();
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
  }
  c.fail(n, path, "expected true or false, got " + describe(n), "write true or false");
}

std::string read_string(const Ctx& c, const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) c.fail(n, path, "expected a name, got " + describe(n), "write a plain value");
  return n.Scalar();
}

void fail_enum(const Ctx& c, const YAML::Node& n, const std::string& path, const std::string& got,
               const std::vector<std::string>& names) {
  const std::string near = closest_name(got, names);
  c.fail(n, path,
         "'" + shorten(got) + "' is not one of " + join_names(names) +
             (near.empty() ? "" : "; did you mean '" + near + "'?"),
         "use one of: " + join_names(names, ", "));
}

// ---- --set --------------------------------------------------------------------------------------------------------

namespace {
struct Step {
  std::string key;  // empty for an index
  size_t index = 0;
};

std::vector<Step> split_path(const SpecOverride& o) {
  std::vector<Step> steps;
  const std::string& p = o.path;
  auto bad = [&](const std::string& why) {
    TE_INPUT_ERROR("--set " << printable(o.text) << ": " << why,
                   "write --set PATH=VALUE, e.g. --set model.hidden=512 or --set model.block[0][1].linear.out=256");
  };
  size_t i = 0;
  while (i < p.size()) {
    if (p[i] == '[') {
      size_t close = p.find(']', i);
      if (close == std::string::npos || close == i + 1) bad("unterminated or empty [index]");
      size_t idx = 0;
      auto [end, ec] = std::from_chars(p.data() + i + 1, p.data() + close, idx);
      if (ec != std::errc() || end != p.data() + close)
        bad("index '" + shorten(p.substr(i + 1, close - i - 1)) + "' is not a non-negative integer");
      steps.push_back({"", idx});
      i = close + 1;
      if (i < p.size() && p[i] == '.') {
        ++i;
        if (i == p.size()) bad("path ends with '.'");
      }
      continue;
    }
    size_t j = i;
    while (j < p.size() && p[j] != '.' && p[j] != '[') ++j;
    if (j == i) bad("empty path component");
    steps.push_back({p.substr(i, j - i), 0});
    i = j;
    if (i < p.size() && p[i] == '.') {
      ++i;
      if (i == p.size()) bad("path ends with '.'");
    }
  }
  if (steps.empty() || steps.front().key.empty()) bad("the path must start with a key");
  return steps;
}
}  // namespace

void apply_overrides(YAML::Node& root, const std::vector<SpecOverride>& overrides) {
  for (const auto& o : overrides) {
    const std::vector<Step> steps = split_path(o);
    YAML::Node value;
    try {
      value = YAML::Load(o.value);
    } catch (const YAML::Exception& e) {
      TE_INPUT_ERROR("--set " << printable(o.text) << ": the value is not valid YAML: " << printable(e.msg),
                     "quote strings with special characters, e.g. --set 'name=\"a: b\"'");
    }
    if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    YAML::Node cur;
    cur.reset(root);
    std::string where;
    for (size_t s = 0; s < steps.size(); ++s) {
      const Step& st = steps[s];
      const bool last = s + 1 == steps.size();
      if (!st.key.empty()) {
        if (cur.IsNull()) cur = YAML::Node(YAML::NodeType::Map);
        if (!cur.IsMap())
          TE_INPUT_ERROR("--set " << printable(o.text) << ": " << (where.empty() ? "the spec" : printable(where))
                                  << " is " << describe(cur) << ", not a map, so it has no key '" << shorten(st.key)
                                  << "'",
                         "check the path against the spec file");
        where += (where.empty() ? "" : ".") + st.key;
        if (last) {
          cur[st.key] = value;
        } else {
          if (!cur[st.key].IsDefined()) cur[st.key] = YAML::Node(YAML::NodeType::Map);
          YAML::Node next = cur[st.key];
          cur.reset(next);
        }
      } else {
        if (!cur.IsSequence() || st.index >= cur.size())
          TE_INPUT_ERROR("--set " << printable(o.text) << ": " << printable(where) << " is " << describe(cur)
                                  << (cur.IsSequence() ? " of " + std::to_string(cur.size()) + " entries" : "")
                                  << ", index " << st.index << " is out of range",
                         "indices count from 0 within an existing list");
        where.push_back('[');
        where.append(std::to_string(st.index));
        where.push_back(']');
        if (last) {
          cur[st.index] = value;
        } else {
          YAML::Node next = cur[st.index];
          cur.reset(next);
        }
      }
    }
  }
}

}  // namespace te::spec_detail
