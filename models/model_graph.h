// A rank's inference forward as a graph (graph/): built from the RankModel's layers with the model op kinds
// (models/model_ops.h), planned once for a token count — gather paths decided per usage by the same rule the gather
// applies (comm/gather.h plan_gather), compute and comm streams with events, one arena for the high-precision
// intermediates — and run by the Executor. The gathers and reductions run on the comm stream, so on a GPU a
// gather overlaps the compute that does not need it.
//
//   x [T/W, H] → per layer, per branch: norm → sp_gather → column_gemm → act(_quantize) → row_gemm → reduce → + x
//
// Every node calls a ParallelLinear phase; the layer-by-layer chaining of the same phases
// (tests/models/eager_reference.h) gives the same bytes (tests/models/test_model_graph.cpp). The training step's graph
// is models/train_graph.h.
#pragma once
#include <memory>
#include <string>

#include "graph/executor.h"
#include "models/model_ops.h"
#include "models/rank_model.h"

namespace te {

struct ModelGraphOptions {
  bool overlap = true;   // false: every node on the compute stream (the serial baseline overlap is measured against)
  bool profile = false;  // time every node (Executor step_ms)
};

class ModelGraph {
 public:
  // `model` (inference, ctx.training false) must outlive this. `local_tokens`: rows of this rank's input.
  ModelGraph(RankModel& model, int64_t local_tokens, ModelGraphOptions options = {});
  ModelGraph(const ModelGraph&) = delete;  // the executor's binding points into this object
  ModelGraph& operator=(const ModelGraph&) = delete;

  // x [local_tokens, H] in the model dtype on the model's device, written on ctx.stream; the result is ordered on
  // ctx.stream and valid until the next forward().
  Tensor forward(const Tensor& x);

  int64_t local_tokens() const { return local_tokens_; }
  std::string explain() const;  // the plan (graph/planner.h explain)
  const Graph& graph() const { return graph_; }
  const Plan& plan() const { return exec_->plan(); }
  const Executor& executor() const { return *exec_; }

 private:
  void build();

  RankModel& model_;
  int64_t local_tokens_;
  Graph graph_;
  ModelBinding binding_;
  int input_ = -1, output_ = -1;
  std::vector<std::pair<int, Tensor>> params_;  // (value, tensor) bound once
  std::vector<std::pair<int, GemmOperand>> held_params_;  // (value, quantized weight) held by the binding each step
  std::unique_ptr<Executor> exec_;
};

}  // namespace te
