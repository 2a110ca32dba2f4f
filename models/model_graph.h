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
#include <utility>
#include <vector>

#include "models/rank_graph.h"

namespace te {

struct ModelGraphOptions {
  bool overlap = true;   // false: every node on the compute stream (the serial baseline overlap is measured against)
  bool profile = false;  // time every node (Executor step_ms)
  // Replay the forward as one CUDA graph (a GPU, tp 1): at small token counts a step is a few dozen short kernels and
  // the gaps between their launches cost as much as the kernels. See forward().
  bool cuda_graph = false;
};

class ModelGraph : public RankGraph {
 public:
  // `model` (inference, ctx.training false) must outlive this. `local_tokens`: rows of this rank's input.
  ModelGraph(RankModel& model, int64_t local_tokens, ModelGraphOptions options = {});
  ~ModelGraph();

  // x [local_tokens, H] in the model dtype on the model's device, written on ctx.stream; the result is ordered on
  // ctx.stream and valid until the next forward().
  // With cuda_graph the first call runs the forward once (weights quantized and cached, GEMM plans made) and twice
  // inside a private memory pool, so the capture allocates nothing from the driver and its buffers are never handed
  // to other work, then captures it. Every call replays the capture, which reads the graph's own input buffer: x is
  // copied into it unless x is that buffer (replay_input()).
  Tensor forward(const Tensor& x);
  // cuda_graph: the input buffer the captured forward reads (write the next tokens into it to save the copy).
  const Tensor& replay_input() const;
  int64_t replay_pool_bytes() const;  // cuda_graph: bytes the capture's private pool holds

 private:
  void build();
  Tensor run(const Tensor& x);  // one forward through the executor

  struct Replay;
  std::unique_ptr<Replay> replay_;  // cuda_graph only

  int input_ = -1, output_ = -1;
  std::vector<std::pair<int, GemmOperand>> held_params_;  // (value, quantized weight) held by the binding each step
};

}  // namespace te
