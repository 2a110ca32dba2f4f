#include "tools/teengine/train_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace te::cli {

std::string format_duration(double s) {
  char buf[32];
  const long long t = std::llround(std::max(0.0, s));
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, t / 60 % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%.1fs", std::max(0.0, s));
  return buf;
}

TrainProgress::TrainProgress(bool root, int64_t first_step, int64_t last_step)
    : root_(root),
      tty_(root && isatty(STDOUT_FILENO)),
      first_(first_step),
      last_(last_step),
      t0_(std::chrono::steady_clock::now()) {}

void TrainProgress::step(int64_t s, float loss, double lr, double step_ms, int64_t tokens) {
  if (!root_) return;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const double per_step = elapsed / static_cast<double>(std::max<int64_t>(1, s - first_));
  char text[256];
  std::snprintf(text, sizeof text, "step %lld/%lld loss %.6f lr %.3e (%.1f ms, %.0f tokens/s, ETA %s)",
                static_cast<long long>(s), static_cast<long long>(last_), static_cast<double>(loss), lr, step_ms,
                static_cast<double>(tokens) / std::max(per_step, 1e-9),
                format_duration(per_step * static_cast<double>(last_ - s)).c_str());
  if (tty_) {
    std::printf("\r%s\x1b[K", text);  // \x1b[K: clear what a longer previous line left
    open_ = true;
  } else {
    std::printf("%s\n", text);
  }
  std::fflush(stdout);
}

void TrainProgress::line(const std::string& text) {
  if (!root_) return;
  if (open_) std::printf("\n");
  open_ = false;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

void TrainProgress::summary(float first_loss, float last_loss, float eval_loss) {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  char buf[320];
  if (last_ > first_) {
    int n =
        std::snprintf(buf, sizeof buf, "trained steps %lld-%lld in %s: loss %.6f -> %.6f",
                      static_cast<long long>(first_ + 1), static_cast<long long>(last_), format_duration(secs).c_str(),
                      static_cast<double>(first_loss), static_cast<double>(last_loss));
    if (std::isfinite(eval_loss) && n > 0 && n < static_cast<int>(sizeof buf))
      std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n), ", eval loss %.6f", static_cast<double>(eval_loss));
  } else {
    std::snprintf(buf, sizeof buf, "nothing to train: already at step %lld of run.steps %lld",
                  static_cast<long long>(first_), static_cast<long long>(last_));
  }
  line(buf);
}

void TrainProgress::finish() {
  if (root_ && open_) std::printf("\n");
  open_ = false;
  std::fflush(stdout);
}

}  // namespace te::cli
