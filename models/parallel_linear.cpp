#include "models/parallel_linear.h"

#include <utility>

#include "comm/gather.h"
#include "engine/error.h"
#include "graph/optimizer_quantize.h"
#include "models/param_grad.h"
#include "ops/act/act.h"
#include "ops/act/act_quantize.h"
#include "ops/elementwise/elementwise.h"
#include "ops/norm/norm_quantize.h"

namespace te {
namespace {
// Per-tensor amaxes of tensors sharded (or computed per rank) over the group are reduced across it, so every rank and
// tp = 1 use the same scale; a group of one needs no reduction.
AmaxReducer group_amax_reducer(const RankContext& ctx) {
  return ctx.world() > 1 ? amax_reducer(*ctx.comm) : AmaxReducer();
}

// The images a GEMM on this rank's device reads instead of dequantizing what `q` quantizes, when the spec keeps them:
// written by the quantizing pass itself, they cost one store per element there and save a dequantizing pass (and
// its launch) per GEMM that reads the copy.
std::optional<ImageSpec> images_of(const std::optional<Quantizer>& q, bool wanted, const RankContext& ctx) {
  if (!q || !wanted) return std::nullopt;
  return gemm_image_spec(q->config().format, ctx.device);
}
}  // namespace

ParallelLinear::ParallelLinear(ParallelMode mode, NormKind norm, float eps, Params params, const RankContext& ctx)
    : mode_(mode), norm_(norm), eps_(eps), p_(params) {
  if (ctx.recipe.quantized()) {
    q_input_.emplace(*ctx.recipe.input);
    q_weight_.emplace(*ctx.recipe.weight);
    q_grad_.emplace(*ctx.recipe.grad);
    // The images the cached weight will carry: the row-wise copy's (inference), both copies' (training).
    const std::optional<ImageSpec> image = images_of(q_weight_, ctx.weight_images, ctx);
    if (image && p_.weight->value.defined())
      weight_image_bytes_ = dtype_storage_bytes(image->dtype, p_.weight->value.numel()) * (ctx.training ? 2 : 1);
  }
}

GemmOperand ParallelLinear::weight_operand(RankContext& ctx, const Stream& s) {
  if (!q_weight_) return GemmOperand(p_.weight->value);
  if (!weight_q_) {
    TE_CHECK(p_.weight->value.defined(), "the weight of " << p_.weight->spec->name << " was released");
    // Once per optimizer step. Sharded per-tensor amaxes are reduced over the group so every rank (and tp = 1)
    // uses the same scale.
    weight_q_ = q_weight_->quantize(p_.weight->value, ctx.training ? Usage::both : Usage::rowwise, s,
                                    group_amax_reducer(ctx), images_of(q_weight_, ctx.weight_images, ctx));
    // Training: until the next optimizer step (which writes a fresh model-dtype copy) the GEMMs read only the
    // quantized copies, so the model-dtype one goes now rather than sitting beside the activations.
    if (ctx.training && !ctx.keep_weight_values) p_.weight->value = Tensor();
  }
  return *weight_q_;
}

bool ParallelLinear::step_weight_into_cache(const OptimizerStep& step, const Stream& s) {
  if (!q_weight_ || !weight_q_ || !step.update || step.kind != OptimizerKind::adamw) return false;
  RankParam& w = *p_.weight;
  const ParamSlot slot{w.master, w.grad, w.state1, w.state2, w.value};  // a kept model-dtype copy: not supported
  if (!optimizer_quantize_supported(slot, *q_weight_, weight_q_->quantized())) return false;
  optimizer_quantize_step(slot, step, *q_weight_, weight_q_->quantized(), s);
  return true;
}

bool ParallelLinear::steps_weight_in_place(const RankContext& ctx, bool adamw) const {
  if (!q_weight_ || ctx.keep_weight_values) return true;
  // What optimizer_quantize_supported will find once the cache exists (a cache with images has no fused path).
  return adamw && ctx.device.is_cuda() && q_weight_->config().format == QuantFormat::fp8_block_2d &&
         !images_of(q_weight_, ctx.weight_images, ctx);
}

void ParallelLinear::hold_weight_quantized_only(RankContext& ctx) {
  if (!q_weight_ || ctx.training) return;
  (void)weight_operand(ctx, ctx.stream);
  RankParam& w = *p_.weight;
  w.host_value = w.value.device().is_cuda() ? w.value.to(Device::cpu(), ctx.stream) : w.value;
  w.value = Tensor();
}

GemmOperand ParallelLinear::quantize_local(std::optional<Quantizer>& q, const Tensor& t, Usage usages,
                                           RankContext& ctx, const Stream& s) {
  if (!q) return GemmOperand(t);
  // A tensor sharded over the group (row-parallel input, features split) reduces its per-tensor amax too.
  return GemmOperand(q->quantize(t, usages, s, group_amax_reducer(ctx), images_of(q, ctx.activation_images, ctx)));
}

bool ParallelLinear::fuses_norm_quantize(const RankContext& ctx) const {
  return mode_ == ParallelMode::column && p_.norm_weight && q_input_ && !ctx.training && !ctx.gathers();
}

bool ParallelLinear::fuses_activation_quantize() const { return mode_ == ParallelMode::row && q_input_.has_value(); }

QuantizedTensor ParallelLinear::norm_quantized(const Tensor& x, RankContext& ctx, const Stream& s) {
  // Fused where norm_forward_quantized has a kernel; the same bytes as norm then quantize either way. Nothing saved.
  return norm_forward_quantized(norm_, x, p_.norm_weight->value, p_.norm_bias ? p_.norm_bias->value : Tensor(), eps_,
                                ctx.dtype, *q_input_, Usage::rowwise, s, group_amax_reducer(ctx),
                                images_of(q_input_, ctx.activation_images, ctx))
      .out;
}

Tensor ParallelLinear::norm(const Tensor& x, Tensor out, RankContext& ctx, const Stream& s) {
  const int64_t rows = x.numel() / x.size(-1);
  if (!out.defined()) out = Tensor::empty(x.shape(), ctx.dtype, ctx.device, s);
  Tensor mean = norm_ == NormKind::layernorm ? Tensor::empty({rows}, DType::f32, ctx.device, s) : Tensor();
  Tensor rstd = Tensor::empty({rows}, DType::f32, ctx.device, s);
  norm_forward(norm_, x, p_.norm_weight->value, p_.norm_bias ? p_.norm_bias->value : Tensor(), eps_, out, mean, rstd,
               s);
  if (ctx.training) {
    mean_ = mean;
    rstd_ = rstd;
  }
  return out;
}

GemmOperand ParallelLinear::gather_input(const Tensor& h, RankContext& ctx, const Stream& s) {
  // [T/W, H] → [T, H]: quantized row-wise where §4 allows (always for 1D), else in the model dtype.
  return gathered_operand(gather_along_first_dim(h, *ctx.comm, input_quantizer(), Usage::rowwise, false, s,
                                                 images_of(q_input_, ctx.activation_images, ctx)));
}

GemmOperand ParallelLinear::local_input(const Tensor& x, RankContext& ctx, const Stream& s) {
  return quantize_local(q_input_, x, Usage::rowwise, ctx, s);
}

QuantizedTensor ParallelLinear::act_quantized(ActKind act, const Tensor& pre, RankContext& ctx, const Stream& s) {
  // act_forward_quantized decides fused vs act-then-quantize; either way the bytes are those of quantize(act(pre)).
  // Training needs the activation's column-wise copy for wgrad: where one fused pass writes both copies, the
  // column-wise one is saved (half the bytes of the activation, and no second pass over it in the backward);
  // otherwise the activation itself is kept, from the same pass, and quantized column-wise in the backward.
  const std::optional<ImageSpec> images = images_of(q_input_, ctx.activation_images, ctx);
  if (keeps_columnwise_copy(act, pre.shape(), ctx) && q_input_->can_fuse_activation(pre, Usage::both)) {
    QuantizedTensor both = act_forward_quantized(act, pre, ctx.dtype, *q_input_, Usage::both, s, {}, nullptr, images);
    x_col_ = both;
    x_col_->rowwise_data = x_col_->rowwise_scale_inv = x_col_->rowwise_amax = x_col_->rowwise_image = Tensor();
    return both;
  }
  return act_forward_quantized(act, pre, ctx.dtype, *q_input_, Usage::rowwise, s, group_amax_reducer(ctx),
                               ctx.training ? &x_ : nullptr, images);
}

bool ParallelLinear::keeps_columnwise_copy(ActKind act, const Shape& pre, const RankContext& ctx) const {
  return ctx.training && q_input_ && act != ActKind::swiglu &&
         q_input_->can_fuse_activation(pre, ctx.dtype, ctx.device, Usage::both);
}

Tensor ParallelLinear::fprop(const GemmOperand& in, Tensor out, bool with_bias, RankContext& ctx, const Stream& s,
                             const Tensor& residual) {
  GemmOptions opts;
  opts.out_dtype = ctx.dtype;
  if (p_.bias && with_bias) opts.bias = p_.bias->value;
  opts.residual = residual;
  const GemmOperand w = weight_operand(ctx, s);
  if (!out.defined()) return gemm(in, w, GemmRole::fprop, opts, *ctx.gemm, s);
  gemm(in, w, GemmRole::fprop, out, opts, *ctx.gemm, s);
  return out;
}

Tensor ParallelLinear::column_gemm(const GemmOperand& in, Tensor out, RankContext& ctx, const Stream& s) {
  return fprop(in, std::move(out), true, ctx, s);  // [T, N/W]
}

// Row-parallel: x [T, N/W] → partial [T, H]. The bias joins rank 0's partial only, so the reduction adds it exactly
// once (inside the GEMM epilogue, before the output rounding).
Tensor ParallelLinear::row_gemm(const GemmOperand& in, Tensor out, RankContext& ctx, const Stream& s,
                                const Tensor& residual) {
  TE_CHECK(!residual.defined() || ctx.world() == 1, "a residual joins a row GEMM's output only at world size 1");
  return fprop(in, std::move(out), ctx.rank() == 0, ctx, s, residual);
}

// partial [T, H] → [T/W, H] summed over the group under SP, [T, H] all-reduced without it (in place).
Tensor ParallelLinear::reduce_partial(const Tensor& partial, RankContext& ctx, const Stream& s) {
  if (ctx.world() == 1) return partial;
  if (ctx.sequence_parallel) return reduce_scatter_along_first_dim(partial, *ctx.comm, false, s).output;
  all_reduce(partial, *ctx.comm, ReduceOp::sum, false, s).wait();
  return partial;
}

void ParallelLinear::bias_backward(const Tensor& dy, RankContext& ctx, const Stream& s) {
  if (p_.bias) add_to_grad(*p_.bias, bias_grad(dy, DType::f32, s), s);
  (void)ctx;
}

GemmOperand ParallelLinear::grad_local(const Tensor& dy, RankContext& ctx, const Stream& s) {
  return quantize_local(q_grad_, dy, Usage::both, ctx, s);
}

GatherResult ParallelLinear::gather_grad(const Tensor& dy, RankContext& ctx, const Stream& s) {
  return gather_along_first_dim(dy, *ctx.comm, q_grad_ ? &*q_grad_ : nullptr, Usage::both, false, s,
                                images_of(q_grad_, ctx.activation_images, ctx));
}

// Local M not a multiple of the block → the fallback gathers the saved high-precision copy: exact either way.
GatherResult ParallelLinear::regather_input(const Tensor& h, RankContext& ctx, const Stream& s) {
  return gather_along_first_dim(h, *ctx.comm, q_input_ ? &*q_input_ : nullptr, Usage::columnwise, true, s,
                                images_of(q_input_, ctx.activation_images, ctx));
}

GemmOperand ParallelLinear::input_columnwise(const Tensor& x, RankContext& ctx, const Stream& s) {
  if (x_col_) return GemmOperand(*x_col_);
  return quantize_local(q_input_, x.defined() ? x : x_, Usage::columnwise, ctx, s);
}

Tensor ParallelLinear::dgrad(const GemmOperand& dy, Tensor out, RankContext& ctx, const Stream& s) {
  GemmOptions opts;
  opts.out_dtype = ctx.dtype;
  const GemmOperand w = weight_operand(ctx, s);
  if (!out.defined()) return gemm(dy, w, GemmRole::dgrad, opts, *ctx.gemm, s);
  gemm(dy, w, GemmRole::dgrad, out, opts, *ctx.gemm, s);
  return out;
}

void ParallelLinear::wgrad(const GemmOperand& dy, const GemmOperand& x, RankContext& ctx, const Stream& s) {
  wgrad_into_grad(*p_.weight, dy, x, *ctx.gemm, s);
}

Tensor ParallelLinear::norm_backward(const Tensor& dh, const Tensor& x, Tensor out, RankContext& ctx, const Stream& s) {
  Tensor dgamma = Tensor::empty(p_.norm_weight->grad.shape(), DType::f32, ctx.device, s);
  Tensor dbeta = p_.norm_bias ? Tensor::empty(p_.norm_bias->grad.shape(), DType::f32, ctx.device, s) : Tensor();
  if (!out.defined()) out = Tensor::empty(x.shape(), ctx.dtype, ctx.device, s);
  te::norm_backward(norm_, dh, x, mean_, rstd_, p_.norm_weight->value, out, dgamma, dbeta, s);
  add_to_grad(*p_.norm_weight, dgamma, s);
  if (p_.norm_bias) add_to_grad(*p_.norm_bias, dbeta, s);
  return out;
}

void ParallelLinear::release_saved() {
  x_ = Tensor();
  x_col_.reset();
  mean_ = Tensor();
  rstd_ = Tensor();
}

void ParallelLinear::update_forward_scales(RankContext& ctx) {
  AmaxReducer reduce = group_amax_reducer(ctx);
  if (q_input_) q_input_->update_scale_after_step(ctx.stream, reduce);
  if (q_weight_) q_weight_->update_scale_after_step(ctx.stream, reduce);
}

void ParallelLinear::update_backward_scales(RankContext& ctx, const int32_t* skip) {
  if (q_grad_) q_grad_->update_scale_after_step(ctx.stream, group_amax_reducer(ctx), skip);
}

}  // namespace te
