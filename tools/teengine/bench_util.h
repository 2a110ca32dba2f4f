// Shared benchmark plumbing: validate first, then time with device events (median of repeats), then report.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/stream.h"

namespace te::bench {

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int repeats = 0;      // timed samples
  int per_sample = 1;   // calls of the timed function in each sample (time_per_op)
};

// Runs `fn` `warmup` times, then `repeats` times, each timed with events on `stream`. On the CPU (host clock) one
// warm-up call, and the samples stop once they have taken a few seconds (at least 3 samples): the reference kernels
// are orders of magnitude slower than a GPU's, and a GPU-sized count would take minutes.
Timing time_it(const std::function<void()>& fn, const Stream& stream, int warmup = 5, int repeats = 30);

// Times several functions in alternating samples (warm-up of each, then sample i of every function before sample
// i + 1 of any): a comparison in which each side meets the same clocks and temperature, instead of the second side
// running on a GPU that the first has heated. One Timing per function, in order.
std::vector<Timing> time_alternating(const std::vector<std::function<void()>>& fns, const Stream& stream,
                                     int warmup = 5, int repeats = 30);

// As time_it, but each timed sample runs `fn` `per_sample` times back to back (as a graph would), so the host's
// launch latency paid once per sample does not count as kernel time; the returned times are per call of `fn`. On
// the CPU, where nothing is launched ahead, one call per sample.
constexpr int kOpsPerSample = 20;
Timing time_per_op(const std::function<void()>& fn, const Stream& stream, int per_sample = kOpsPerSample);

// Device-to-device copy bandwidth (bytes read + written per second) measured now on `stream`'s device.
double copy_bandwidth_gbs(const Stream& stream, int64_t bytes = int64_t(1) << 30);

// The precision recipes a model-level bench accepts: the spec's recipe names (precision.recipe), for CLI11 checks.
std::vector<std::string> recipe_names();

// Prints `report` as JSON (--json) or as "key: value" lines.
void print_report(const nlohmann::json& report, bool as_json);
// The throughput fields of a forward/backward pair timed with time_per_op: ms, GB/s and the fraction of the copy
// bandwidth for each direction, given the bytes each one reads and writes.
nlohmann::json fwd_bwd_throughput(const Timing& fwd, double fwd_bytes, const Timing& bwd, double bwd_bytes,
                                  double copy_gbs);

}  // namespace te::bench
