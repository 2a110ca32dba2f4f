// A rank's training step as one planned graph: the forward (models/forward_builder.h), the MSE loss, the backward
// autograd builds from the model op kinds' rules (graph/autograd.h, models/model_backward.cpp), the all-reduce of
// replicated parameters' gradients, and one optimizer node — planned once for a token count (backward gathers and
// reduce-scatters on the comm stream, every gather's path decided per usage, one arena for the step's
// high-precision intermediates) and run by the Executor.
//
//   x, target → forward → mse_loss → loss.all_reduce (SP) → loss.gate → backward (per layer, reversed)
//   → all_reduce grad/<replicated params> (SP) → optimizer
//
// Every node calls the ParallelLinear phase, ops/ kernel or comm/ collective the eager RankModel::train_step calls,
// in an order that gives the same bytes, so a step equals the eager step bit for bit
// (tests/models/test_train_graph.cpp).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/executor.h"
#include "models/model_ops.h"
#include "models/rank_model.h"

namespace te {

class TrainGraph {
 public:
  // `model` (ctx.training) must outlive this. Every step's x and target are [local_tokens, H] on the model's
  // device, x in the model dtype, the target in `target_dtype`.
  TrainGraph(RankModel& model, int64_t local_tokens, DType target_dtype);
  TrainGraph(const TrainGraph&) = delete;  // the executor's binding points into this object
  TrainGraph& operator=(const TrainGraph&) = delete;

  // RankModel::train_step's contract: one optimizer step on mean((forward(x) − target)²); returns the loss; a
  // non-finite loss leaves the weights untouched.
  float train_step(const Tensor& x, const Tensor& target, int64_t step, double lr);

  int64_t local_tokens() const { return local_tokens_; }
  std::string explain() const;  // the plan (graph/planner.h explain)
  const Graph& graph() const { return graph_; }
  const Plan& plan() const { return exec_->plan(); }

 private:
  void build(DType target_dtype);

  RankModel& model_;
  int64_t local_tokens_;
  Graph graph_;
  ModelBinding binding_;
  int input_ = -1, target_ = -1;
  std::vector<std::pair<int, Tensor>> params_;  // (value, master) bound once
  std::vector<std::vector<int>> release_after_;  // by node id: held values it was the last reader of (CPU)
  std::unique_ptr<Executor> exec_;
};

}  // namespace te
