#include "models/train_ops.h"

#include <cmath>

#include "comm/gather.h"
#include "engine/error.h"
#include "graph/autograd.h"
#include "models/model_kernel_call.h"
#include "models/rank_model.h"
#include "ops/act/act.h"
#include "ops/elementwise/squared_error.h"

namespace te {

static_assert(find_op(kTrainOps, "regather") == &kTrainOps[static_cast<size_t>(TrainOp::regather)]);
static_assert(find_op(kTrainOps, "optimizer") == &kTrainOps[static_cast<size_t>(TrainOp::optimizer)]);
static_assert(find_op(kTrainOps, "quantize_weights") == &kTrainOps[static_cast<size_t>(TrainOp::quantize_weights)]);
static_assert(find_op(kTrainOps, "weight_step") == &kTrainOps[static_cast<size_t>(TrainOp::weight_step)]);

bool train_value_held_by_binding(const Graph& g, const Value& v) {
  if (model_value_held_by_binding(g, v)) return true;
  if (v.producer < 0) return false;
  const Node& n = g.node(v.producer);
  if (is_train_op(n.op, {TrainOp::layernorm_backward, TrainOp::rmsnorm_backward}))
    return v.id != n.outputs[0];  // dgamma, dbeta
  return is_train_op(n.op, {TrainOp::bias_grad, TrainOp::grad_quantize, TrainOp::wgrad_input, TrainOp::wgrad,
                            TrainOp::mse_loss, TrainOp::loss_gate});
}

namespace train_ops {
namespace {

// `t` quantized in the format named by attribute `attr` with `usages`, or high precision without that attribute.
ValueType train_typed(const Node& n, const char* attr, ValueType t, Usage usages) {
  t.quant.reset();
  t.usages = Usage::none;
  if (!n.attrs.has(attr)) return t;
  const std::string& name = n.attr<std::string>(attr);
  const auto f = quant_format_from_name(name);
  TE_CHECK(f.has_value(), "node '" << n.name << "': " << attr << " '" << name << "' is not a quantized format");
  t.quant = *f;
  t.usages = usages;
  return t;
}

ValueType train_gathered(const Node& n, ValueType t) {
  TE_CHECK(t.shape.size() == 2 && t.sharding == Sharding::split(0),
           "node '" << n.name << "': gathers a 2-D split(0) value, got " << t.str());
  t.shape[0] *= n.attr<int64_t>("world");
  t.sharding = Sharding::replicated();
  return t;
}

RankContext& train_ctx(const KernelCall& c) { return *model_ops::binding(c).ctx; }

}  // namespace

std::vector<ValueType> infer_norm_backward(const Node&, const std::vector<ValueType>& in) {
  return {in.begin() + 1, in.end()};  // dx like x, dgamma like gamma, dbeta like beta
}

std::vector<ValueType> infer_type_of_input1(const Node&, const std::vector<ValueType>& in) { return {in[1]}; }

std::vector<ValueType> infer_grad_quantize(const Node& n, const std::vector<ValueType>& in) {
  return {train_typed(n, "grad_format", in[0], Usage::both)};
}

std::vector<ValueType> infer_grad_gather(const Node& n, const std::vector<ValueType>& in) {
  return {train_typed(n, "grad_format", train_gathered(n, in[0]), Usage::both)};
}

std::vector<ValueType> infer_regather(const Node& n, const std::vector<ValueType>& in) {
  return {train_typed(n, "format", train_gathered(n, in[0]), Usage::columnwise)};
}

std::vector<ValueType> infer_wgrad_input(const Node& n, const std::vector<ValueType>& in) {
  return {train_typed(n, "format", in[0], Usage::columnwise)};
}

std::vector<ValueType> infer_dgrad(const Node& n, const std::vector<ValueType>& in) {
  TE_CHECK(in[0].shape.size() == 2 && in[1].shape.size() == 2 && in[0].shape[1] == in[1].shape[0],
           "node '" << n.name << "': dgrad of " << in[0].str() << " through weight " << in[1].str());
  ValueType out;
  out.shape = {in[0].shape[0], in[1].shape[1]};
  out.dtype = in[0].dtype;
  out.device = in[0].device;
  const std::string& sh = n.attr<std::string>("sharding");
  out.sharding = sh == "partial" ? Sharding::partial() : sh == "split1" ? Sharding::split(1) : in[0].sharding;
  return {out};
}

std::vector<ValueType> infer_wgrad(const Node&, const std::vector<ValueType>& in) { return {in[2]}; }

std::vector<ValueType> infer_mse_loss(const Node& n, const std::vector<ValueType>& in) {
  TE_CHECK(in[0].shape == in[1].shape,
           "node '" << n.name << "': output " << in[0].str() << " and target " << in[1].str() << " differ in shape");
  ValueType sum;
  sum.shape = {1};
  sum.dtype = DType::f32;
  sum.device = in[0].device;
  return {sum, in[0]};
}

std::vector<ValueType> infer_same(const Node&, const std::vector<ValueType>& in) { return {in[0]}; }

std::vector<ValueType> infer_nothing(const Node&, const std::vector<ValueType>&) { return {}; }

void run_norm_backward(KernelCall& c) {
  ParallelLinear& l = model_ops::linear(c);
  l.norm_backward(model_ops::tensor_input(c, 0), model_ops::tensor_input(c, 1), c.outputs[0], train_ctx(c), c.stream);
  model_ops::hold_output(c, 1, GemmOperand(l.params().norm_weight->grad));
  if (c.node.outputs.size() > 2) model_ops::hold_output(c, 2, GemmOperand(l.params().norm_bias->grad));
}

void run_bias_grad(KernelCall& c) {
  ParallelLinear& l = model_ops::linear(c);
  l.bias_backward(model_ops::tensor_input(c, 0), train_ctx(c), c.stream);
  model_ops::hold(c, GemmOperand(l.params().bias->grad));
}

void run_grad_quantize(KernelCall& c) {
  model_ops::hold(c, model_ops::linear(c).grad_local(model_ops::tensor_input(c, 0), train_ctx(c), c.stream));
}

void run_grad_gather(KernelCall& c) {
  const GatherResult g = model_ops::linear(c).gather_grad(model_ops::tensor_input(c, 0), train_ctx(c), c.stream);
  model_ops::hold(c, gathered_operand(g));
}

void run_regather(KernelCall& c) {
  GatherResult g = model_ops::linear(c).regather_input(model_ops::tensor_input(c, 0), train_ctx(c), c.stream);
  g.work.wait();
  model_ops::hold(c, gathered_operand(g));
}

void run_wgrad_input(KernelCall& c) {
  // own: the fused activation kept the copy (or the activation) inside the linear; the input is only an edge.
  const bool own = c.node.attr_or<bool>("own", false);
  ParallelLinear& l = model_ops::linear(c);
  model_ops::hold(c, l.input_columnwise(own ? Tensor() : model_ops::tensor_input(c, 0), train_ctx(c), c.stream));
  // Nothing else reads the kept copy: it goes once wgrad has read this operand, not at the end of the step.
  if (own) l.release_activation_copy();
}

void run_dgrad(KernelCall& c) {
  model_ops::linear(c).dgrad(model_ops::operand(c, 0), c.outputs[0], train_ctx(c), c.stream);
}

void run_wgrad(KernelCall& c) {
  ParallelLinear& l = model_ops::linear(c);
  l.wgrad(model_ops::operand(c, 0), model_ops::operand(c, 1), train_ctx(c), c.stream);
  model_ops::hold(c, GemmOperand(l.params().weight->grad));
}

void run_act_backward(KernelCall& c) {
  act_backward(model_ops::act_of(c.node), model_ops::tensor_input(c, 0), model_ops::tensor_input(c, 1), c.outputs[0],
               c.stream);
}

void run_mse_loss(KernelCall& c) {
  ModelBinding& b = model_ops::binding(c);
  // A training forward ends with the delayed-scaling update, before the loss: the backward quantizes with the
  // updated scales. (An eval forward leaves the history as it was.)
  if (c.node.attr_or<bool>("update_scales", true)) b.model->update_forward_scales();
  const Tensor out = model_ops::tensor_input(c, 0);
  const double n = b.model->loss_elements(out);
  // One pass: Σ (out − target)² and its gradient (2/n)(out − target).
  SquaredError se =
      squared_error(out, model_ops::tensor_input(c, 1), static_cast<float>(2.0 / n), b.ctx->dtype, c.stream);
  model_ops::hold_output(c, 0, GemmOperand(se.sum));
  model_ops::hold_output(c, 1, GemmOperand(se.grad));
}

// The loss node already computed its gradient: the seed (ones) is not read; the sum crosses the group and becomes
// the loss and the step's skip flag in loss_gate (models/step_control.h).
void backward_mse_loss(BackwardBuilder& bb) {
  if (!bb.needs_grad(0)) return;
  const Node& n = bb.node();
  int sum = bb.output(0);
  if (n.attr<bool>("sp")) sum = bb.add1(train_op(TrainOp::sum_all_reduce), {sum}, {}, "loss.all_reduce");
  bb.set_grad_input(0, bb.add1(train_op(TrainOp::loss_gate), {sum, bb.output(1)}, {}, "loss.gate"));
}

void run_sum_all_reduce(KernelCall& c) {
  TE_CHECK(!c.inputs[0].defined(), "node '" << c.node.name
                                            << "': reduces in place, so its input must be held by "
                                               "the binding, not an arena buffer");
  Tensor t = model_ops::tensor_input(c, 0);
  RankContext& ctx = train_ctx(c);
  all_reduce(t, *ctx.comm, ReduceOp::sum, false, c.stream).wait();
  model_ops::hold(c, GemmOperand(t));
}

void run_loss_gate(KernelCall& c) {
  ModelBinding& b = model_ops::binding(c);
  const Tensor grad = model_ops::tensor_input(c, 1);
  // On the device: the loss, its copy to the host (read after the step) and the flag that skips the update.
  b.control->gate(model_ops::tensor_input(c, 0), b.model->loss_elements(grad), c.stream);
  model_ops::hold(c, GemmOperand(grad));
}

void run_optimizer(KernelCall& c) {
  ModelBinding& b = model_ops::binding(c);
  b.model->finish_grad_step(b.control->skip());
  b.model->apply_optimizer(*b.control, c.node.attr_or<bool>("update", true),
                           c.node.attr_or<std::vector<int64_t>>("apart", {}), c.stream);
  b.model->discard_saved();
}

void run_weight_step(KernelCall& c) {
  ModelBinding& b = model_ops::binding(c);
  b.model->step_weight(static_cast<size_t>(c.node.attr<int64_t>("param")), *b.control, c.stream);
}

void run_quantize_weights(KernelCall& c) { model_ops::binding(c).model->quantize_weights(train_ctx(c), c.stream); }

}  // namespace train_ops
}  // namespace te
