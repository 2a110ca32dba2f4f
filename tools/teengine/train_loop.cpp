#include "tools/teengine/train_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>

#include "engine/log.h"
#include "engine/tensor.h"
#include "models/batch_order.h"
#include "tools/teengine/train_progress.h"

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

struct Staged {
  teengine::StagedTensor x, y;
};
Staged stage(teengine::Engine& e, Dataset::Batch b) {
  if (!b.target.defined()) b.target = half_of(b.input);
  return {e.stage(host_f32(b.input)), e.stage(host_f32(b.target))};
}

// The mean eval loss over the first `eval_batches` batches (all when 0), recorded in the metrics.
float evaluate(teengine::Engine& engine, const Dataset& eval, int64_t eval_batches, int64_t step, int64_t steps,
               TrainProgress& progress) {
  const int64_t n = eval_batches > 0 ? std::min(eval_batches, eval.batches()) : eval.batches();
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Staged b = stage(engine, eval.read(i));
    sum += engine.eval_loss(b.x, b.y);
  }
  const float loss = static_cast<float>(sum / static_cast<double>(n));
  engine.record_eval(step, loss);
  char text[160];
  std::snprintf(text, sizeof text, "eval step %lld/%lld: loss %.6f (%lld batches)", static_cast<long long>(step),
                static_cast<long long>(steps), static_cast<double>(loss), static_cast<long long>(n));
  progress.line(text);
  return loss;
}

}  // namespace

TrainLoopResult train_loop(teengine::Engine& engine, const ModelSpec& spec, const TrainInputs& in, bool keep_going) {
  const RunSpec& run = spec.run;
  const Dataset& data = in.data;
  if (!in.resume.empty()) {
    const auto md = engine.load_checkpoint(in.resume);
    auto it = md.find("data_batches");
    if (it != md.end() && it->second != std::to_string(data.batches()))
      TE_LOG(warn, in.resume << ": written over " << it->second << " training batches, this run has " << data.batches()
                             << ": the batch order differs from the run that wrote it");
  }
  const int64_t start = engine.step(), steps = run.steps;
  TrainProgress progress(engine.rank() == 0, start, steps);
  if (!in.resume.empty()) progress.line("resumed from " + in.resume + " at step " + std::to_string(start));

  // One batch: staged once and reused by every step. More: each step reads its batch (the next one is read on
  // another thread while the step runs) and stages it.
  const bool one = data.batches() == 1;
  const Staged first = stage(engine, data.read(0));
  BatchOrder order(data.batches(), run.shuffle, run.seed);
  std::future<Dataset::Batch> next;
  auto prefetch = [&](int64_t s) {
    if (one || s > steps) return;
    const int64_t b = order.at(s).batch;
    next = std::async(std::launch::async, [&data, b] { return data.read(b); });
  };
  prefetch(start + 1);

  float first_loss = NAN, last_loss = NAN, last_eval = NAN;
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
    progress.step(s, loss, engine.last_lr(), engine.last_step_ms(), use.x.tokens());
    if (!std::isfinite(loss) && !keep_going) {
      progress.finish();
      if (next.valid()) next.wait();
      return {first.x, true, s, loss};
    }
    if (in.eval && (s % run.eval_every == 0 || s == steps))
      last_eval = evaluate(engine, *in.eval, run.eval_batches, s, steps, progress);
    if (in.checkpoints && in.checkpoints->due(s)) {
      const DataPosition p = order.at(s);
      const std::string path = in.checkpoints->write(engine, s,
                                                     {{"epoch", std::to_string(p.epoch)},
                                                      {"position", std::to_string(p.position)},
                                                      {"data_batches", std::to_string(data.batches())}});
      progress.line("checkpoint step " + std::to_string(s) + ": " + path);
    }
  }
  progress.summary(first_loss, last_loss, last_eval);
  return {first.x, false, engine.step(), last_loss};
}

}  // namespace te::cli
