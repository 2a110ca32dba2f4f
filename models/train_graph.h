// A rank's training step as one planned graph: the forward (models/forward_builder.h), the MSE loss, the backward
// autograd builds from the model op kinds' rules (graph/autograd.h, models/model_backward.cpp), the all-reduce of
// replicated parameters' gradients, and one optimizer node — planned once for a token count (backward gathers and
// reduce-scatters on the comm stream, every gather's path decided per usage, one arena for the step's
// high-precision intermediates) and run by the Executor.
//
//   step: x, target → forward → mse_loss → loss.all_reduce (SP) → loss.gate → backward (per layer, reversed)
//         → all_reduce grad/<replicated params> (SP) → optimizer
//   eval: x, target → forward → mse_loss → loss.all_reduce (SP) → loss.gate      (the model left as it was)
//   forward: x → forward → y                                                      (the model left as it was)
//
// Every node calls a ParallelLinear phase, ops/ kernel or comm/ collective; the layer-by-layer chaining of the same
// phases (tests/models/eager_reference.h) gives the same bytes (tests/models/test_train_graph.cpp).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/rank_graph.h"
#include "models/step_control.h"

namespace te {

struct TrainGraphOptions {
  enum class Kind : uint8_t {
    step,      // forward, backward, optimizer
    gradient,  // forward and backward: every parameter's grad holds this step's (group-summed) gradient
    eval,      // forward and loss only
    forward,   // the training forward's output only (Engine::forward on a training engine)
  };
  Kind kind = Kind::step;
  bool overlap = true;   // false: every node in order on the compute stream (run.executor: eager)
  bool profile = false;  // time every node (Executor step_ms; RankGraph::node_times)
  // Kind::step on a GPU at tp 1: replay the step as one CUDA graph (see train_step). The weights' model-dtype copies
  // stay on the GPU beside their quantized copies (RankContext::keep_weight_values).
  bool cuda_graph = false;
};

class TrainGraph : public RankGraph {
 public:
  ~TrainGraph();
  // `model` (ctx.training) must outlive this. Every step's x and target are [local_tokens, H] on the model's
  // device, x in the model dtype, the target in `target_dtype`.
  TrainGraph(RankModel& model, int64_t local_tokens, DType target_dtype, TrainGraphOptions options = {});

  // One optimizer step on mean((forward(x) − target)²); returns the loss (read on the host once the step has
  // finished: nothing inside the step waits for the host). A non-finite loss leaves the weights, the optimizer state
  // and the delayed-scaling state untouched and every gradient 0 (models/step_control.h).
  // Kind::gradient runs the same without the update (step and lr unused).
  // With cuda_graph the first three steps run as they are — the first allocating what outlives the capture (weight
  // caches' scaling state, GEMM plans), the next two filling a private memory pool — and the fourth is captured
  // and launched; every later step launches the capture, with its own step number and learning rate (they reach
  // the kernels through device memory). Every step is a real step: the bytes equal those of uncaptured steps.
  float train_step(const Tensor& x, const Tensor& target, int64_t step, double lr);
  // Kind::eval: the loss train_step would report on (x, target) — the same training forward — with no backward and
  // no update; the model's weights, optimizer and delayed-scaling state are left as they were.
  float eval_loss(const Tensor& x, const Tensor& target);
  // Kind::forward: the training forward's output for x, the model left as it was (as eval_loss). The result is
  // valid until the next call.
  Tensor forward(const Tensor& x);

  const TrainGraphOptions& options() const { return options_; }
  // The most bytes the step's kernels hold outside the planned arena at once (quantized activations and gradients,
  // collective outputs, the loss gradient: models/held_values.h).
  int64_t held_peak_bytes() const { return held_peak_bytes_; }
  bool captured() const;  // cuda_graph: the step has been captured

 private:
  void build(DType target_dtype);
  float run(const Tensor& x, const Tensor& target);
  float replayed_step(const Tensor& x, const Tensor& target);
  // Runs the graph and puts back what a forward without a backward must not change.
  void run_leaving_state(const Tensor& x, const Tensor& target);

  TrainGraphOptions options_;
  StepControl control_;
  struct Replay;
  std::unique_ptr<Replay> replay_;  // cuda_graph only
  int input_ = -1, target_ = -1, output_ = -1;
  std::vector<std::vector<int>> release_after_;  // by node id: held values to drop once it has run
  int64_t held_peak_bytes_ = 0;
};

}  // namespace te
