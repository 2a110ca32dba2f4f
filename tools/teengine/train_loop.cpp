#include "tools/teengine/train_loop.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <optional>

#include "engine/error.h"
#include "engine/log.h"
#include "engine/tensor.h"
#include "models/checkpoint.h"
#include "models/dataset.h"

namespace te::cli {
namespace {

teengine::HostTensor host_f32(const Tensor& t) {  // a contiguous f32 host tensor, as the Engine takes it
  teengine::HostTensor h;
  h.shape.assign(t.shape().begin(), t.shape().end());
  h.dtype = "f32";
  h.bytes.resize(static_cast<size_t>(t.nbytes()));
  std::memcpy(h.bytes.data(), t.data_ptr(), h.bytes.size());
  return h;
}

Tensor half_of(const Tensor& x) {  // the target of a batch without one: 0.5·x (a task the model can learn)
  std::vector<float> v = x.to_f32_vector();
  for (float& f : v) f *= 0.5f;
  return Tensor::from_f32(v, x.shape(), DType::f32);
}

std::string duration(double s) {
  char buf[32];
  const long long t = static_cast<long long>(std::llround(std::max(0.0, s)));
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, t / 60 % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%.1fs", std::max(0.0, s));
  return buf;
}

// Rank 0's terminal output: on a terminal the step line is rewritten in place; elsewhere one line per step.
class Progress {
 public:
  explicit Progress(bool root) : root_(root), tty_(root && isatty(STDOUT_FILENO)) {}
  void step(const char* line) {
    if (!root_) return;
    if (tty_) {
      std::printf("\r%s\x1b[K", line);
      open_ = true;
    } else {
      std::printf("%s\n", line);
    }
    std::fflush(stdout);
  }
  void line(const char* text) {  // a line of its own (eval, checkpoint, summary)
    if (!root_) return;
    if (open_) std::printf("\n");
    open_ = false;
    std::printf("%s\n", text);
    std::fflush(stdout);
  }
  void finish() {
    if (root_ && open_) std::printf("\n");
    open_ = false;
    std::fflush(stdout);
  }

 private:
  bool root_, tty_, open_ = false;
};

Dataset training_data(const ModelSpec& spec, const TrainLoopOptions& o) {
  const int64_t tokens = spec.run.tokens, hidden = spec.model.hidden;
  if (!spec.run.data_paths.empty()) {
    if (!o.input.empty())
      TE_INPUT_ERROR("both --input " << o.input << " and run.data give training data",
                     "drop --input, or set run.data to null (--set run.data=null)");
    return Dataset::open(spec.run.data_paths, tokens, hidden, "run.data");
  }
  if (!o.input.empty()) return Dataset::open({o.input}, tokens, hidden, "--input", /*target_optional=*/true);
  // Seeded: x ~ N(0, 1), target = 0.5·x.
  Tensor x = Tensor::empty({tokens, hidden}, DType::f32);
  x.fill_normal(spec.run.seed ^ 0x1A2B3C4Dull);
  Tensor t = half_of(x);
  return Dataset::from_tensors(std::move(x), std::move(t));
}

struct Staged {
  teengine::StagedTensor x, y;
};
Staged stage(teengine::Engine& e, Dataset::Batch b) {
  if (!b.target.defined()) b.target = half_of(b.input);
  return {e.stage(host_f32(b.input)), e.stage(host_f32(b.target))};
}

}  // namespace

TrainLoopResult train_loop(teengine::Engine& engine, const ModelSpec& spec, const TrainLoopOptions& o) {
  const RunSpec& run = spec.run;
  const bool root = engine.rank() == 0;
  Progress progress(root);
  const Dataset data = training_data(spec, o);
  std::optional<Dataset> eval;
  if (run.eval_every > 0) eval = Dataset::open(run.eval_data_paths, run.tokens, spec.model.hidden, "run.eval_data");
  if (run.checkpoint_every > 0 && o.checkpoint_dir.empty())
    TE_LOG(warn, "run.checkpoint_every is " << run.checkpoint_every
                                            << " but no --checkpoint-dir was given: no checkpoints are written");
  if (!o.checkpoint_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.checkpoint_dir, ec);
    if (ec || !std::filesystem::is_directory(o.checkpoint_dir))
      TE_INPUT_ERROR("--checkpoint-dir " << o.checkpoint_dir << ": cannot create the directory (" << ec.message() << ")",
                     "give a writable directory");
  }
  if (!o.resume.empty()) {
    const std::string path = resolve_checkpoint(o.resume);
    const auto md = engine.load_checkpoint(path);
    auto it = md.find("data_batches");
    if (it != md.end() && it->second != std::to_string(data.batches()))
      TE_LOG(warn, path << ": written over " << it->second << " training batches, this run has " << data.batches()
                        << ": the batch order differs from the run that wrote it");
    char buf[512];
    std::snprintf(buf, sizeof buf, "resumed from %s at step %lld", path.c_str(), static_cast<long long>(engine.step()));
    progress.line(buf);
  }

