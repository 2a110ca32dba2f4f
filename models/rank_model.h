// What one tensor-parallel rank holds of the model: every layer's branches as stages (parallel linears and
// activations, whose residual connections the graphs add), the rank's parameter shards with their gradients and
// optimizer state, and the quantizers. It runs nothing by itself: the inference forward is models/model_graph.h,
// the training step and the eval loss models/train_graph.h, both planned graphs over these stages.
//
//   x [T/W, H] (SP) or [T, H] → for each layer, for each branch: x = x + branch(x) → y (same shape)
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/parallel_linear.h"
#include "models/parameters.h"
#include "models/step_control.h"
#include "ops/act/act.h"

namespace te {

class RankModel {
 public:
  // `ctx` must outlive the model. Parameters are this rank's shards (host, f32), moved onto ctx.device.
  RankModel(const ModelSpec& spec, RankShards shards, RankContext& ctx);
  // The same, sharded from the global tensors (host, f32).
  RankModel(const ModelSpec& spec, const GlobalParams& global, RankContext& ctx);

  // Copies this rank's master shards into the global tensors (host).
  void export_params(GlobalParams& global) const;
  // What this rank holds now, by kind (bytes): --explain's memory account.
  struct Memory {
    int64_t weights = 0;          // model-dtype copies the kernels read, plus quantized weight caches
    int64_t weight_images = 0;    // the quantized weights' GEMM images (run.weight_images)
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

  // The model's structure, read by the graph builder (models/forward_builder.h).
  struct Stage {
    std::shared_ptr<ParallelLinear> linear;  // or an activation (the graph nodes of the linear share it):
    std::optional<ActKind> act;
    const LayerSpec* attention = nullptr;  // or an attention (global heads; the rank runs heads / world)
  };
  using BranchStages = std::vector<Stage>;
  std::vector<std::vector<BranchStages>>& layers() { return layers_; }  // [layer][branch]
  // Delayed scaling after a forward: every linear folds its step amaxes into the history.
  void update_forward_scales();
  // An eval forward must leave the model as it was: what it folds into the input quantizers' step amaxes is put
  // back from a snapshot taken before it. (A weight it quantizes stays cached, with its amax folded in: the next
  // training forward would have done exactly that with the same weights and scale.)
  struct InputScale {
    Quantizer* q;
    DelayedScaling state;  // a copy
  };
  using InputScales = std::vector<InputScale>;
  InputScales snapshot_input_scales();
  void restore_input_scales(const InputScales& saved);
  // Drops what every linear saved for a backward that will not run (an eval forward).
  void discard_saved();
  // The pieces of a training step the training graph (models/train_graph.h) runs as nodes:
  // mark gradients stale before the backward; after it, zero what got no contribution and fold the gradient amaxes
  // (`skip`, the step's flag on the device or null: a skipped step folds none); the optimizer over the (already
  // all-reduced) gradients with the step's scalars and skip flag (`update` false: only a skipped step's zeroing of
  // the gradients).
  void begin_grad_step();
  void finish_grad_step(const int32_t* skip);
  // The optimizer runs in pieces: GEMM weights that step in place (ParallelLinear::steps_weight_in_place) may each
  // be stepped apart, on any stream, once their gradient is final and nothing else in the step reads them
  // (step_weight, by parameter index); apply_optimizer steps every other parameter (those in `apart` are left to
  // step_weight) on `stream`.
  void step_weight(size_t param, const StepControl& control, const Stream& stream);
  void apply_optimizer(const StepControl& control, bool update, std::span<const int64_t> apart, const Stream& stream);
  // Indices of the GEMM weights that may step apart under this model's optimizer.
  std::vector<int64_t> weights_stepping_apart() const;
  size_t param_index(const std::string& name) const;
  // Drops every quantized weight cache (the weights have changed where no host code ran: a replayed step).
  void invalidate_weight_caches();
  // Whether any linear's weight is quantized; quantize_weights makes every such cache that is missing (in order).
  bool quantizes_weights() const;
  void quantize_weights(RankContext& ctx, const Stream& s);
  // T·H of the global output whose local rows are `out`: the loss is Σ (out − target)² over it, divided by this.
  double loss_elements(const Tensor& out) const;

 private:
  RankParam* param(const std::string& name);
  // p's optimizer slot; with `update`, a model-dtype copy allocated on `stream` when p has none.
  ParamSlot updating_slot(RankParam& p, bool update, const Stream& stream);
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

  const ModelSpec& spec_;
  RankContext& ctx_;
  std::vector<ParamSpec> param_specs_;  // what each RankParam::spec points into
  std::vector<RankParam> params_;
  std::vector<std::vector<BranchStages>> layers_;  // [layer][branch]
};

}  // namespace te
