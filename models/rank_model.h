// The model as one tensor-parallel rank runs it: every layer's branches as stages (parallel linears and
// activations) with residual connections, the rank's parameter shards, forward, backward, loss and optimizer.
//
//   x [T/W, H] (SP) or [T, H] → for each layer, for each branch: x = x + branch(x) → y (same shape)
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "models/parallel_linear.h"
#include "models/parameters.h"
#include "ops/act/act.h"

namespace te {

class RankModel {
 public:
  // `ctx` must outlive the model. Parameters are this rank's shards (host, f32), moved onto ctx.device.
  RankModel(const ModelSpec& spec, RankShards shards, RankContext& ctx);
  // The same, sharded from the global tensors (host, f32).
  RankModel(const ModelSpec& spec, const GlobalParams& global, RankContext& ctx);

  Tensor forward(const Tensor& x);
  // One optimizer step on mean((forward(x) - target)²) over all T·H elements; returns that loss (every rank).
  // A non-finite loss leaves the weights untouched (no backward, no update).
  // `step` counts from 1 (AdamW's bias correction); `lr` is this step's learning rate (models/lr_schedule.h).
  float train_step(const Tensor& x, const Tensor& target, int64_t step, double lr);
  // The loss train_step would report on (x, target), with no backward and no update: the model's state (weights,
  // optimizer, delayed-scaling history, weight caches) is left as it was.
  float eval_loss(const Tensor& x, const Tensor& target);
  // The same without the optimizer update: loss, backward, and each parameter's grad holding this step's gradient
  // alone (written by its first contribution, models/param_grad.h). A non-finite loss skips backward and leaves
  // every grad 0.
  float forward_backward(const Tensor& x, const Tensor& target);
  // Copies this rank's master shards into the global tensors (host).
  void export_params(GlobalParams& global) const;
  // What this rank holds now, by kind (bytes): --explain's memory account.
  struct Memory {
    int64_t weights = 0;          // model-dtype copies the kernels read, plus quantized weight caches
    int64_t host_weights = 0;     // model-dtype copies kept in host memory for saving (GPU inference, quantized)
    int64_t master_weights = 0;   // f32 masters (training)
    int64_t gradients = 0;        // f32 (training)
    int64_t optimizer_state = 0;  // momentum / Adam moments (training)
  };
  Memory memory() const;
  // Parameter i's shard in f32: the master when training, else the model-dtype copy widened (exact).
  Tensor master_values(size_t i) const;
  RankContext& ctx() { return ctx_; }
  const ModelSpec& spec() const { return spec_; }
  const std::vector<RankParam>& params() const { return params_; }
  // Optimizer state of parameter i (f32, this rank's shard): AdamW's moments / SGD's momentum (state2 undefined
  // for SGD in what is saved). set_optimizer_state copies host or device tensors of the shard's shape in.
  void set_optimizer_state(size_t i, const Tensor& state1, const Tensor& state2);
  // Every quantizer of the model with its name, "<weight parameter>.<role>" (e.g. "layers.0.mlp.fc1_weight.input").
  std::vector<std::pair<std::string, Quantizer*>> quantizers();

  // The model's structure, read by the model graph (models/model_graph.h) to build the same computation.
  struct Stage {
    std::unique_ptr<ParallelLinear> linear;  // or an activation:
    std::optional<ActKind> act;
    Tensor act_in;  // saved activation input (training)
  };
  using BranchStages = std::vector<Stage>;
  std::vector<std::vector<BranchStages>>& layers() { return layers_; }  // [layer][branch]
  // Delayed scaling after a forward: every linear folds its step amaxes into the history.
  void update_forward_scales();
  // The pieces of a training step the training graph (models/train_graph.h) runs as nodes, in the eager order:
  // mark gradients stale before the backward; after it, zero what got no contribution and (when the backward ran)
  // fold the gradient amaxes; the optimizer over the (already reduced) gradients.
  void begin_grad_step();
  void finish_grad_step(bool backward_ran);
  void apply_optimizer(int64_t step, double lr);
  // T·H of the global output whose local rows are `out`: the loss is Σ (out − target)² over it, divided by this.
  double loss_elements(const Tensor& out) const;

 private:
  Tensor forward_layers(const Tensor& x);  // forward() without the delayed-scaling update after it
  Tensor run_branch(BranchStages& b, const Tensor& x);
  Tensor backprop_branch(BranchStages& b, const Tensor& dy);
  RankParam* param(const std::string& name);
  // f(ParallelLinear&) for every linear of every layer and branch, in order.
  template <class F>
  void for_each_linear(F&& f) {
    for (auto& branches : layers_)
      for (BranchStages& b : branches)
        for (Stage& s : b)
          if (s.linear) f(*s.linear);
  }
  template <class F>
  void for_each_linear(F&& f) const {
    for (const auto& branches : layers_)
      for (const BranchStages& b : branches)
        for (const Stage& s : b)
          if (s.linear) f(static_cast<const ParallelLinear&>(*s.linear));
  }
  void optimizer_step(int64_t step, double lr);
  float loss_and_grad(const Tensor& out, const Tensor& target, Tensor* grad);

  const ModelSpec& spec_;
  RankContext& ctx_;
  std::vector<ParamSpec> param_specs_;  // what each RankParam::spec points into
  std::vector<RankParam> params_;
  std::vector<std::vector<BranchStages>> layers_;  // [layer][branch]
};

}  // namespace te
