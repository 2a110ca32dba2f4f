#include "models/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace te {

double learning_rate(const OptimizerSpec& o, int64_t total_steps, int64_t step) {
  const LrScheduleSpec& s = o.schedule;
  const int64_t w = s.warmup_steps;
  if (w > 0 && step <= w) return o.lr * static_cast<double>(step) / static_cast<double>(w);
  if (s.type == LrScheduleType::constant) return o.lr;
  const int64_t d = s.decay_steps > 0 ? s.decay_steps : std::max<int64_t>(1, total_steps - w);
  const double t = static_cast<double>(std::min(step - w, d)) / static_cast<double>(d);
  return s.min_lr + (o.lr - s.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
}

}  // namespace te
