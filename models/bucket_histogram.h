// A histogram with fixed upper bounds: constant memory however many values it counts, so long-running processes
// (a server) can keep one per figure. Counts are per bucket (not cumulative); the last bucket is unbounded.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace te {

class BucketHistogram {
 public:
  explicit BucketHistogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  // Bucket i holds values in (bounds[i-1], bounds[i]]; above the last bound goes to the unbounded bucket.
  void observe(double v) {
    size_t b = 0;
    while (b < bounds_.size() && v > bounds_[b]) ++b;
    ++counts_[b];
    sum_ += v;
    ++count_;
  }
  int64_t count() const { return count_; }
  double sum() const { return sum_; }
  // {le_key: [bounds..., null], "counts": [...], "count": n, sum_key: sum}: null stands for +infinity.
  nlohmann::json json(const std::string& le_key = "le", const std::string& sum_key = "sum") const {
    nlohmann::json le = nlohmann::json::array();
    for (double b : bounds_) le.push_back(b);
    le.push_back(nullptr);
    return {{le_key, le}, {"counts", counts_}, {"count", count_}, {sum_key, sum_}};
  }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;
  double sum_ = 0;
  int64_t count_ = 0;
};

}  // namespace te
