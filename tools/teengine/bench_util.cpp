#include "tools/teengine/bench_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "engine/tensor.h"
#include "models/spec_tables.h"

namespace te::bench {

std::vector<std::string> recipe_names() {
  std::vector<std::string> names;
  for (const auto& [name, recipe] : spec_tables::recipes()) names.push_back(name);
  return names;
}

namespace {

constexpr double kCpuBudgetMs = 3000;  // CPU timing stops after this much (at least 3 samples)

Timing summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  Timing t;
  t.repeats = static_cast<int>(ms.size());
  t.median_ms = ms[ms.size() / 2];
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  return t;
}

}  // namespace

Timing time_it(const std::function<void()>& fn, const Stream& stream, int warmup, int repeats) {
  return time_alternating({fn}, stream, warmup, repeats)[0];
}

std::vector<Timing> time_alternating(const std::vector<std::function<void()>>& fns, const Stream& stream, int warmup,
                                     int repeats) {
  const bool gpu = stream.device().is_cuda();
  if (!gpu) warmup = std::min(warmup, 1);
  for (const auto& fn : fns)
    for (int i = 0; i < warmup; ++i) fn();
  stream.synchronize();
  Event start = Event::create(stream.device(), true), stop = Event::create(stream.device(), true);
  // One timed call: device events on a GPU stream, the host clock on the CPU.
  const auto sample = [&](const std::function<void()>& fn) {
    if (!gpu) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    start.record(stream);
    fn();
    stop.record(stream);
    stop.synchronize();
    return static_cast<double>(start.elapsed_ms(stop));
  };
  std::vector<std::vector<double>> ms(fns.size());
  double spent_ms = 0;
  for (int i = 0; i < std::max(repeats, 1) && (gpu || i < 3 || spent_ms < kCpuBudgetMs); ++i)
    for (size_t f = 0; f < fns.size(); ++f) {
      ms[f].push_back(sample(fns[f]));
      if (!gpu) spent_ms += ms[f].back();
    }
  std::vector<Timing> out;
  for (auto& m : ms) out.push_back(summarize(std::move(m)));
  return out;
}

Timing time_per_op(const std::function<void()>& fn, const Stream& stream, int per_sample) {
  if (!stream.device().is_cuda()) per_sample = 1;
  Timing t = time_it(
      [&] {
        for (int i = 0; i < per_sample; ++i) fn();
      },
      stream);
  t.median_ms /= per_sample;
  t.min_ms /= per_sample;
  t.max_ms /= per_sample;
  t.per_sample = per_sample;
  return t;
}

double copy_bandwidth_gbs(const Stream& stream, int64_t bytes) {
  Device d = stream.device();
  if (d.is_cpu()) bytes = std::min<int64_t>(bytes, int64_t(64) << 20);
  Tensor a = Tensor::empty({bytes}, DType::u8, d, stream), b = Tensor::empty({bytes}, DType::u8, d, stream);
  a.fill(1.0, stream);
  Timing t = time_it([&] { b.copy_from(a, stream); }, stream, 3, 20);
  return 2.0 * static_cast<double>(bytes) / (t.median_ms * 1e-3) / 1e9;
}

nlohmann::json fwd_bwd_throughput(const Timing& fwd, double fwd_bytes, const Timing& bwd, double bwd_bytes,
                                  double copy_gbs) {
  const double fwd_gbs = fwd_bytes / (fwd.median_ms * 1e-3) / 1e9, bwd_gbs = bwd_bytes / (bwd.median_ms * 1e-3) / 1e9;
  return {{"ops_per_timed_sample", fwd.per_sample},
          {"fwd_ms", fwd.median_ms},
          {"fwd_gbs", fwd_gbs},
          {"bwd_ms", bwd.median_ms},
          {"bwd_gbs", bwd_gbs},
          {"copy_gbs", copy_gbs},
          {"fwd_fraction_of_copy", fwd_gbs / copy_gbs},
          {"bwd_fraction_of_copy", bwd_gbs / copy_gbs}};
}

void print_report(const nlohmann::json& report, bool as_json) {
  if (as_json) {
    std::printf("%s\n", report.dump(2).c_str());
    return;
  }
  for (auto it = report.begin(); it != report.end(); ++it) std::printf("%s: %s\n", it.key().c_str(), it.value().dump().c_str());
}

}  // namespace te::bench
