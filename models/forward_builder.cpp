#include "models/forward_builder.h"

#include <cstring>

#include "comm/gather.h"
#include "engine/error.h"
#include "models/train_ops.h"

namespace te {

std::string linear_name(const ParallelLinear& l) {
  std::string n = l.params().weight->spec->name;
  for (const char* suffix : {".weight", "_weight"})
    if (n.size() > std::strlen(suffix) && n.ends_with(suffix)) return n.substr(0, n.size() - std::strlen(suffix));
  return n;
}

ExecOptions model_exec_options(RankContext& ctx, ModelBinding& binding) {
  ExecOptions eo;
  eo.mode = ctx.device.is_cuda() ? ExecMode::cuda : ExecMode::inline_cpu;
  // Collectives and quantizers allocate their outputs (and a training step's loss reaches the host): capture would
  // need a private pool (ModelGraphOptions::cuda_graph keeps one).
  eo.cuda_graph = false;
  if (ctx.device.is_cuda()) eo.compute_stream = ctx.stream;  // inputs are written there; results are read there
  eo.env.rank = ctx.rank();
  eo.env.world_size = ctx.world();
  eo.env.binding = &binding;
  return eo;
}

GatherPlan plan_model_gather(const Graph& g, const Node& gather, const ModelBinding& b) {
  const ParallelLinear& linear = gather.state_as<ParallelLinear>();
  const ValueType& in = g.value(gather.inputs[0]).type;
  // The forward gather moves the input row-wise; the backward re-gather its column-wise copy; the output gradient's
  // gather both copies, with the gradient quantizer.
  const bool grad = is_train_op(gather.op, {TrainOp::grad_gather});
  const Quantizer* q = grad ? linear.grad_quantizer() : linear.input_quantizer();
  const Usage u = grad ? Usage::both : is_train_op(gather.op, {TrainOp::regather}) ? Usage::columnwise : Usage::rowwise;
  GatherPlan p = plan_gather(in.shape, q, q ? u : Usage::none, b.ctx->world());
  if (!q) p.tensor.reason = TE_STR_("recipe none: the gather moves " << dtype_name(in.dtype));
  return p;
}

ValueType ForwardBuilder::type(Shape shape, Sharding sh) const {
  ValueType t;
  t.shape = std::move(shape);
  t.dtype = ctx.dtype;
  t.device = ctx.device;
  t.sharding = sh;
  return t;
}

Sharding ForwardBuilder::sharding(const RankParam* p) const {
  const int dim = p->spec->shard_dim;
  return ctx.world() > 1 && dim >= 0 ? Sharding::split(dim) : Sharding::replicated();
}

int ForwardBuilder::param(const RankParam* p) {
  const Sharding sh = sharding(p);
  if (training) {  // the kernels read the model-dtype or quantized copies; the value is the master being trained
    ValueType t = type(p->master.shape(), sh);
    t.dtype = DType::f32;
    const int id = b.param(p->spec->name, t, true);
    params.emplace_back(id, p->master);
    return id;
  }
  const int id = b.param(p->spec->name, type(p->value.shape(), sh), false);
  params.emplace_back(id, p->value);
  return id;
}

int ForwardBuilder::weight_param(const ParallelLinear& l) {
  const QuantizedTensor* q = l.weight_held_quantized();
  if (!q || training) return param(l.params().weight);
  const RankParam* p = l.params().weight;
  ValueType t = type(q->shape, sharding(p));
  t.quant = q->format;
  t.usages = q->usages();
  const int id = b.param(p->spec->name, t, false);
  held_params.emplace_back(id, GemmOperand(*q));
  return id;
}

Attrs ForwardBuilder::attrs(const ParallelLinear& l, bool quantized) const {
  Attrs a{{"world", static_cast<int64_t>(ctx.world())}};
  if (quantized && l.quantizes_input())
    a.set("format", std::string(quant_format_name(l.input_quantizer()->config().format)));
  return a;
}

std::pair<int, bool> ForwardBuilder::activation(ActKind act, int h, const std::shared_ptr<ParallelLinear>& next,
                                                int residual) {
  const std::string act_name(act_kind_name(act));
  if (!(next && next->fuses_activation_quantize()))
    return {b.add1(model_op(ModelOp::act), {h}, {{"act", act_name}}, next ? linear_name(*next) + ".act" : "act"),
            false};
  // The fused pass quantizes with the next linear's input quantizer: it is that layer's node.
  b.set_node_state(next);
  const int q = b.add1(model_op(ModelOp::act_quantize), {h}, attrs(*next, true).set("act", act_name),
                       linear_name(*next) + ".act_quantize");
  b.set_node_state(nullptr);
  return {linear(next, q, residual), true};
}

int ForwardBuilder::attention(const LayerSpec& l, int qkv, const std::string& name) {
  const AttentionSpec& a = l.attention;
  const AttentionLayout rl = model_ops::rank_attention_layout(a, ctx.world());
  Attrs layout{{"heads", rl.heads}, {"kv_heads", rl.kv_heads}, {"head_dim", rl.head_dim}, {"seq", rl.seq}};
  layout.set("kinds_apart", rl.kinds_apart);
  if (a.rotary_base > 0) {
    Attrs rope = layout;
    qkv = b.add1(model_op(ModelOp::rope), {qkv}, rope.set("base", a.rotary_base).set("in_place", int64_t{0}),
                 name + ".rope");
  }
  Attrs attn = layout;
  attn.set("causal", a.causal).set("scale", a.softmax_scale).set("deterministic", a.deterministic);
  return b.add(model_op(ModelOp::attention), {qkv}, attn, name, {"out", "lse"})[0];
}

int ForwardBuilder::linear(const std::shared_ptr<ParallelLinear>& layer, int h, int residual) {
  b.set_node_state(layer);  // every node of the layer owns a share of it
  const int out = linear_nodes(*layer, h, residual);
  b.set_node_state(nullptr);
  return out;
}

int ForwardBuilder::linear_nodes(const ParallelLinear& l, int h, int residual) {
  const std::string name = linear_name(l);
  const ParallelLinear::Params& p = l.params();
  const Attrs base = attrs(l, false), quantized = attrs(l, true);
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
    if (column && ctx.gathers())
      in = b.add1(model_op(ModelOp::sp_gather), {in}, quantized, name + ".gather");
    else if (quantize_here)
      in = b.add1(model_op(ModelOp::quantize), {in}, quantized, name + ".quantize");
  }
  std::vector<int> gemm_in{in, weight_param(l)};
  if (p.bias) gemm_in.push_back(param(p.bias));
  // The GEMM's and the reduction's backward rules type the quantized output gradient with this.
  Attrs gemm = base;
  if (training && l.grad_quantizer())
    gemm.set("grad_format", std::string(quant_format_name(l.grad_quantizer()->config().format)));
  if (column) return b.add1(model_op(ModelOp::column_gemm), gemm_in, gemm, name);
  if (residual >= 0) {
    gemm_in.insert(gemm_in.begin() + 2, residual);
    return b.add1(model_op(ModelOp::row_gemm_residual), gemm_in, gemm, name);
  }
  const int partial = b.add1(model_op(ModelOp::row_gemm), gemm_in, gemm, name);
  if (ctx.world() == 1) return partial;
  return b.add1(model_op(ModelOp::reduce), {partial}, gemm.set("sp", ctx.sequence_parallel),
                name + (ctx.sequence_parallel ? ".reduce_scatter" : ".all_reduce"));
}

