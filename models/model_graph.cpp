#include "models/model_graph.h"

#include "engine/allocator.h"
#include "engine/cuda_graph.h"
#include "engine/error.h"
#include "models/forward_builder.h"

namespace te {

struct ModelGraph::Replay {
  explicit Replay(Device device) : pool(device) {}
  Tensor input;          // what the capture reads; allocated outside the pool
  CudaMemoryPool pool;   // declared before graph and output: destroyed after them
  CudaGraph graph;
  Tensor output;         // the capture's output buffer (in the pool)
};

ModelGraph::ModelGraph(RankModel& model, int64_t local_tokens, ModelGraphOptions options)
    : RankGraph(model, local_tokens) {
  const RankContext& ctx = model.ctx();
  TE_CHECK_HINT(!ctx.training, "the model graph runs the inference forward, and this model keeps training state",
                "build it from a model with run.mode: infer; training steps run as models/train_graph.h");
  if (options.cuda_graph) check_replay("the forward", options.profile);
  build();
  start(model_value_held_by_binding, options.overlap,
        [&](ExecOptions& eo, const Plan&) { eo.profile = options.profile; });
  if (options.cuda_graph) {
    replay_ = std::make_unique<Replay>(ctx.device);
    const ValueType t = input_type();
    replay_->input = Tensor::empty(t.shape, t.dtype, ctx.device, ctx.stream);
  }
}

ModelGraph::~ModelGraph() {
  if (!replay_) return;
  try {
    model_.ctx().stream.synchronize();  // no replay in flight while its graph and buffers go
  } catch (...) {  // a destructor must not throw; the error belongs to the caller's next synchronisation
  }
}

void ModelGraph::build() {
  RankContext& ctx = model_.ctx();
  ForwardBuilder fb{GraphBuilder(graph_), ctx, params_, held_params_};
  input_ = fb.b.input("x", input_type());
  output_ = fb.model(model_, input_);
  fb.b.mark_output(output_);
}

Tensor ModelGraph::forward(const Tensor& x) {
  if (!replay_) return run(x);
  Replay& r = *replay_;
  const Stream& st = model_.ctx().stream;
  copy_into_captured(r.input, x, "replayed forward: input", st);
  if (!r.graph.captured()) {
    (void)run(r.input);
    PoolScope scope(r.pool);
    // Twice: a layer's saved tensors are replaced only after their successors are allocated, so the pool reaches
    // its steady state (every buffer the captured forward will ask for is free in it) on the second run.
    (void)run(r.input);
    (void)run(r.input);
    r.graph.capture(st, [&] { r.output = run(r.input); }, "the model's forward");
  }
  r.graph.launch(st);
  return r.output;
}

const Tensor& ModelGraph::replay_input() const {
  TE_CHECK(replay_ != nullptr, "replay_input() of a model graph built without cuda_graph");
  return replay_->input;
}

int64_t ModelGraph::replay_pool_bytes() const { return replay_ ? replay_->pool.reserved_bytes() : 0; }

Tensor ModelGraph::run(const Tensor& x) {
  exec_->bind(input_, x.is_contiguous() ? x : x.contiguous());  // names the value and the fix on a shape mismatch
  for (const auto& [v, q] : held_params_) binding_.held[static_cast<size_t>(v)] = q;
  exec_->run();
  model_.update_forward_scales();  // ordered after the step on ctx.stream
  // The held values go back to the allocator's cache of the stream that made them; the next step's work on that
  // stream is ordered after this step's readers (the executor forks and joins its streams every step).
  for (auto& v : binding_.held) v.reset();
  return exec_->tensor(output_);
}

}  // namespace te
