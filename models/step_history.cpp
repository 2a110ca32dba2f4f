#include "models/step_history.h"

#include <cmath>

namespace te {
namespace {
template <class T>
void push_bounded(std::deque<T>& q, T v) {  // the newest kWindow entries
  q.push_back(v);
  if (q.size() > StepHistory::kWindow) q.pop_front();
}

std::vector<double> step_bounds() {
  std::vector<double> b;
  for (int i = 0; i < StepHistory::kBuckets - 1; ++i) b.push_back(StepHistory::bound_ms(i));
  return b;
}
}  // namespace

double StepHistory::bound_ms(int i) { return i >= kBuckets - 1 ? INFINITY : 0.01 * std::ldexp(1.0, i); }

StepHistory::StepHistory() : histogram_(step_bounds()) {}

void StepHistory::record(double wall_ms, double device_ms, int64_t tokens) {
  ++steps_;
  tokens_ += tokens;
  total_ms_ += wall_ms;
  push_bounded(wall_, wall_ms);
  push_bounded(device_, device_ms);
  histogram_.observe(wall_ms);
}

void StepHistory::record_train(float loss, double lr) {
  push_bounded(losses_, loss);
  push_bounded(lrs_, lr);
}

void StepHistory::record_eval(int64_t step, float loss) { push_bounded(evals_, std::make_pair(step, loss)); }

nlohmann::json StepHistory::histogram_json() const { return histogram_.json("le_ms", "sum_ms"); }

}  // namespace te
