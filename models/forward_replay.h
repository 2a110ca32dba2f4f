// Inference forward as one CUDA-graph launch. At small token counts a step is a few dozen short kernels and the
// gaps between their launches cost as much as the kernels; replaying a captured graph removes the gaps.
//
// Captured once for a fixed input tensor, which every replay reads in place (write the next tokens into it, then
// replay). Before the capture: one ordinary run (weights quantized and cached, GEMM plans chosen) and two runs inside
// a private memory pool, so the capture itself allocates nothing from the driver and the buffers it uses are never
// handed to other work while the replay lives.
#pragma once
#include <functional>

#include "engine/allocator.h"
#include "engine/cuda_graph.h"
#include "models/rank_model.h"

namespace te {

class ForwardReplay {
 public:
  // `model` (built for inference, on a CUDA device, tp = 1) must outlive the replay. `forward`: a forward of that
  // model that reads `input` in place and enqueues on the model's stream (its ModelGraph::forward).
  ForwardReplay(RankModel& model, Tensor input, std::function<Tensor()> forward);
  ~ForwardReplay();
  ForwardReplay(const ForwardReplay&) = delete;
  ForwardReplay& operator=(const ForwardReplay&) = delete;

  // Enqueues the whole forward on the model's stream. The returned tensor belongs to the replay and is overwritten
  // by the next replay(); copy it out first if it must survive.
  const Tensor& replay();
  int64_t pool_bytes() const { return pool_.reserved_bytes(); }

 private:
  RankModel& model_;
  Tensor input_;
  std::function<Tensor()> forward_;
  CudaMemoryPool pool_;  // declared before graph_ and output_: destroyed after them
  CudaGraph graph_;
  Tensor output_;
};

}  // namespace te
