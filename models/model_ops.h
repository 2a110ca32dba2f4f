// The model's op kinds for the graph IR (graph/op_table.h): one table row per forward phase of ParallelLinear
// (models/parallel_linear.h), plus the activation and the residual add. Each kernel calls its phase on the stream
// the plan gives it; the layer-by-layer chaining of the same phases (tests/models/eager_reference.h) gives the same
// bytes.
//
// Values the collectives and quantizers allocate themselves (gathered or reduced tensors, QuantizedTensors) are
// held by the binding (PlanOptions::held_by_binding), in ModelBinding::held; everything else is a planned arena
// buffer. ModelBinding reaches the kernels as ExecEnv::binding. The nodes of a linear layer (its phases and their
// backward) own a share of its ParallelLinear as their state (Node::state): weights, quantizers, saved values.
//
// Attributes: world (int), format (string, a QuantFormat name: the
// value is quantized row-wise in it), act (string, an ActKind name), sp (bool: the reduction is a reduce-scatter).
#pragma once
#include <array>
#include <optional>
#include <vector>

#include "graph/op_table.h"
#include "models/parallel_linear.h"
#include "models/spec.h"
#include "ops/attention/attention.h"

namespace te {

class RankModel;
class StepControl;

struct ModelBinding {
  RankContext* ctx = nullptr;
  std::vector<std::optional<GemmOperand>> held;  // by value id: the values the planner left to the binding
  // Training graph only (models/train_graph.h): the model the step and optimizer nodes act on, and the step's
  // scalars, loss and skip flag in device memory (a non-finite loss: the optimizer node only zeroes the gradients,
  // and the weights stay as they were).
  RankModel* model = nullptr;
  StepControl* control = nullptr;
};

namespace model_ops {
std::vector<ValueType> infer_norm(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_quantize(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_gather(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_gemm(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_gemm_residual(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_act(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_reduce(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_residual(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_rope(const Node& n, const std::vector<ValueType>& in);
std::vector<ValueType> infer_attention(const Node& n, const std::vector<ValueType>& in);

void run_norm(KernelCall& c);
void run_norm_quantize(KernelCall& c);
void run_sp_gather(KernelCall& c);
void run_quantize(KernelCall& c);
void run_column_gemm(KernelCall& c);
void run_act(KernelCall& c);
void run_act_quantize(KernelCall& c);
void run_row_gemm(KernelCall& c);
void run_row_gemm_residual(KernelCall& c);
void run_reduce(KernelCall& c);
void run_residual(KernelCall& c);
void run_rope(KernelCall& c);
void run_attention(KernelCall& c);

// Backward rules (models/model_backward.cpp), calling the ParallelLinear backward phases.
void backward_norm(BackwardBuilder& bb);
void backward_sp_gather(BackwardBuilder& bb);
void backward_quantize(BackwardBuilder& bb);
void backward_column_gemm(BackwardBuilder& bb);
void backward_act(BackwardBuilder& bb);
void backward_row_gemm(BackwardBuilder& bb);
void backward_reduce(BackwardBuilder& bb);
void backward_residual(BackwardBuilder& bb);
// Attention's rows (models/attention_ops.cpp): their kernels own everything they need in their attributes.
// A rank's share of an attention layer: its heads of a tensor-parallel group of `world`, over whole sequences.
AttentionLayout rank_attention_layout(const AttentionSpec& a, int64_t world);
void backward_rope(BackwardBuilder& bb);
void backward_attention(BackwardBuilder& bb);
}  // namespace model_ops

enum class ModelOp {
  norm,
  norm_quantize,
  sp_gather,
  quantize,
  column_gemm,
  act,
  act_quantize,
  row_gemm,
  row_gemm_residual,
  reduce,
  residual_add,
  rope,
  attention
};

// Inputs: norm (x, gamma[, beta]); column/row gemm (input, weight[, bias]); row_gemm_residual (input, weight,
// residual[, bias]); the others one value. The backward rules append the op kinds of models/train_ops.h.
// norm_quantize runs only in inference (training keeps the norm output in high precision for the backward
// re-gather), so it has no backward; nor has row_gemm_residual, a row GEMM and the residual add after it in one
// node, which inference graphs at tp 1 use (the GEMM's epilogue adds the residual where its kernel can). rope (qkv) →
// qkv turned (attributes heads, kv_heads, head_dim, seq, base, inverse; the backward is rope inverted); attention (qkv)
// → (out, lse) (attributes heads, kv_heads, head_dim, seq, causal, scale: this rank's heads;
// ops/attention/attention.h).
inline constexpr std::array<OpDef, 13> kModelOps{{
    {"norm", -1, 1, StreamClass::compute, false, model_ops::infer_norm, model_ops::backward_norm, model_ops::run_norm},
    {"norm_quantize", -1, 1, StreamClass::compute, false, model_ops::infer_quantize, nullptr,
     model_ops::run_norm_quantize},
    {"sp_gather", 1, 1, StreamClass::comm, true, model_ops::infer_gather, model_ops::backward_sp_gather,
     model_ops::run_sp_gather},
    {"quantize", 1, 1, StreamClass::compute, false, model_ops::infer_quantize, model_ops::backward_quantize,
     model_ops::run_quantize},
    {"column_gemm", -1, 1, StreamClass::compute, false, model_ops::infer_gemm, model_ops::backward_column_gemm,
     model_ops::run_column_gemm},
    {"act", 1, 1, StreamClass::compute, false, model_ops::infer_act, model_ops::backward_act, model_ops::run_act},
    {"act_quantize", 1, 1, StreamClass::compute, false, model_ops::infer_act, model_ops::backward_act,
     model_ops::run_act_quantize},
    {"row_gemm", -1, 1, StreamClass::compute, false, model_ops::infer_gemm, model_ops::backward_row_gemm,
     model_ops::run_row_gemm},
    {"row_gemm_residual", -1, 1, StreamClass::compute, false, model_ops::infer_gemm_residual, nullptr,
     model_ops::run_row_gemm_residual},
    {"reduce", 1, 1, StreamClass::comm, false, model_ops::infer_reduce, model_ops::backward_reduce,
     model_ops::run_reduce},
    {"residual_add", 2, 1, StreamClass::compute, false, model_ops::infer_residual, model_ops::backward_residual,
     model_ops::run_residual},
    {"rope", 1, 1, StreamClass::compute, false, model_ops::infer_rope, model_ops::backward_rope, model_ops::run_rope},
    {"attention", 1, 2, StreamClass::compute, false, model_ops::infer_attention, model_ops::backward_attention,
     model_ops::run_attention},
}};

inline const OpDef& model_op(ModelOp o) { return kModelOps[static_cast<size_t>(o)]; }
// Whether `op` is the table row of `o` (by identity, so renaming an op cannot silently change a rule).
inline bool is_model_op(const OpDef* op, ModelOp o) { return op == &model_op(o); }

// The planner's held_by_binding for model graphs: quantized values and everything a comm node produces.
bool model_value_held_by_binding(const Graph& g, const Value& v);

}  // namespace te