  // One batch: staged once and reused by every step. More: each step reads its batch (the next one is read on
  // another thread while the step runs) and stages it.
  const bool one = data.batches() == 1;
  const Staged first = stage(engine, data.read(0));
  BatchOrder order(data.batches(), run.shuffle, run.seed);
  const int64_t start = engine.step(), steps = run.steps;
  std::future<Dataset::Batch> next;
  auto prefetch = [&](int64_t s) {
    if (one || s > steps) return;
    const int64_t b = order.at(s).batch;
    next = std::async(std::launch::async, [&data, b] { return data.read(b); });
  };
  prefetch(start + 1);

  auto checkpoint = [&](int64_t s) {
    const DataPosition p = order.at(s);
    const std::string path = (std::filesystem::path(o.checkpoint_dir) / checkpoint_file_name(s)).string();
    engine.save_checkpoint(path, {{"epoch", std::to_string(p.epoch)},
                                  {"position", std::to_string(p.position)},
                                  {"data_batches", std::to_string(data.batches())}});
    char buf[512];
    std::snprintf(buf, sizeof buf, "checkpoint step %lld: %s", static_cast<long long>(s), path.c_str());
    progress.line(buf);
  };
  float last_eval = NAN;
  auto evaluate = [&](int64_t s) {
    const int64_t n = run.eval_batches > 0 ? std::min(run.eval_batches, eval->batches()) : eval->batches();
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const Staged b = stage(engine, eval->read(i));
      sum += engine.eval_loss(b.x, b.y);
    }
    last_eval = static_cast<float>(sum / static_cast<double>(n));
    engine.record_eval(s, last_eval);
    char buf[160];
    std::snprintf(buf, sizeof buf, "eval step %lld/%lld: loss %.6f (%lld batches)", static_cast<long long>(s),
                  static_cast<long long>(steps), static_cast<double>(last_eval), static_cast<long long>(n));
    progress.line(buf);
  };

  const auto t0 = std::chrono::steady_clock::now();
  float first_loss = NAN, last_loss = NAN;
  int64_t saved_at = -1;
  for (int64_t s = start + 1; s <= steps; ++s) {
    Staged b;
    if (!one) {
      b = stage(engine, next.get());
      prefetch(s + 1);
    }
    const Staged& use = one ? first : b;
    const float loss = engine.train_step(use.x, use.y);
    if (s == start + 1) first_loss = loss;
    last_loss = loss;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double per_step = elapsed / static_cast<double>(s - start);
    char line[256];
    std::snprintf(line, sizeof line, "step %lld/%lld loss %.6f lr %.3e (%.1f ms, %.0f tokens/s, ETA %s)",
                  static_cast<long long>(s), static_cast<long long>(steps), static_cast<double>(loss),
                  engine.last_lr(), engine.last_step_ms(),
                  static_cast<double>(use.x.tokens()) / std::max(per_step, 1e-9),
                  duration(per_step * static_cast<double>(steps - s)).c_str());
    progress.step(line);
    if (!std::isfinite(loss) && !o.keep_going) {
      progress.finish();
      if (next.valid()) next.wait();
      return {first.x, true, s, loss};
    }
    if (eval && (s % run.eval_every == 0 || s == steps)) evaluate(s);
    if (!o.checkpoint_dir.empty() && run.checkpoint_every > 0 && s % run.checkpoint_every == 0) {
      checkpoint(s);
      saved_at = s;
    }
  }
  if (!o.checkpoint_dir.empty() && saved_at != steps && engine.step() == steps && steps > start) checkpoint(steps);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char buf[320];
  if (steps > start) {
    const int n = std::snprintf(buf, sizeof buf, "trained steps %lld-%lld in %s: loss %.6f -> %.6f",
                                static_cast<long long>(start + 1), static_cast<long long>(steps), duration(secs).c_str(),
                                static_cast<double>(first_loss), static_cast<double>(last_loss));
    if (std::isfinite(last_eval) && n > 0 && n < static_cast<int>(sizeof buf))
      std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n), ", eval loss %.6f", static_cast<double>(last_eval));
  } else {
    std::snprintf(buf, sizeof buf, "nothing to train: already at step %lld of run.steps %lld",
                  static_cast<long long>(start), static_cast<long long>(steps));
  }
  progress.line(buf);
  return {first.x, false, engine.step(), last_loss};
}

}  // namespace te::cli
