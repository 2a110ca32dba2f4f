#include "models/rank_graph.h"

#include "engine/error.h"
#include "models/forward_builder.h"

namespace te {

RankGraph::RankGraph(RankModel& model, int64_t local_tokens) : model_(model), local_tokens_(local_tokens) {
  TE_CHECK(local_tokens > 0, "a rank's graph needs at least one local token, got " << local_tokens);
  binding_.ctx = &model.ctx();
}

ValueType RankGraph::input_type() const {
  const RankContext& ctx = model_.ctx();
  ValueType t;
  t.shape = {local_tokens_, model_.spec().model.hidden};
  t.dtype = ctx.dtype;
  t.device = ctx.device;
  t.sharding = ctx.gathers() ? Sharding::split(0) : Sharding::replicated();
  return t;
}

void RankGraph::start(std::function<bool(const Graph&, const Value&)> held, bool overlap,
                      const std::function<void(ExecOptions&, const Plan&)>& tune) {
  RankContext& ctx = model_.ctx();
  PlanOptions po;
  po.held_by_binding = std::move(held);
  po.gather_hook = [this](const Graph& g, const Node& n) { return plan_model_gather(g, n, binding_); };
  po.single_stream = !overlap;
  Plan plan = plan_graph(graph_, po);
  binding_.held.assign(static_cast<size_t>(graph_.num_values()), std::nullopt);
  ExecOptions eo = model_exec_options(ctx, binding_);
  if (tune) tune(eo, plan);
  exec_ = std::make_unique<Executor>(graph_, std::move(plan), ctx.device, std::move(eo));
  for (const auto& [v, t] : params_) exec_->bind(v, t);
}

void RankGraph::check_replay(const char* what, bool profile) const {
  const RankContext& ctx = model_.ctx();
  TE_CHECK_HINT(ctx.device.is_cuda(), "CUDA graph replay of " << what << " on " << ctx.device.str(),
                "replay needs a CUDA device; set run.cuda_graph: false (or leave --cuda-graph off) on the CPU");
  TE_CHECK_HINT(ctx.world() == 1, "CUDA graph replay of " << what << " with tp = " << ctx.world(),
                "the local communicator's rank threads cannot be captured; use tp: 1 or run.cuda_graph: false");
  TE_CHECK_HINT(!profile, "CUDA graph replay of " << what << " with per-node profiling",
                "a captured graph has no node boundaries: profile without cuda_graph");
}

void RankGraph::copy_into_captured(Tensor& dst, const Tensor& src, const char* what, const Stream& stream) {
  TE_CHECK_HINT(
      src.defined() && src.shape() == dst.shape() && src.dtype() == dst.dtype() && src.device() == dst.device(),
      what << " " << (src.defined() ? src.str() : std::string("undefined")) << ", captured for " << dst.str(),
      "give a tensor of the captured shape and dtype on " << dst.device().str());
  if (src.data_ptr() != dst.data_ptr()) dst.copy_from(src, stream);
}

std::vector<NodeTime> RankGraph::node_times() const {
  const Plan& plan = exec_->plan();
  const std::vector<double> ms = exec_->step_ms();
  std::vector<NodeTime> out;
  out.reserve(ms.size());
  for (size_t s = 0; s < ms.size(); ++s) {
    const Node& n = graph_.node(plan.steps[s].node);
    out.push_back({graph_.node_label(n.id), std::string(n.op->name), plan.steps[s].stream, n.is_backward, ms[s]});
  }
  return out;
}

std::string RankGraph::explain() const { return te::explain(graph_, exec_->plan()); }

}  // namespace te
