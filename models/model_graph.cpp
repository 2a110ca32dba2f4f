#include "models/model_graph.h"

#include "engine/error.h"
#include "models/forward_builder.h"

namespace te {

ModelGraph::ModelGraph(RankModel& model, int64_t local_tokens, ModelGraphOptions options)
    : RankGraph(model, local_tokens) {
  TE_CHECK_HINT(!model.ctx().training,
                "the model graph runs the inference forward, and this model keeps training state",
                "build it from a model with run.mode: infer; training steps run as models/train_graph.h");
  build();
  start(model_value_held_by_binding, options.overlap,
        [&](ExecOptions& eo, const Plan&) { eo.profile = options.profile; });
}

void ModelGraph::build() {
  RankContext& ctx = model_.ctx();
  ForwardBuilder fb{GraphBuilder(graph_), ctx, binding_, params_, held_params_};
  input_ = fb.b.input("x", input_type());
  output_ = fb.model(model_, input_);
  fb.b.mark_output(output_);
}

Tensor ModelGraph::forward(const Tensor& x) {
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
