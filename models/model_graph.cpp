#include "models/model_graph.h"

#include "engine/error.h"
#include "models/forward_builder.h"

namespace te {

ModelGraph::ModelGraph(RankModel& model, int64_t local_tokens, ModelGraphOptions options)
    : model_(model), local_tokens_(local_tokens) {
  RankContext& ctx = model.ctx();
  TE_CHECK_HINT(!ctx.training, "the model graph runs the inference forward, and this model keeps training state",
                "build it from a model with run.mode: infer; training steps run as models/train_graph.h");
  TE_CHECK(local_tokens > 0, "the model graph needs at least one local token, got " << local_tokens);
  binding_.ctx = &ctx;
  build();
  PlanOptions po;
  po.held_by_binding = model_value_held_by_binding;
  po.gather_hook = [this](const Graph& g, const Node& n) { return plan_model_gather(g, n, binding_); };
  po.single_stream = !options.overlap;
  Plan plan = plan_graph(graph_, po);
  binding_.held.assign(static_cast<size_t>(graph_.num_values()), std::nullopt);
  ExecOptions eo = model_exec_options(ctx, binding_);
  eo.profile = options.profile;
  exec_ = std::make_unique<Executor>(graph_, std::move(plan), ctx.device, std::move(eo));
  for (const auto& [v, t] : params_) exec_->bind(v, t);
}

void ModelGraph::build() {
  RankContext& ctx = model_.ctx();
  ForwardBuilder fb{GraphBuilder(graph_), ctx, binding_, params_, held_params_};
  const Sharding sh = ctx.gathers() ? Sharding::split(0) : Sharding::replicated();
  input_ = fb.b.input("x", fb.type({local_tokens_, model_.spec().model.hidden}, sh));
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

std::string ModelGraph::explain() const { return te::explain(graph_, exec_->plan()); }

}  // namespace te
