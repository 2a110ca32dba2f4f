// Appends a rank's forward to a graph with the model op kinds (models/model_ops.h), one stage at a time; the nodes
// of each linear layer own a share of its ParallelLinear (Node::state). The inference graph (models/model_graph.h) and
// the training graph (models/train_graph.h) build the same forward through it; training binds the fp32 masters as the
// parameters (their gradients are what autograd builds) and records each linear's gradient format for the backward
// rules.
//
//   x [T/W, H] → per layer, per branch: norm → sp_gather | quantize → column_gemm → act(_quantize) | [rope →]
//   attention → [quantize →] row_gemm → reduce → + x
// An inference graph at tp 1 adds x in the row GEMM's node (row_gemm_residual): its epilogue can add it.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/gather_plan.h"
#include "graph/builder.h"
#include "graph/executor.h"
#include "models/model_ops.h"
#include "models/rank_model.h"

namespace te {

struct ForwardBuilder {
  GraphBuilder b;
  RankContext& ctx;
  std::vector<std::pair<int, Tensor>>& params;            // (value, tensor) for the caller to bind
  std::vector<std::pair<int, GemmOperand>>& held_params;  // (value, quantized weight) the binding holds
  bool training = false;                                  // params are the f32 masters, requiring gradients

  // Every layer and branch of `model` on `x`: the output value.
  int model(RankModel& model, int x);
  ValueType type(Shape shape, Sharding sh) const;

 private:
  Sharding sharding(const RankParam* p) const;  // split along its shard dim over the group, else replicated
  int param(const RankParam* p);
  int weight_param(const ParallelLinear& l);
  Attrs attrs(const ParallelLinear& l, bool quantized) const;
  std::pair<int, bool> activation(ActKind act, int h, const std::shared_ptr<ParallelLinear>& next, int residual);
  int attention(const LayerSpec& l, int qkv, const std::string& name);
  // The layer's nodes, owning a share of it; `residual` (a value id, or -1): added to a row layer's output in its
  // GEMM's node.
  int linear(const std::shared_ptr<ParallelLinear>& layer, int h, int residual = -1);
  int linear_nodes(const ParallelLinear& l, int h, int residual);
};

// "layers.0.mlp.fc1_weight" → "layers.0.mlp.fc1"; "layers.0.qkv.weight" → "layers.0.qkv".
std::string linear_name(const ParallelLinear& l);

// How both model graphs run: `cuda` on the rank's stream on a GPU, `inline_cpu` on the CPU, no capture, the
// binding in ExecEnv.
ExecOptions model_exec_options(RankContext& ctx, ModelBinding& binding);

// The planner's gather hook for model graphs: the path each gather node (forward input, backward re-gather of the
// input's column-wise copy, row-parallel output gradient) takes, from the rule gather_along_first_dim applies
// (comm/gather.h plan_gather), so --explain and the run cannot disagree.
GatherPlan plan_model_gather(const Graph& g, const Node& gather, const ModelBinding& b);

}  // namespace te
