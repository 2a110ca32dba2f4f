// List tensors, dtypes, shapes and statistics of a safetensors file
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/printable.h"
#include "models/safetensors.h"
#include "tools/teengine/commands.h"

namespace te::cli {
namespace {
// Names and metadata in the table are cut here (--json prints them whole): longer than any real tensor name.
constexpr size_t kTableMaxChars = 256;

struct Stats {
  int64_t count = 0, finite = 0, nan = 0, inf = 0;
  double min = 0, max = 0, mean = 0, std = 0;  // over the finite values
};

Stats stats_of(const Tensor& t) {
  Stats s;
  const std::vector<float> v = t.to_f32_vector();
  s.count = static_cast<int64_t>(v.size());
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, mean = 0, m2 = 0;
  for (float x : v) {
    if (std::isnan(x)) {
      ++s.nan;
    } else if (std::isinf(x)) {
      ++s.inf;
    } else {
      // Welford: stable for large tensors with a large mean.
      ++s.finite;
      const double d = x - mean;
      mean += d / static_cast<double>(s.finite);
      m2 += d * (x - mean);
      lo = std::min(lo, static_cast<double>(x));
      hi = std::max(hi, static_cast<double>(x));
    }
  }
  if (s.finite > 0) {
    s.min = lo;
    s.max = hi;
    s.mean = mean;
    s.std = std::sqrt(m2 / static_cast<double>(s.finite));
  }
  return s;
}

std::string fmt(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

int run_inspect(const std::string& path, bool as_json) {
  const SafetensorsReader r = SafetensorsReader::open(path);
  nlohmann::json out = {{"file", path}, {"metadata", r.metadata()}, {"tensors", nlohmann::json::array()}};
  if (!as_json) {
    // Names and metadata come from the file: control characters are escaped (a name must not drive the terminal).
    std::printf("%s: %zu tensors\n", printable_path(path).c_str(), r.entries().size());
    for (const auto& [k, v] : r.metadata())
      std::printf("  metadata %s = %s\n", printable(k, kTableMaxChars).c_str(), printable(v, kTableMaxChars).c_str());
    std::printf("%-40s %-8s %-18s %12s %12s %12s %12s %12s %6s %6s\n", "name", "dtype", "shape", "bytes", "min", "max",
                "mean", "std", "nan", "inf");
  }
  uint64_t total = 0;
  for (const SafetensorsEntry& e : r.entries()) {
    const Stats s = stats_of(r.read(e.name));
    total += e.nbytes();
    if (as_json) {
      nlohmann::json j = {{"name", e.name},   {"dtype", std::string(dtype_name(e.dtype))},
                          {"shape", e.shape}, {"bytes", e.nbytes()},
                          {"nan", s.nan},     {"inf", s.inf}};
      for (const char* k : {"min", "max", "mean", "std"}) j[k] = nullptr;  // no finite values: null
      if (s.finite > 0) {
        j["min"] = s.min;
        j["max"] = s.max;
        j["mean"] = s.mean;
        j["std"] = s.std;
      }
      out["tensors"].push_back(std::move(j));
    } else {
      const bool any = s.finite > 0;
      std::printf("%-40s %-8s %-18s %12llu %12s %12s %12s %12s %6lld %6lld\n",
                  printable(e.name, kTableMaxChars).c_str(), std::string(dtype_name(e.dtype)).c_str(),
                  shape_str(e.shape).c_str(), static_cast<unsigned long long>(e.nbytes()),
                  any ? fmt(s.min).c_str() : "-", any ? fmt(s.max).c_str() : "-", any ? fmt(s.mean).c_str() : "-",
                  any ? fmt(s.std).c_str() : "-", static_cast<long long>(s.nan), static_cast<long long>(s.inf));
    }
  }
  if (as_json) {
    out["total_bytes"] = total;
    // ASCII only: JSON escapes for control characters and everything past ASCII (C1 controls included); a path that
    // is not UTF-8 gets U+FFFD instead of an exception.
    std::printf("%s\n", out.dump(2, ' ', true, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("total %llu bytes\n", static_cast<unsigned long long>(total));
  }
  return 0;
}
}  // namespace

Command add_inspect_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("inspect", "List tensors, dtypes, shapes and statistics of a safetensors file");
  auto path = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  sub->add_option("file", *path, "the .safetensors file")->required();
  sub->add_flag("--json", *as_json, "print JSON instead of a table");
  return {sub, [path, as_json] { return run_inspect(*path, *as_json); }};
}
}  // namespace te::cli
