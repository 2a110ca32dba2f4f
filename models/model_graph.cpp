#include "models/model_graph.h"

#include <cstring>

#include "comm/gather.h"
#include "engine/error.h"
#include "graph/builder.h"

namespace te {
namespace {

// §4 for the forward gather of a column-parallel input, from the rule gather_along_first_dim applies.
// The norm writes high precision; the gather quantizes its local shard or falls back: the plan the gather itself
// makes (plan_gather), so --explain and the run cannot disagree.
GatherPlan decide_gather(const Graph& g, const Node& gather, const ModelBinding& b) {
  ParallelLinear& linear = *b.linears.at(static_cast<size_t>(gather.attr<int64_t>("linear")));
  const ValueType& in = g.value(gather.inputs[0]).type;
  const Quantizer* q = linear.input_quantizer();
  GatherPlan p = plan_gather(in.shape, q, q ? Usage::rowwise : Usage::none, b.ctx->world());
  if (!q) p.tensor.reason = TE_STR_("recipe none: the gather moves " << dtype_name(in.dtype));
  return p;
}

// "layers.0.mlp.fc1_weight" → "layers.0.mlp.fc1"; "layers.0.qkv.weight" → "layers.0.qkv".
std::string layer_name(const ParallelLinear& l) {
  std::string n = l.params().weight->spec->name;
  for (const char* suffix : {".weight", "_weight"})
    if (n.size() > std::strlen(suffix) && n.ends_with(suffix)) return n.substr(0, n.size() - std::strlen(suffix));
  return n;
}

}  // namespace

ModelGraph::ModelGraph(RankModel& model, int64_t local_tokens, ModelGraphOptions options)
    : model_(model), local_tokens_(local_tokens) {
  RankContext& ctx = model.ctx();
  TE_CHECK_HINT(!ctx.training, "the model graph runs the inference forward, and this model keeps training state",
                "build it from a model with run.mode: infer; training steps run eagerly (RankModel::train_step)");
  TE_CHECK(local_tokens > 0, "the model graph needs at least one local token, got " << local_tokens);
  binding_.ctx = &ctx;
  build();
  PlanOptions po;
  po.held_by_binding = model_value_held_by_binding;
  po.gather_hook = [this](const Graph& g, const Node& n) { return decide_gather(g, n, binding_); };
  po.single_stream = !options.overlap;
  Plan plan = plan_graph(graph_, po);
  binding_.held.assign(static_cast<size_t>(graph_.num_values()), std::nullopt);
  ExecOptions eo;
  eo.mode = ctx.device.is_cuda() ? ExecMode::cuda : ExecMode::inline_cpu;
  // Collectives and quantizers allocate their outputs: capture would need a private pool (see ForwardReplay).
  eo.cuda_graph = false;
  eo.profile = options.profile;
  if (ctx.device.is_cuda()) eo.compute_stream = ctx.stream;  // inputs are written there; results are read there
  eo.env.rank = ctx.rank();
  eo.env.world_size = ctx.world();
  eo.env.binding = &binding_;
  exec_ = std::make_unique<Executor>(graph_, std::move(plan), ctx.device, std::move(eo));
  for (const auto& [v, t] : params_) exec_->bind(v, t);
}

namespace {

// Appends a rank's forward to the graph one stage at a time, registering each ParallelLinear with the binding.
struct ForwardBuilder {
  GraphBuilder b;
  RankContext& ctx;
  ModelBinding& binding;
  std::vector<std::pair<int, Tensor>>& params;  // (value, tensor) for the caller to bind
  std::vector<std::pair<int, GemmOperand>>& held_params;  // (value, quantized weight) the binding holds

  int64_t world() const { return ctx.world(); }

  ValueType type(Shape shape, Sharding sh) const {
    ValueType t;
    t.shape = std::move(shape);
    t.dtype = ctx.dtype;
    t.device = ctx.device;
    t.sharding = sh;
    return t;
  }

  int param(const RankParam* p) {
    const int dim = p->spec->shard_dim;
    const Sharding sh = world() > 1 && dim >= 0 ? Sharding::split(dim) : Sharding::replicated();
    const int id = b.param(p->spec->name, type(p->value.shape(), sh), false);
    params.emplace_back(id, p->value);
    return id;
  }

  // The GEMM's weight: the model-dtype param, or the quantized weight when that is all the device keeps.
  int weight_param(const ParallelLinear& l) {
    const QuantizedTensor* q = l.weight_held_quantized();
    if (!q) return param(l.params().weight);
    const RankParam* p = l.params().weight;
    const int dim = p->spec->shard_dim;
    ValueType t = type(q->shape, world() > 1 && dim >= 0 ? Sharding::split(dim) : Sharding::replicated());
    t.quant = q->format;
    t.usages = q->usages();
    const int id = b.param(p->spec->name, t, false);
    held_params.emplace_back(id, GemmOperand(*q));
    return id;
  }

