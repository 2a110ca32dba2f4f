// The op kinds a training step adds to the model's forward (models/model_ops.h): what the backward rules append —
// each a ParallelLinear backward phase (models/parallel_linear.h) —, the MSE loss, and the optimizer. Parameter
// gradients are values held by the binding whose bytes are RankParam::grad, so the gradient writes (first contribution
// writes, later ones add: models/param_grad.h) need no zero fill.
//
// Attributes: linear, world (as the forward ops); format / grad_format (string, QuantFormat names: the input's and
// the gradient's quantized formats); sharding (string, dgrad: "partial" | "split1" | "same"); own (bool,
// wgrad_input: the linear's own saved copy from a fused activation); sp (bool, mse_loss: the loss sums over ranks);
// update_scales (bool, mse_loss, default true: the delayed-scaling update after the forward; false for an eval);
// update (bool, optimizer, default true: false finishes the gradients and leaves the weights); apart (int list,
// optimizer: the parameters weight_step nodes update); param (int, weight_step: the parameter's index).
#pragma once
#include <array>
#include <initializer_list>

#include "graph/op_table.h"

namespace te {

namespace train_ops {
std::vector<ValueType> infer_norm_backward(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_type_of_input1(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_grad_quantize(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_grad_gather(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_regather(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_wgrad_input(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_dgrad(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_wgrad(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_mse_loss(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_same(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_nothing(const Node& n, const std::vector<ValueType>& in);

void run_norm_backward(KernelCall& c);
void run_bias_grad(KernelCall& c);
void run_grad_quantize(KernelCall& c);
void run_grad_gather(KernelCall& c);
void run_regather(KernelCall& c);
void run_wgrad_input(KernelCall& c);
void run_dgrad(KernelCall& c);
void run_wgrad(KernelCall& c);
void run_act_backward(KernelCall& c);
void run_attention_backward(KernelCall& c);
void run_mse_loss(KernelCall& c);
void backward_mse_loss(BackwardBuilder& bb);
void run_sum_all_reduce(KernelCall& c);
void run_loss_gate(KernelCall& c);
void run_optimizer(KernelCall& c);
void run_weight_step(KernelCall& c);
void run_quantize_weights(KernelCall& c);
}  // namespace train_ops

enum class TrainOp {
  layernorm_backward,
  rmsnorm_backward,
  bias_grad,
  grad_quantize,
  grad_gather,
  regather,
  wgrad_input,
  dgrad,
  wgrad,
  act_backward,
  attention_backward,
  mse_loss,
  sum_all_reduce,
  loss_gate,
  optimizer,
  quantize_weights,
  weight_step
};

// Inputs → outputs:
//   layernorm_backward (dh, x, gamma, beta) → (dx, dgamma, dbeta); rmsnorm_backward (dh, x, gamma) → (dx, dgamma)
//   bias_grad (dy, bias) → dbias            grad_quantize (dy) → dy both ways      grad_gather (dy) → [T, H] both
//   regather (h, dy_q) → [T, K] column-wise (dy_q orders it after the gradient, overlapping the dgrad GEMM)
//   wgrad_input (x, dy_q) → x column-wise   dgrad (dy_q, W) → dx     wgrad (dy_q, x_col, W) → dW
//   act_backward (dy, pre) → dpre           mse_loss (out, target) → (Σ (out − target)², its gradient)
//   attention_backward (dout, qkv, out, lse) → dqkv (the forward node's attributes)
//   sum_all_reduce (t) → t summed over the group, in place   loss_gate (sum, grad) → grad (reads the loss)
//   optimizer (every final gradient) → nothing: the fp32 masters, optimizer state and model-dtype copies change
//   weight_step (dW) → nothing: one GEMM weight's update, on the side stream beside the rest of the backward, ordered
//     after every node that reads the weight (it rewrites the weight's copies in place: GraphBuilder::order_after)
//   quantize_weights (x: orders it first) → nothing: every linear's quantized weight cache, from its model-dtype
//     copy, which then goes (the step's first node, so no activation is alive beside both copies of a weight)
inline constexpr std::array<OpDef, 17> kTrainOps{{
    {"layernorm_backward", 4, 3, StreamClass::compute, false, train_ops::infer_norm_backward, nullptr,
     train_ops::run_norm_backward},
    {"rmsnorm_backward", 3, 2, StreamClass::compute, false, train_ops::infer_norm_backward, nullptr,
     train_ops::run_norm_backward},
    {"bias_grad", 2, 1, StreamClass::compute, false, train_ops::infer_type_of_input1, nullptr,
     train_ops::run_bias_grad},
    {"grad_quantize", 1, 1, StreamClass::compute, false, train_ops::infer_grad_quantize, nullptr,
     train_ops::run_grad_quantize},
    {"grad_gather", 1, 1, StreamClass::comm, true, train_ops::infer_grad_gather, nullptr, train_ops::run_grad_gather},
    {"regather", 2, 1, StreamClass::comm, true, train_ops::infer_regather, nullptr, train_ops::run_regather},
    {"wgrad_input", 2, 1, StreamClass::compute, false, train_ops::infer_wgrad_input, nullptr,
     train_ops::run_wgrad_input},
    {"dgrad", 2, 1, StreamClass::compute, false, train_ops::infer_dgrad, nullptr, train_ops::run_dgrad},
    {"wgrad", 3, 1, StreamClass::compute, false, train_ops::infer_wgrad, nullptr, train_ops::run_wgrad},
    {"act_backward", 2, 1, StreamClass::compute, false, train_ops::infer_type_of_input1, nullptr,
     train_ops::run_act_backward},
    {"attention_backward", 4, 1, StreamClass::compute, false, train_ops::infer_type_of_input1, nullptr,
     train_ops::run_attention_backward},
    {"mse_loss", 2, 2, StreamClass::compute, false, train_ops::infer_mse_loss, train_ops::backward_mse_loss,
     train_ops::run_mse_loss},
    {"sum_all_reduce", 1, 1, StreamClass::comm, false, train_ops::infer_same, nullptr, train_ops::run_sum_all_reduce},
    {"loss_gate", 2, 1, StreamClass::compute, false, train_ops::infer_type_of_input1, nullptr,
     train_ops::run_loss_gate},
    {"optimizer", -1, 0, StreamClass::compute, false, train_ops::infer_nothing, nullptr, train_ops::run_optimizer},
    {"quantize_weights", 1, 0, StreamClass::compute, false, train_ops::infer_nothing, nullptr,
     train_ops::run_quantize_weights},
    {"weight_step", 1, 0, StreamClass::side, false, train_ops::infer_nothing, nullptr, train_ops::run_weight_step},
}};

inline const OpDef& train_op(TrainOp o) { return kTrainOps[static_cast<size_t>(o)]; }
// Whether `op` is the table row of one of `ops` (by identity, so renaming an op cannot silently change a rule).
inline bool is_train_op(const OpDef* op, std::initializer_list<TrainOp> ops) {
  for (TrainOp o : ops)
    if (op == &train_op(o)) return true;
  return false;
}

// The planner's held_by_binding for training graphs: what model_value_held_by_binding holds, plus the values the
// training kernels take from the layers (parameter gradients, quantized gradients, the loss and its gradient).
bool train_value_held_by_binding(const Graph& g, const Value& v);

}  // namespace te
