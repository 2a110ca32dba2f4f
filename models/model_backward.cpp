// Backward rules of the model op kinds (models/model_ops.h). Each appends the training op kinds
// (models/train_ops.h) that run the ParallelLinear backward phases, with the quantizers the forward used:
//
//   column GEMM   bias grad, dy quantized both ways, wgrad (input re-gathered column-wise under SP, quantized
//                 column-wise locally otherwise), dgrad → partial sums (all-reduced here without SP)
//   sp_gather     the reduce-scatter of the input gradient's partial sums
//   row GEMM      bias grad from the local dy, wgrad with the input's column-wise copy, dgrad
//   reduce        reduce-scatter: the gather of dy (both copies, quantized where the gather allows);
//                 all-reduce: the identity (every rank holds dy)
//   norm, act     their backward kernels (norm: gamma/beta grads from the statistics the forward saved)
//   residual add  the gradient to both inputs (accumulation is the residual add op itself)
#include "engine/error.h"
#include "graph/autograd.h"
#include "models/model_ops.h"
#include "models/train_ops.h"

namespace te::model_ops {
namespace {

Attrs backward_attrs(const Node& n) {
  return Attrs{{"world", n.attr<int64_t>("world")}};
}

// `a` with attribute `name` copied from `from`, when it has it.
Attrs& copy_attr(Attrs& a, const Node& from, const char* name) {
  if (from.attrs.has(name)) a.set(name, from.attr<std::string>(name));
  return a;
}

const Node* producer_of(const BackwardBuilder& bb, int value) {
  const int p = bb.graph().value(value).producer;
  return p >= 0 ? &bb.graph().node(p) : nullptr;
}

bool is_op(const Node* n, ModelOp op) { return n != nullptr && is_model_op(n->op, op); }
bool is_op(const Node* n, TrainOp op) { return n != nullptr && is_train_op(n->op, {op}); }

// dy as the GEMMs read it: quantized both ways locally, or dy itself under recipe none.
int quantized_grad(BackwardBuilder& bb, int dy) {
  const Node& n = bb.node();
  if (!n.attrs.has("grad_format")) return dy;
  Attrs a = backward_attrs(n);
  return bb.add1(train_op(TrainOp::grad_quantize), {dy}, copy_attr(a, n, "grad_format"), n.name + ".grad_quantize");
}

void bias_and_weight_grads(BackwardBuilder& bb, int dy_local, int dq, int x_col) {
  const Node& n = bb.node();
  if (n.inputs.size() == 3 && bb.needs_grad(2))
    bb.set_grad_input(
        2, bb.add1(train_op(TrainOp::bias_grad), {dy_local, bb.input(2)}, backward_attrs(n), n.name + ".bias_grad"));
  if (bb.needs_grad(1))
    bb.set_grad_input(
        1, bb.add1(train_op(TrainOp::wgrad), {dq, x_col, bb.input(1)}, backward_attrs(n), n.name + ".wgrad"));
}

// The GEMM input's column-wise copy for wgrad, from what produced the forward input `in` (a quantize, a gather or
// a fused activation) — the high-precision source of the forward input, not its row-wise copy.
int wgrad_operand(BackwardBuilder& bb, int dq) {
  const Node& n = bb.node();
  const Node* p = producer_of(bb, n.inputs[0]);
  Attrs a = backward_attrs(n);
  if (is_op(p, ModelOp::sp_gather))
    return bb.add1(train_op(TrainOp::regather), {bb.save(p->inputs[0]), dq}, copy_attr(a, *p, "format"),
                   n.name + ".regather");
  if (is_op(p, ModelOp::quantize))
    return bb.add1(train_op(TrainOp::wgrad_input), {bb.save(p->inputs[0]), dq}, copy_attr(a, *p, "format"),
                   n.name + ".wgrad_input");
  if (is_op(p, ModelOp::act_quantize))
    return bb.add1(train_op(TrainOp::wgrad_input), {bb.input(0), dq}, copy_attr(a, *p, "format").set("own", true),
                   n.name + ".wgrad_input");
  return bb.input(0);  // high precision: wgrad reads it as it is
}

}  // namespace

void backward_norm(BackwardBuilder& bb) {
  const Node& n = bb.node();
  const bool layernorm = n.inputs.size() == 3;
  std::vector<int> in{bb.grad_output(0), bb.input(0), bb.input(1)};
  if (layernorm) in.push_back(bb.input(2));
  const std::vector<int> out = bb.add(train_op(layernorm ? TrainOp::layernorm_backward : TrainOp::rmsnorm_backward),
                                      std::move(in), backward_attrs(n), n.name + "_backward");
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (bb.needs_grad(static_cast<int>(i))) bb.set_grad_input(static_cast<int>(i), out[i]);
}

void backward_sp_gather(BackwardBuilder& bb) {
  if (!bb.needs_grad(0)) return;
  const Node& n = bb.node();
  bb.set_grad_input(0, bb.add1(model_op(ModelOp::reduce), {bb.grad_output(0)}, backward_attrs(n).set("sp", true),
                               n.name + "_backward.reduce_scatter"));
}

void backward_quantize(BackwardBuilder& bb) {
  if (bb.needs_grad(0)) bb.set_grad_input(0, bb.grad_output(0));  // the gradient passes straight through
}

void backward_column_gemm(BackwardBuilder& bb) {
  const Node& n = bb.node();
  const int dy = bb.grad_output(0);  // [T, N/W]: local to this rank's features
  const int dq = quantized_grad(bb, dy);
  bias_and_weight_grads(bb, dy, dq, bb.needs_grad(1) ? wgrad_operand(bb, dq) : -1);
  if (!bb.needs_grad(0)) return;
  const int64_t world = n.attr<int64_t>("world");
  int dx = bb.add1(train_op(TrainOp::dgrad), {dq, bb.input(1)},
                   backward_attrs(n).set("sharding", std::string(world > 1 ? "partial" : "same")), n.name + ".dgrad");
  // Under SP the gather's backward reduce-scatters the partial sums; without it every rank holds all tokens and
  // the sums are all-reduced here.
  if (world > 1 && !is_op(producer_of(bb, n.inputs[0]), ModelOp::sp_gather))
    dx = bb.add1(model_op(ModelOp::reduce), {dx}, backward_attrs(n).set("sp", false), n.name + ".dgrad_all_reduce");
  bb.set_grad_input(0, dx);
}

void backward_act(BackwardBuilder& bb) {
  if (!bb.needs_grad(0)) return;
  const Node& n = bb.node();
  // In place over dy where the planner can (same size, no later reader): the activation's gradient is the largest
  // tensor of the backward.
  bb.set_grad_input(0, bb.add1(train_op(TrainOp::act_backward), {bb.grad_output(0), bb.input(0)},
                               {{"act", n.attr<std::string>("act")}, {"in_place", int64_t{0}}}, n.name + "_backward"));
}

void backward_row_gemm(BackwardBuilder& bb) {
  const Node& n = bb.node();
  const int g = bb.grad_output(0);
  // Under SP the gradient arrives gathered (reduce's backward); the bias gradient reads the local rows before it.
  const Node* gather = producer_of(bb, g);
  const bool gathered = is_op(gather, TrainOp::grad_gather);
  const int dy_local = gathered ? gather->inputs[0] : g;
  const int dq = gathered ? g : quantized_grad(bb, g);
  bias_and_weight_grads(bb, dy_local, dq, bb.needs_grad(1) ? wgrad_operand(bb, dq) : -1);
  if (!bb.needs_grad(0)) return;
  const std::string sh = n.attr<int64_t>("world") > 1 ? "split1" : "same";  // [T, N/W]: this rank's features
  bb.set_grad_input(0, bb.add1(train_op(TrainOp::dgrad), {dq, bb.input(1)}, backward_attrs(n).set("sharding", sh),
                               n.name + ".dgrad"));
}

void backward_reduce(BackwardBuilder& bb) {
  if (!bb.needs_grad(0)) return;
  const Node& n = bb.node();
  const int dy = bb.grad_output(0);
  if (!n.attr<bool>("sp")) {
    bb.set_grad_input(0, dy);
    return;
  }
  Attrs a = backward_attrs(n);
  bb.set_grad_input(0, bb.add1(train_op(TrainOp::grad_gather), {dy}, copy_attr(a, n, "grad_format"),
                               n.name + "_backward.grad_gather"));
}

void backward_residual(BackwardBuilder& bb) {
  const int dy = bb.grad_output(0);
  for (int i = 0; i < 2; ++i)
    if (bb.needs_grad(i)) bb.set_grad_input(i, dy);
}

}  // namespace te::model_ops
