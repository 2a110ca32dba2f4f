// One linear layer of a tensor-parallel group, optionally preceded by a norm (LayerNormLinear, and LayerNormMLP's
// FC1), with Megatron sequence parallelism:
//
//   column-parallel, SP:  x [T/W, H] → norm → h [T/W, H] → gather → [T, H] → · W_r[N/W, H]ᵀ + b_r → y [T, N/W]
//   row-parallel,    SP:  x [T, N/W] → · W_r[H, N/W]ᵀ → partial [T, H] → reduce-scatter (+ b) → y [T/W, H]
//   without SP the column layer takes x [T, H] replicated and the row layer all-reduces instead.
//
// Under a quantized recipe the gather goes through gather_along_first_dim, which stays quantized when the local
// shard allows (row-wise 1D always) and otherwise falls back to the model dtype (docs/NUMERICS.md §4–§5). The
// norm output is kept in high precision locally so the backward re-gather of its column-wise copy is exact on
// either path. Weights are quantized once per optimizer step (cached), with per-tensor amaxes reduced over the
// group so tp = N matches tp = 1.
#pragma once
#include <array>
#include <optional>

#include "comm/gather.h"
#include "graph/graph.h"
#include "graph/optimizer.h"
#include "models/rank_context.h"
#include "ops/act/act.h"
#include "ops/norm/norm.h"
#include "ops/quant/quantizer.h"

namespace te {

// A finished gather's output as a GEMM reads it: the QuantizedTensor when it travelled quantized, else the tensor.
inline GemmOperand gathered_operand(const GatherResult& g) {
  return g.output->quantized ? GemmOperand(g.quantized()) : GemmOperand(g.tensor());
}

// Every graph node of the layer (its forward phases and their backward) owns a share of it (graph/graph.h NodeState).
class ParallelLinear : public NodeState {
 public:
  struct Params {
    RankParam* norm_weight = nullptr;  // null: no norm
    RankParam* norm_bias = nullptr;    // null for RMSNorm
    RankParam* weight = nullptr;       // [N/W, K] column / [N, K/W] row
    RankParam* bias = nullptr;         // null: no bias
  };
  ParallelLinear(ParallelMode mode, NormKind norm, float eps, Params params, const RankContext& ctx);

  void invalidate_weight_cache() { weight_q_.reset(); }
  bool quantizes_weight() const { return q_weight_.has_value(); }
  // The optimizer step of this weight, when it can write the weight's next quantized copies itself
  // (graph/optimizer_quantize.h: AdamW, FP8 128x128 blocks on a GPU, the model-dtype copy already let go, no GEMM
  // images): the cache is rewritten in place and stays valid, and no model-dtype copy is made for the next forward
  // to quantize. False (nothing done): the caller steps the weight with the others and drops the cache.
  bool step_weight_into_cache(const OptimizerStep& step, const Stream& s);
  // Whether this weight's optimizer step (AdamW when `adamw`) allocates nothing: its model-dtype copy stays on the
  // device and is rewritten in place, or step_weight_into_cache writes its quantized copies in place. The training
  // graph then runs the step apart from the others, as soon as the weight's last reader in the step has run.
  bool steps_weight_in_place(const RankContext& ctx, bool adamw) const;
  // Makes the quantized weight cache now if the recipe quantizes this weight and the cache is empty (training lets
  // the model-dtype copy go once it is made).
  void quantize_weight(RankContext& ctx, const Stream& s) {
    if (q_weight_) (void)weight_operand(ctx, s);
  }
  // Inference under a quantized recipe: quantize the weight now and keep only that form where the kernels run; the
  // model-dtype copy moves to host memory (RankParam::host_value), where saving reads it. Nothing else happens.
  void hold_weight_quantized_only(RankContext& ctx);
  // The quantized weight, when it is all the device holds (the model graph binds it in place of the weight).
  const QuantizedTensor* weight_held_quantized() const {
    return p_.weight->value.defined() ? nullptr : weight_q_ ? &weight_q_->quantized() : nullptr;
  }
  int64_t weight_cache_bytes() const { return weight_q_ ? weight_q_->quantized().nbytes() : 0; }  // the quantized weight
  // The GEMM images its cached weight carries while it is cached (run.weight_images): from load on in inference,
  // through each training step (made with the step's quantized copies, dropped at the optimizer update).
  int64_t weight_image_bytes() const { return weight_image_bytes_; }
  // The layer's quantizers by role (null where the recipe has none): delayed scaling keeps state in them that a
  // checkpoint saves and restores.
  struct QuantizerRef {
    const char* role;  // "input" | "weight" | "grad"
    Quantizer* q;
  };
  std::array<QuantizerRef, 3> quantizers() {
    return {{{"input", q_input_ ? &*q_input_ : nullptr},
             {"weight", q_weight_ ? &*q_weight_ : nullptr},
             {"grad", q_grad_ ? &*q_grad_ : nullptr}}};
  }
  // Drops what a forward saved for a backward that will not come (an eval forward of a training model).
  void discard_saved() { release_saved(); }
  // Delayed scaling: fold the step amaxes into the history and rescale (forward tensors, then gradients; `skip`, a
  // device flag or null: a skipped step drops the gradients' amaxes instead).
  void update_forward_scales(RankContext& ctx);
  void update_backward_scales(RankContext& ctx, const int32_t* skip);

