#include "models/forward_replay.h"

#include "engine/error.h"

namespace te {
namespace {
// Checks before the pool is made (a CPU model must get this error, not the pool's).
RankModel& checked(RankModel& model, const Tensor& input) {
  const RankContext& ctx = model.ctx();
  TE_CHECK_HINT(ctx.device.is_cuda(), "CUDA graph replay on " << ctx.device.str(),
                "replay needs a CUDA device; run the forward without --cuda-graph on the CPU");
  TE_CHECK_HINT(!ctx.training, "CUDA graph replay of a model built for training",
                "replay covers inference (run.mode: infer); set run.cuda_graph: false for training");
  TE_CHECK_HINT(ctx.world() == 1, "CUDA graph replay with tp = " << ctx.world(),
                "the local communicator's rank threads cannot be captured; use tp: 1 or run.cuda_graph: false");
  TE_CHECK_HINT(
      input.defined() && input.device() == ctx.device,
      "CUDA graph replay input " << (input.defined() ? input.str() : "undefined") << " is not on " << ctx.device.str(),
      "allocate the input on the model's device");
  return model;
}
}  // namespace

ForwardReplay::ForwardReplay(RankModel& model, Tensor input, std::function<Tensor()> forward)
    : model_(checked(model, input)), input_(std::move(input)), forward_(std::move(forward)), pool_(model.ctx().device) {
  const Stream& st = model_.ctx().stream;
  (void)forward_();  // weights quantized and cached, GEMM plans and workspaces made (shared memory)
  {
    PoolScope scope(pool_);
    // Twice: a layer's saved tensors are replaced only after their successors are allocated, so the pool reaches
    // its steady state (every buffer the captured forward will ask for is free in it) on the second run.
    (void)forward_();
    (void)forward_();
    graph_.capture(st, [&] { output_ = forward_(); }, "the model's forward");
  }
}

ForwardReplay::~ForwardReplay() {
  try {
    model_.ctx().stream.synchronize();  // no replay in flight while its graph and buffers go
  } catch (...) {  // a destructor must not throw; the error belongs to the caller's next synchronisation
  }
}

const Tensor& ForwardReplay::replay() {
  graph_.launch(model_.ctx().stream);
  return output_;
}

}  // namespace te