  // {linear, world}, plus the quantized format of the layer's input when `quantized` and the recipe has one.
  Attrs attrs(int64_t linear, const ParallelLinear& l, bool quantized) const {
    Attrs a{{"linear", linear}, {"world", world()}};
    if (quantized && l.quantizes_input())
      a.set("format", std::string(quant_format_name(l.input_quantizer()->config().format)));
    return a;
  }

  // The activation before `next` (FC2): fused with its input quantization where the eager forward fuses it, in
  // which case the linear is appended too. Returns the value after the stage(s) and whether `next` was consumed.
  std::pair<int, bool> activation(ActKind act, int h, ParallelLinear* next) {
    const std::string act_name(act_kind_name(act));
    if (!(next && next->fuses_activation_quantize()))
      return {b.add1(model_op(ModelOp::act), {h}, {{"act", act_name}}, next ? layer_name(*next) + ".act" : "act"),
              false};
    const int64_t idx = static_cast<int64_t>(binding.linears.size());
    const int q = b.add1(model_op(ModelOp::act_quantize), {h}, attrs(idx, *next, true).set("act", act_name),
                         layer_name(*next) + ".act_quantize");
    return {linear(*next, q), true};
  }

  // norm → gather or quantize (as the eager forward decides) → GEMM (→ reduction for row-parallel).
  int linear(ParallelLinear& l, int h) {
    const std::string name = layer_name(l);
    const ParallelLinear::Params& p = l.params();
    const int64_t idx = static_cast<int64_t>(binding.linears.size());
    binding.linears.push_back(&l);
    const Attrs base = attrs(idx, l, false), quantized = attrs(idx, l, true);
    std::vector<int> norm_in;
    if (l.has_norm()) {
      norm_in = {h, param(p.norm_weight)};
      if (p.norm_bias) norm_in.push_back(param(p.norm_bias));
    }
    const bool quantize_here = l.quantizes_input() && !b.graph().value(h).type.is_quantized();
    const bool column = l.mode() == ParallelMode::column;
    int in = h;
    if (column && l.fuses_norm_quantize(ctx)) {
      in = b.add1(model_op(ModelOp::norm_quantize), norm_in, quantized, name + ".norm_quantize");
    } else {
      if (l.has_norm()) in = b.add1(model_op(ModelOp::norm), norm_in, base, name + ".norm");
      if (column && ctx.gathers()) in = b.add1(model_op(ModelOp::sp_gather), {in}, quantized, name + ".gather");
      else if (quantize_here) in = b.add1(model_op(ModelOp::quantize), {in}, quantized, name + ".quantize");
    }
    std::vector<int> gemm_in{in, weight_param(l)};
    if (p.bias) gemm_in.push_back(param(p.bias));
    if (column) return b.add1(model_op(ModelOp::column_gemm), gemm_in, base, name);
    const int partial = b.add1(model_op(ModelOp::row_gemm), gemm_in, base, name);
    if (world() == 1) return partial;
    return b.add1(model_op(ModelOp::reduce), {partial}, Attrs(base).set("sp", ctx.sequence_parallel),
                  name + (ctx.sequence_parallel ? ".reduce_scatter" : ".all_reduce"));
  }
};

}  // namespace

void ModelGraph::build() {
  RankContext& ctx = model_.ctx();
  ForwardBuilder fb{GraphBuilder(graph_), ctx, binding_, params_, held_params_};
  const Sharding sh = ctx.gathers() ? Sharding::split(0) : Sharding::replicated();
  input_ = fb.b.input("x", fb.type({local_tokens_, model_.spec().model.hidden}, sh));
  int x = input_;
  for (size_t li = 0; li < model_.layers().size(); ++li) {
    for (size_t bi = 0; bi < model_.layers()[li].size(); ++bi) {
      RankModel::BranchStages& stages = model_.layers()[li][bi];
      int h = x;
      for (size_t i = 0; i < stages.size(); ++i) {
        if (stages[i].linear) {
          h = fb.linear(*stages[i].linear, h);
          continue;
        }
        ParallelLinear* next = i + 1 < stages.size() ? stages[i + 1].linear.get() : nullptr;
        const auto [out, consumed_next] = fb.activation(*stages[i].act, h, next);
        h = out;
        i += consumed_next ? 1 : 0;
      }
      x = fb.b.add1(model_op(ModelOp::residual_add), {x, h}, {}, TE_STR_("layers." << li << ".residual" << bi));
    }
  }
  output_ = x;
  fb.b.mark_output(output_);
}

Tensor ModelGraph::forward(const Tensor& x) {
  exec_->bind(input_, x.is_contiguous() ? x : x.contiguous());  // names the value and the fix on a shape mismatch
  for (const auto& [v, q] : held_params_) binding_.held[static_cast<size_t>(v)] = q;
  exec_->run();
  model_.update_forward_scales();  // ordered after the step on ctx.stream, as the eager forward does
  // The held values go back to the allocator's cache of the stream that made them; the next step's work on that
  // stream is ordered after this step's readers (the executor forks and joins its streams every step).
  for (auto& v : binding_.held) v.reset();
  return exec_->tensor(output_);
}

std::string ModelGraph::explain() const { return te::explain(graph_, exec_->plan()); }

}  // namespace te