  // The forward phases: the model graph (models/model_graph.h) runs each as one node on the stream its plan gives
  // it. An undefined `out` is allocated.
  ParallelMode mode() const { return mode_; }
  const Params& params() const { return p_; }
  bool has_norm() const { return p_.norm_weight != nullptr; }
  bool quantizes_input() const { return q_input_.has_value(); }
  Quantizer* input_quantizer() { return q_input_ ? &*q_input_ : nullptr; }
  const Quantizer* input_quantizer() const { return q_input_ ? &*q_input_ : nullptr; }
  const Quantizer* grad_quantizer() const { return q_grad_ ? &*q_grad_ : nullptr; }
  // Inference with a norm under a quantized recipe and nothing to gather: the norm writes the quantized GEMM input.
  bool fuses_norm_quantize(const RankContext& ctx) const;
  // A quantized recipe, this layer row-parallel: the activation before it writes its quantized input (and, when
  // training, the activation itself, from the same pass).
  bool fuses_activation_quantize() const;
  QuantizedTensor norm_quantized(const Tensor& x, RankContext& ctx, const Stream& s);
  Tensor norm(const Tensor& x, Tensor out, RankContext& ctx, const Stream& s);  // saves statistics when training
  GemmOperand gather_input(const Tensor& h, RankContext& ctx, const Stream& s);  // column, SP: [T/W, H] → [T, H]
  GemmOperand local_input(const Tensor& x, RankContext& ctx, const Stream& s);   // quantized row-wise, or x
  QuantizedTensor act_quantized(ActKind act, const Tensor& pre, RankContext& ctx, const Stream& s);  // row-parallel
  // What a training act_quantized keeps for wgrad besides its row-wise result: the column-wise copy (true: one fused
  // pass writes both) or the activation in the model dtype (false). `pre`: the activation input's shape.
  bool keeps_columnwise_copy(ActKind act, const Shape& pre, const RankContext& ctx) const;
  // wgrad_input has taken that kept copy as its operand: the linear lets go of it (the operand lives until wgrad).
  void release_activation_copy() {
    x_ = Tensor();
    x_col_.reset();
  }
  Tensor column_gemm(const GemmOperand& in, Tensor out, RankContext& ctx, const Stream& s);
  // This rank's partial sum; plus `residual` when given (tp 1: the whole sum), after rounding, as add() would.
  Tensor row_gemm(const GemmOperand& in, Tensor out, RankContext& ctx, const Stream& s,
                  const Tensor& residual = Tensor());
  Tensor reduce_partial(const Tensor& partial, RankContext& ctx, const Stream& s);       // over the group

  // The backward phases: the training graph (models/train_graph.h) runs each as one backward node, with the
  // quantizers the forward used. Parameter gradients go into RankParam::grad (models/param_grad.h); the per-step
  // saved state (norm statistics, a fused activation's copies) stays here.
  void bias_backward(const Tensor& dy, RankContext& ctx, const Stream& s);          // bias grad from dy's local rows
  GemmOperand grad_local(const Tensor& dy, RankContext& ctx, const Stream& s);      // dy quantized both ways, locally
  GatherResult gather_grad(const Tensor& dy, RankContext& ctx, const Stream& s);    // row, SP: dy [T/W,H] → [T,H]
  GatherResult regather_input(const Tensor& h, RankContext& ctx, const Stream& s);  // column, SP: column-wise
  // The GEMM input's column-wise copy for wgrad: a fused activation's saved one, else `x` (or, undefined, the
  // activation the fused pass kept) quantized column-wise.
  GemmOperand input_columnwise(const Tensor& x, RankContext& ctx, const Stream& s);
  Tensor dgrad(const GemmOperand& dy, Tensor out, RankContext& ctx, const Stream& s);  // dy · W: this rank's part
  void wgrad(const GemmOperand& dy, const GemmOperand& x, RankContext& ctx, const Stream& s);  // W.grad (+)= dyᵀ x
  // Norm backward from the saved statistics: dx into `out` (allocated when undefined), gamma/beta grads added.
  Tensor norm_backward(const Tensor& dh, const Tensor& x, Tensor out, RankContext& ctx, const Stream& s);

 private:
  GemmOperand weight_operand(RankContext& ctx, const Stream& s);  // the cached quantized weight, or the HP weight
  Tensor fprop(const GemmOperand& in, Tensor out, bool with_bias, RankContext& ctx, const Stream& s,
               const Tensor& residual = Tensor());
  GemmOperand quantize_local(std::optional<Quantizer>& q, const Tensor& t, Usage usages, RankContext& ctx,
                             const Stream& s);
  void release_saved();  // after backward: the saved activations go back to the allocator at once

  ParallelMode mode_;
  NormKind norm_;
  float eps_;
  Params p_;
  std::optional<Quantizer> q_input_, q_weight_, q_grad_;
  std::optional<GemmOperand> weight_q_;  // quantized, with its GEMM images (RankContext::weight_images)
  int64_t weight_image_bytes_ = 0;
  // saved for backward
  Tensor x_;                              // the activation a fused act_quantized kept (training)
  Tensor mean_, rstd_;                    // norm statistics (training)
  std::optional<QuantizedTensor> x_col_;  // instead of x_: the activation's column-wise copy from the fused pass
};

}  // namespace te
