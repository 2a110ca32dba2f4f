#include "tests/models/eager_reference.h"

#include <cmath>
#include <optional>
#include <vector>

#include "comm/gather.h"
#include "engine/error.h"
#include "ops/act/act.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/squared_error.h"

namespace te::test {
namespace {

using BranchStages = RankModel::BranchStages;

// What one stage keeps from its training forward for the backward.
struct Saved {
  Tensor act_in;       // an activation's input
  Tensor x, h;         // a linear's input and its GEMM's high-precision input (the norm output, or x)
  bool fused = false;  // a row-parallel linear whose input the activation before it quantized (it kept the copy)
};

// One linear's forward phases on ctx.stream: norm → gather (SP) or local quantize → GEMM (→ reduction).
Tensor linear_forward(ParallelLinear& l, const Tensor& x, RankContext& ctx, Saved& sv) {
  const Stream& s = ctx.stream;
  if (l.mode() == ParallelMode::column) {  // x [T/W, H] (SP) or [T, H]
    if (l.fuses_norm_quantize(ctx)) return l.column_gemm(GemmOperand(l.norm_quantized(x, ctx, s)), Tensor(), ctx, s);
    const Tensor h = l.has_norm() ? l.norm(x, Tensor(), ctx, s) : x;
    if (ctx.training) sv.x = x, sv.h = h;
    return l.column_gemm(ctx.gathers() ? l.gather_input(h, ctx, s) : l.local_input(h, ctx, s), Tensor(), ctx, s);
  }
  if (ctx.training) sv.x = x;
  return l.reduce_partial(l.row_gemm(l.local_input(x, ctx, s), Tensor(), ctx, s), ctx, s);
}

// linear_forward(act(pre)), the activation fused with the layer's input quantization where the layer does that.
Tensor linear_forward_after_activation(ParallelLinear& l, ActKind act, const Tensor& pre, RankContext& ctx,
                                       Saved& sv) {
  if (!l.fuses_activation_quantize()) return linear_forward(l, act_forward(act, pre, ctx.dtype, ctx.stream), ctx, sv);
  sv.fused = ctx.training;
  const Stream& s = ctx.stream;
  return l.reduce_partial(l.row_gemm(GemmOperand(l.act_quantized(act, pre, ctx, s)), Tensor(), ctx, s), ctx, s);
}

// One linear's backward phases: parameter gradients accumulated, dx returned, what the forward saved released.
Tensor linear_backward(ParallelLinear& l, const Tensor& dy, RankContext& ctx, Saved& sv) {
  TE_CHECK(sv.x.defined() || sv.fused, "backward without a training forward");
  const Stream& s = ctx.stream;
  l.bias_backward(dy, ctx, s);
  if (l.mode() == ParallelMode::column) {
    // dy [T, N/W] is local to this rank's features: both copies quantized without communication; the norm output's
    // column-wise copy re-gathered for wgrad, overlapping the dgrad GEMM.
    const GemmOperand dy_op = l.grad_local(dy, ctx, s);
    std::optional<GatherResult> g;
    if (ctx.gathers()) g = l.regather_input(sv.h, ctx, s);
    Tensor dx = l.dgrad(dy_op, Tensor(), ctx, s);
    ReduceScatterResult rs;
    if (ctx.world() > 1 && ctx.sequence_parallel) {
      rs = reduce_scatter_along_first_dim(dx, *ctx.comm, true, s);  // overlaps the wgrad GEMM
    } else if (ctx.world() > 1) {
      all_reduce(dx, *ctx.comm, ReduceOp::sum, false, s).wait();
    }
    GemmOperand h_op = GemmOperand(sv.h);
    if (g) {
      g->work.wait();
      h_op = gathered_operand(*g);
    } else {
      h_op = l.input_columnwise(sv.h, ctx, s);
    }
    l.wgrad(dy_op, h_op, ctx, s);  // [N/W, H]
    if (ctx.gathers()) {
      rs.work.wait();
      dx = rs.output;
    }
    if (l.has_norm()) dx = l.norm_backward(dx, sv.x, Tensor(), ctx, s);
    sv = Saved();
    l.discard_saved();
    return dx;
  }
  // Row-parallel: dy [T/W, H] (SP) gathered to [T, H] with both copies, else quantized locally; wgrad before dgrad,
  // so the saved input and its column-wise copy are gone before dgrad allocates dx.
  const GemmOperand dy_op = ctx.gathers() ? gathered_operand(l.gather_grad(dy, ctx, s)) : l.grad_local(dy, ctx, s);
  {
    const GemmOperand x_op = l.input_columnwise(sv.fused ? Tensor() : sv.x, ctx, s);
    l.wgrad(dy_op, x_op, ctx, s);  // [H, N/W]
    sv = Saved();
    l.discard_saved();
  }
  return l.dgrad(dy_op, Tensor(), ctx, s);  // [T, N/W]
}

// One branch forward; `saved` keeps what each stage's backward reads (training).
Tensor run_branch(RankModel& m, BranchStages& b, const Tensor& x, std::vector<Saved>& saved) {
  RankContext& ctx = m.ctx();
  Tensor h = x;
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i].linear) {
      h = linear_forward(*b[i].linear, h, ctx, saved[i]);
      continue;
    }
    TE_CHECK(b[i].act.has_value(), "the eager reference has no attention: test attention models against the "
                                   "attention reference and other tensor-parallel layouts instead");
    if (ctx.training) saved[i].act_in = h;
    const ActKind act = *b[i].act;
    if (i + 1 < b.size() && b[i + 1].linear) {  // the activation feeds FC2: FC2 fuses it
      ++i;
      h = linear_forward_after_activation(*b[i].linear, act, h, ctx, saved[i]);
    } else {
      h = act_forward(act, h, ctx.dtype, ctx.stream);
    }
  }
  return h;
}

