#include "models/step_history.h"

#include <cmath>

namespace te {
namespace {
template <class T>
void push_bounded(std::deque<T>& q, T v) {
  q.push_back(v);
  if (q.size() > StepHistory::kWindow) q.pop_front();
}
}  // namespace

double StepHistory::bound_ms(int i) { return i >= kBuckets - 1 ? INFINITY : 0.01 * std::ldexp(1.0, i); }

void StepHistory::record(double wall_ms, double device_ms, int64_t tokens) {
  ++steps_;
  tokens_ += tokens;
  total_ms_ += wall_ms;
  push_bounded(wall_, wall_ms);
  push_bounded(device_, device_ms);
  int b = 0;
  while (b < kBuckets - 1 && wall_ms > bound_ms(b)) ++b;
  ++counts_[static_cast<size_t>(b)];
}

void StepHistory::record_loss(float loss) { push_bounded(losses_, loss); }

nlohmann::json StepHistory::histogram_json() const {
  nlohmann::json le = nlohmann::json::array();
  for (int i = 0; i < kBuckets; ++i) le.push_back(i < kBuckets - 1 ? nlohmann::json(bound_ms(i)) : nlohmann::json());
  return {{"le_ms", le}, {"counts", counts_}, {"count", steps_}, {"sum_ms", total_ms_}};
}

}  // namespace te
