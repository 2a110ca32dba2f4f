#include "tests/models/eager_reference.h"

#include <cmath>
#include <vector>

#include "comm/gather.h"
#include "engine/error.h"
#include "ops/act/act.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/squared_error.h"

namespace te::test {
namespace {

using BranchStages = RankModel::BranchStages;

// One branch forward; `act_in` keeps each activation's input for the backward (training).
Tensor run_branch(RankModel& m, BranchStages& b, const Tensor& x, std::vector<Tensor>& act_in) {
  RankContext& ctx = m.ctx();
  Tensor h = x;
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i].linear) {
      h = b[i].linear->forward(h, ctx);
      continue;
    }
    TE_CHECK(b[i].act.has_value(), "the eager reference has no attention: test attention models against the "
                                   "attention reference and other tensor-parallel layouts instead");
    if (ctx.training) act_in[i] = h;
    const ActKind act = *b[i].act;
    if (i + 1 < b.size() && b[i + 1].linear)  // the activation feeds FC2: FC2 fuses it
      h = b[++i].linear->forward_after_activation(act, h, ctx);
    else
      h = act_forward(act, h, ctx.dtype, ctx.stream);
  }
  return h;
}

Tensor backprop_branch(RankModel& m, BranchStages& b, const Tensor& dy, std::vector<Tensor>& act_in) {
  RankContext& ctx = m.ctx();
  Tensor d = dy;
  bool own = false;  // d is this branch's own tensor (not the caller's dy, which the residual still reads)
  for (size_t k = b.size(); k-- > 0;) {
    if (b[k].linear) {
      d = b[k].linear->backward(d, ctx);
      own = true;
      continue;
    }
    const ActKind act = *b[k].act;
    if (own && act != ActKind::swiglu && d.is_contiguous() && d.dtype() == act_in[k].dtype())
      act_backward(act, d, act_in[k], d, ctx.stream);  // in place, as the graph's node does
    else
      d = act_backward(act, d, act_in[k], ctx.stream);
    act_in[k] = Tensor();
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
      std::vector<Tensor> act_in(b.size());
      h = add(h, run_branch(m, b, h, act_in), Tensor(), m.ctx().stream);  // residual
    }
  m.update_forward_scales();
  return h;
}

float eager_forward_backward(RankModel& m, const Tensor& x, const Tensor& target) {
  RankContext& ctx = m.ctx();
  m.begin_grad_step();
  auto& layers = m.layers();
  std::vector<std::vector<std::vector<Tensor>>> act_in(layers.size());  // [layer][branch][stage]
  Tensor h = x;
  for (size_t l = 0; l < layers.size(); ++l) {
    act_in[l].resize(layers[l].size());
    for (size_t br = 0; br < layers[l].size(); ++br) {
      act_in[l][br].resize(layers[l][br].size());
      h = add(h, run_branch(m, layers[l][br], h, act_in[l][br]), Tensor(), ctx.stream);
    }
  }
  m.update_forward_scales();
  Tensor dy;
  const float loss = loss_and_grad(m, h, target, &dy);
  if (!std::isfinite(loss)) {
    m.finish_grad_step(false);
    return loss;
  }
  for (size_t l = layers.size(); l-- > 0;)
    for (size_t br = layers[l].size(); br-- > 0;)
      dy = add(dy, backprop_branch(m, layers[l][br], dy, act_in[l][br]), Tensor(), ctx.stream);  // residual
  m.finish_grad_step(true);
  return loss;
}

float eager_train_step(RankModel& m, const Tensor& x, const Tensor& target, int64_t step, double lr) {
  const float loss = eager_forward_backward(m, x, target);
  if (!std::isfinite(loss)) return loss;
  RankContext& ctx = m.ctx();
  for (const RankParam& p : m.params())
    if (p.grad_all_reduce) all_reduce(p.grad, *ctx.comm, ReduceOp::sum, false, ctx.stream).wait();
  m.apply_optimizer(step, lr);
  return loss;
}

}  // namespace te::test
