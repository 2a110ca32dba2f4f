// What rank 0 of a training run prints: one line per step,
//   step 12/100 loss 0.123456 lr 3.000e-04 (12.3 ms, 83000 tokens/s, ETA 1m02s)
// rewritten in place when stdout is a terminal, else one line per step, flushed at once (a log file or pipe sees
// each step as it ends); eval, checkpoint and resume lines of their own; then a summary. Other ranks print nothing.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace te::cli {

std::string format_duration(double seconds);  // "4.2s", "1m02s", "2h05m"

class TrainProgress {
 public:
  // Steps first_step + 1 … last_step are to run; tokens/s and the ETA are from the wall time since construction.
  TrainProgress(bool root, int64_t first_step, int64_t last_step);
  void step(int64_t step, float loss, double lr, double step_ms, int64_t tokens);
  void line(const std::string& text);  // a line of its own
  // "trained steps 1-100 in 1m02s: loss a -> b[, eval loss c]", or that there was nothing to train.
  void summary(float first_loss, float last_loss, float eval_loss);
  void finish();  // ends an open step line

 private:
  bool root_, tty_, open_ = false;
  int64_t first_, last_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace te::cli