int ForwardBuilder::model(RankModel& m, int x) {
  for (size_t li = 0; li < m.layers().size(); ++li) {
    for (size_t bi = 0; bi < m.layers()[li].size(); ++bi) {
      RankModel::BranchStages& stages = m.layers()[li][bi];
      // Inference at tp 1: a branch that ends in a row layer adds x in that layer's GEMM node.
      const bool fuse_residual = !training && ctx.world() == 1 && !stages.empty() && stages.back().linear &&
                                 stages.back().linear->mode() == ParallelMode::row;
      const auto residual_at = [&](size_t stage) { return fuse_residual && stage + 1 == stages.size() ? x : -1; };
      int h = x;
      for (size_t i = 0; i < stages.size(); ++i) {
        if (stages[i].linear) {
          h = linear(stages[i].linear, h, residual_at(i));
          continue;
        }
        if (stages[i].attention) {
          h = attention(*stages[i].attention, h, TE_STR_("layers." << li << "." << stages[i].attention->name));
          continue;
        }
        const std::shared_ptr<ParallelLinear> next = i + 1 < stages.size() ? stages[i + 1].linear : nullptr;
        const auto [out, consumed_next] = activation(*stages[i].act, h, next, residual_at(i + 1));
        h = out;
        i += consumed_next ? 1 : 0;
      }
      if (fuse_residual) {
        x = h;
        continue;
      }
      x = b.add1(model_op(ModelOp::residual_add), {x, h}, {}, TE_STR_("layers." << li << ".residual" << bi));
    }
  }
  return x;
}

}  // namespace te