Tensor backprop_branch(RankModel& m, BranchStages& b, const Tensor& dy, std::vector<Saved>& saved) {
  RankContext& ctx = m.ctx();
  Tensor d = dy;
  bool own = false;  // d is this branch's own tensor (not the caller's dy, which the residual still reads)
  for (size_t k = b.size(); k-- > 0;) {
    if (b[k].linear) {
      d = linear_backward(*b[k].linear, d, ctx, saved[k]);
      own = true;
      continue;
    }
    const ActKind act = *b[k].act;
    const Tensor& act_in = saved[k].act_in;
    if (own && act != ActKind::swiglu && d.is_contiguous() && d.dtype() == act_in.dtype())
      act_backward(act, d, act_in, d, ctx.stream);  // in place, as the graph's node does
    else
      d = act_backward(act, d, act_in, ctx.stream);
    saved[k] = Saved();
  }
  return d;
}

float loss_and_grad(RankModel& m, const Tensor& out, const Tensor& target, Tensor* grad) {
  RankContext& ctx = m.ctx();
  const double n = m.loss_elements(out);
  SquaredError se = squared_error(out, target, static_cast<float>(2.0 / n), ctx.dtype, ctx.stream);
  if (ctx.gathers()) all_reduce(se.sum, *ctx.comm, ReduceOp::sum, false, ctx.stream).wait();
  if (grad) *grad = se.grad;
  return static_cast<float>(se.sum.to_f32_vector(ctx.stream)[0] / n);
}

}  // namespace

Tensor eager_forward(RankModel& m, const Tensor& x) {
  Tensor h = x;
  for (auto& branches : m.layers())
    for (BranchStages& b : branches) {
      std::vector<Saved> saved(b.size());
      h = add(h, run_branch(m, b, h, saved), Tensor(), m.ctx().stream);  // residual
    }
  m.update_forward_scales();
  return h;
}

float eager_forward_backward(RankModel& m, const Tensor& x, const Tensor& target) {
  RankContext& ctx = m.ctx();
  m.begin_grad_step();
  auto& layers = m.layers();
  std::vector<std::vector<std::vector<Saved>>> saved(layers.size());  // [layer][branch][stage]
  Tensor h = x;
  for (size_t l = 0; l < layers.size(); ++l) {
    saved[l].resize(layers[l].size());
    for (size_t br = 0; br < layers[l].size(); ++br) {
      saved[l][br].resize(layers[l][br].size());
      h = add(h, run_branch(m, layers[l][br], h, saved[l][br]), Tensor(), ctx.stream);
    }
  }
  m.update_forward_scales();
  Tensor dy;
  const float loss = loss_and_grad(m, h, target, &dy);
  if (!std::isfinite(loss)) {  // the reference decides on the host: no backward (nothing to fold, every grad 0)
    m.finish_grad_step(nullptr);
    return loss;
  }
  for (size_t l = layers.size(); l-- > 0;)
    for (size_t br = layers[l].size(); br-- > 0;)
      dy = add(dy, backprop_branch(m, layers[l][br], dy, saved[l][br]), Tensor(), ctx.stream);  // residual
  m.finish_grad_step(nullptr);
  return loss;
}

float eager_train_step(RankModel& m, const Tensor& x, const Tensor& target, int64_t step, double lr) {
  const float loss = eager_forward_backward(m, x, target);
  if (!std::isfinite(loss)) return loss;
  RankContext& ctx = m.ctx();
  for (const RankParam& p : m.params())
    if (p.grad_all_reduce) all_reduce(p.grad, *ctx.comm, ReduceOp::sum, false, ctx.stream).wait();
  StepControl control(ctx.device, ctx.stream);  // the scalars where the optimizer reads them; skip stays 0
  control.set_scalars(m.spec().run.optimizer, step, lr);
  control.upload(ctx.stream);
  m.apply_optimizer(control, true, {}, ctx.stream);
  ctx.stream.synchronize();  // before the control's buffers go
  return loss;
}

}  // namespace te::test
