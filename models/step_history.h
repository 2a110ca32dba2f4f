// What an Engine remembers of its steps, bounded so a long-running server does not grow: every step counts in the
// totals and in a latency histogram with fixed log-spaced buckets; the per-step lists (wall ms, device ms, loss,
// learning rate, eval losses) keep only the last kWindow entries. Most `teengine run`s take fewer steps than that, so
// their lists hold every step.
#pragma once
#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <utility>

#include "models/bucket_histogram.h"

namespace te {

class StepHistory {
 public:
  static constexpr size_t kWindow = 1024;
  // Bucket i counts steps with wall ms in (bound(i-1), bound(i)]: bound(i) = 0.01 ms × 2^i for i < kBuckets - 1
  // (10 µs to about 42 s), the last bucket is unbounded. Log-spaced so µs kernels and multi-second CPU steps both
  // land in a bucket that tells them apart.
  static constexpr int kBuckets = 24;
  static double bound_ms(int i);

  StepHistory();

  void record(double wall_ms, double device_ms, int64_t tokens);  // every forward and training step
  void record_train(float loss, double lr);                        // a training step's loss and learning rate
  void record_eval(int64_t step, float loss);

  int64_t steps() const { return steps_; }
  int64_t tokens() const { return tokens_; }
  double total_ms() const { return total_ms_; }
  double last_ms() const { return wall_.empty() ? 0.0 : wall_.back(); }
  const std::deque<double>& wall_ms() const { return wall_; }
  const std::deque<double>& device_ms() const { return device_; }
  const std::deque<float>& losses() const { return losses_; }
  const std::deque<double>& lrs() const { return lrs_; }
  const std::deque<std::pair<int64_t, float>>& evals() const { return evals_; }
  // {"le_ms": [bounds..., null], "counts": [...], "count": steps, "sum_ms": total}: null stands for +infinity.
  nlohmann::json histogram_json() const;

 private:
  int64_t steps_ = 0, tokens_ = 0;
  double total_ms_ = 0;
  std::deque<double> wall_, device_, lrs_;
  std::deque<float> losses_;
  std::deque<std::pair<int64_t, float>> evals_;
  BucketHistogram histogram_;  // of wall ms
};

}  // namespace te
