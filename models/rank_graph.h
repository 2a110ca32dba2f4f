// What a rank's planned graphs share (the inference forward, models/model_graph.h, and the training step with its
// eval and forward kinds, models/train_graph.h): the graph built from the RankModel's stages, the ModelBinding its
// kernels reach, the parameters bound once, and the Executor running the plan — planned with every gather's path
// decided by the rule the gather applies (comm/gather.h plan_gather), collectives on the comm stream unless the
// run is serial (run.executor: eager).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/executor.h"
#include "models/model_ops.h"
#include "models/rank_model.h"

namespace te {

// One node's time in the last run of a graph built with profiling on.
struct NodeTime {
  std::string node;    // "node 12 'mlp.fc1' (column_gemm)"
  std::string op;      // the op kind ("column_gemm")
  StreamClass stream;  // where the plan ran it
  bool backward;       // appended by autograd
  double ms;
};

class RankGraph {
 public:
  RankGraph(const RankGraph&) = delete;  // the executor's binding points into this object
  RankGraph& operator=(const RankGraph&) = delete;

  int64_t local_tokens() const { return local_tokens_; }
  std::string explain() const;  // the plan (graph/planner.h explain)
  const Graph& graph() const { return graph_; }
  const Plan& plan() const { return exec_->plan(); }
  const Executor& executor() const { return *exec_; }
  // Each plan step's node and its time in the last run, in plan order (the graph must have been built with
  // profiling on; the times are read after the step's stream has finished).
  std::vector<NodeTime> node_times() const;

 protected:
  // `model` must outlive this; `local_tokens` (> 0) rows of this rank's input.
  RankGraph(RankModel& model, int64_t local_tokens);
  ~RankGraph() = default;
  // The type of this rank's input x [local_tokens, H] in the model dtype (split over the ranks under SP).
  ValueType input_type() const;
  // Refuses CUDA-graph replay of `what` ("the forward", "the training step") where it cannot work: off a GPU, at
  // tp > 1 (the local communicator's rank threads are not captured), with per-node profiling. Checked before the
  // replay's pool is made, so a CPU model gets this error rather than the pool's.
  void check_replay(const char* what, bool profile) const;
  // A replay reads its own buffers: `src` must have the shape, dtype and device of the captured buffer `dst` (an
  // Error naming `what`, e.g. "replayed forward: input", otherwise) and is copied into it on `stream` unless it is it.
  static void copy_into_captured(Tensor& dst, const Tensor& src, const char* what, const Stream& stream);
  // Plans graph_ (values `held` says the binding holds get no arena bytes) and starts the executor with params_
  // bound; `tune` adjusts the executor's options first.
  void start(std::function<bool(const Graph&, const Value&)> held, bool overlap,
             const std::function<void(ExecOptions&, const Plan&)>& tune = {});

  RankModel& model_;
  int64_t local_tokens_;
  Graph graph_;
  ModelBinding binding_;
  std::vector<std::pair<int, Tensor>> params_;  // (value, tensor) bound once
  std::unique_ptr<Executor> exec_;
};

}  // namespace te
