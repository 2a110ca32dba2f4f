#include "models/rank_model.h"

#include <algorithm>
#include <cmath>

#include "comm/gather.h"
#include "engine/error.h"
#include "graph/optimizer.h"
#include "models/param_grad.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/squared_error.h"

namespace te {
namespace {
NormKind norm_kind(NormType t) { return t == NormType::rmsnorm ? NormKind::rmsnorm : NormKind::layernorm; }
ActKind act_kind(Activation a) {
  switch (a) {
    case Activation::gelu: return ActKind::gelu;
    case Activation::swiglu: return ActKind::swiglu;
    case Activation::relu: return ActKind::relu;
  }
  return ActKind::gelu;
}
}  // namespace

RankModel::RankModel(const ModelSpec& spec, const GlobalParams& global, RankContext& ctx)
    : RankModel(spec, shard_params(global, ctx.rank(), ctx.world()), ctx) {}

RankModel::RankModel(const ModelSpec& spec, RankShards shards, RankContext& ctx)
    : spec_(spec), ctx_(ctx), param_specs_(std::move(shards.specs)) {
  params_.reserve(param_specs_.size());  // stable addresses: layers keep pointers
  for (size_t i = 0; i < param_specs_.size(); ++i) {
    const ParamSpec& ps = param_specs_[i];
    RankParam p;
    p.spec = &ps;
    // Inference keeps one high-precision copy, in the model dtype: saving it gives the same bytes as the master
    // would (files hold the model dtype), and the f32 master would double the weights' memory.
    Tensor shard = shards.values[i].to(ctx.device, ctx.stream);
    shards.values[i] = Tensor();  // the host copy goes as soon as the device has it
    if (ctx.training) p.master = shard;
    p.value = cast(shard, ctx.dtype, ctx.stream);
    // Replicated over the group but computed from this rank's tokens under SP: norm params, row-parallel biases.
    p.grad_all_reduce = ctx.gathers() && ps.shard_dim < 0;
    if (ctx.training) {
      p.grad = Tensor::zeros(shard.shape(), DType::f32, ctx.device, ctx.stream);
      p.state1 = Tensor::zeros(shard.shape(), DType::f32, ctx.device, ctx.stream);
      p.state2 = Tensor::zeros(shard.shape(), DType::f32, ctx.device, ctx.stream);
    }
    params_.push_back(std::move(p));
  }
  const auto& m = spec.model;
  const NormKind nk = norm_kind(m.norm);
  const float eps = static_cast<float>(m.eps);
  for (int64_t i = 0; i < m.layers; ++i) {
    std::vector<BranchStages> branches;
    const std::string prefix = "layers." + std::to_string(i) + ".";
    for (const Branch& branch : m.block) {
      BranchStages stages;
      for (const LayerSpec& l : branch) {
        const std::string base = prefix + l.name + ".";
        auto linear = [&](ParallelMode mode, bool norm, const std::string& w, const std::string& b) {
          ParallelLinear::Params p;
          if (norm) {
            p.norm_weight = param(base + "layer_norm_weight");
            if (nk == NormKind::layernorm) p.norm_bias = param(base + "layer_norm_bias");
          }
          p.weight = param(base + w);
          if (l.bias) p.bias = param(base + b);
          Stage s;
          s.linear = std::make_shared<ParallelLinear>(mode, nk, eps, p, ctx);
          stages.push_back(std::move(s));
        };
        if (l.kind == LayerKind::attention) {
          Stage attention;
          attention.attention = &l;
          stages.push_back(std::move(attention));
        } else if (l.kind == LayerKind::layernorm_mlp) {
          linear(ParallelMode::column, true, "fc1_weight", "fc1_bias");
          Stage act;
          act.act = act_kind(l.activation);
          stages.push_back(std::move(act));
          linear(ParallelMode::row, false, "fc2_weight", "fc2_bias");
        } else {
          linear(l.mode, l.has_norm(), "weight", "bias");
        }
      }
      branches.push_back(std::move(stages));
    }
    layers_.push_back(std::move(branches));
  }
  // Inference under a quantized recipe: the device keeps each weight once, in the form the GEMMs read.
  for_each_linear([&](ParallelLinear& l) { l.hold_weight_quantized_only(ctx_); });
}

RankParam* RankModel::param(const std::string& name) { return &params_[param_index(name)]; }

void RankModel::update_forward_scales() {
  for_each_linear([&](ParallelLinear& l) { l.update_forward_scales(ctx_); });
}

double RankModel::loss_elements(const Tensor& out) const {
  // loss = Σ (out − target)² / (T·H) over the global tensor; every rank holds T/W (SP) or all T tokens.
  const int64_t global_tokens = out.size(0) * (ctx_.sequence_parallel ? ctx_.world() : 1);
  return static_cast<double>(global_tokens) * static_cast<double>(out.size(1));
}

RankModel::InputScales RankModel::snapshot_input_scales() {
  InputScales saved;
  for (auto& [name, q] : quantizers())
    if (q->delayed().defined() && name.ends_with(".input"))
      saved.push_back({q, q->delayed().copy_to(ctx_.device, ctx_.stream)});
  return saved;
}

void RankModel::restore_input_scales(const InputScales& saved) {
  for (auto& [name, q] : quantizers()) {
    if (!name.ends_with(".input") || !q->delayed().defined()) continue;
    const InputScale* s = nullptr;
    for (const InputScale& each : saved)
      if (each.q == q) s = &each;
    // Its first quantize may have come after the snapshot: then back to the state before any.
    q->set_delayed(s ? s->state : DelayedScaling::fresh(q->config().amax_history_len, ctx_.device, ctx_.stream),
                   ctx_.device, ctx_.stream);
  }
}

void RankModel::discard_saved() {
  for_each_linear([](ParallelLinear& l) { l.discard_saved(); });
}

void RankModel::begin_grad_step() { te::begin_grad_step(params_); }

void RankModel::finish_grad_step(const int32_t* skip) {
  te::finish_grad_step(params_, ctx_.stream);
  for_each_linear([&](ParallelLinear& l) { l.update_backward_scales(ctx_, skip); });
}

namespace {
OptimizerStep optimizer_step_of(const ModelSpec& spec, const StepControl& control, bool update) {
  const OptimizerKind kind =
      spec.run.optimizer.type == OptimizerType::adamw ? OptimizerKind::adamw : OptimizerKind::sgd_momentum;
  return {kind, control.scalars(), control.skip(), update};
}
}  // namespace

size_t RankModel::param_index(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].spec->name == name) return i;
  TE_THROW("model parameter '" << name << "' is not in the parameter list", "this is a bug in parameter_specs");
}

std::vector<int64_t> RankModel::weights_stepping_apart() const {
  std::vector<int64_t> apart;
  const bool adamw = spec_.run.optimizer.type == OptimizerType::adamw;
  for_each_linear([&](const ParallelLinear& l) {
    if (l.steps_weight_in_place(ctx_, adamw))
      apart.push_back(static_cast<int64_t>(param_index(l.params().weight->spec->name)));
  });
  return apart;
}

ParamSlot RankModel::updating_slot(RankParam& p, bool update, const Stream& stream) {
  // The model-dtype copy, written in the same pass (a quantized GEMM weight's was released after quantizing).
  if (update && !p.value.defined()) p.value = Tensor::empty(p.master.shape(), ctx_.dtype, ctx_.device, stream);
  return {p.master, p.grad, p.state1, p.state2, p.value};
}

void RankModel::step_weight(size_t param, const StepControl& control, const Stream& stream) {
  const OptimizerStep step = optimizer_step_of(spec_, control, true);
  RankParam& p = params_.at(param);
  ParallelLinear* owner = nullptr;
  for_each_linear([&](ParallelLinear& l) {
    if (l.params().weight == &p) owner = &l;
  });
  TE_CHECK(owner != nullptr, "step_weight: " << p.spec->name << " is not a GEMM weight");
  if (owner->step_weight_into_cache(step, stream)) return;
  // The plain step: the cache is stale after it. A copy of the weight made on this stream (only where
  // steps_weight_in_place misjudged the fused path) comes from this stream's blocks, which no other stream reuses.
  owner->invalidate_weight_cache();
  const ParamSlot slot = updating_slot(p, true, stream);
  optimizer_step(std::span(&slot, 1), step, stream);
}

void RankModel::apply_optimizer(const StepControl& control, bool update, std::span<const int64_t> apart,
                                const Stream& stream) {
  const OptimizerStep step = optimizer_step_of(spec_, control, update);
  auto stepped_apart = [&](const RankParam* p) {
    return std::find(apart.begin(), apart.end(), static_cast<int64_t>(p - params_.data())) != apart.end();
  };
  // Weights whose optimizer step writes their next quantized copies in place (one pass, no model-dtype copy) keep
  // their caches. The other caches are stale after this step and the optimizer does not read them: they go before
  // the fresh model-dtype copies are allocated, so the two never coexist. (A step skipped on the device writes the
  // copies from the unchanged masters: the next forward quantizes the same weights again.)
  std::vector<const RankParam*> stepped;
  for_each_linear([&](ParallelLinear& l) {
    if (stepped_apart(l.params().weight)) return;
    if (l.step_weight_into_cache(step, stream))
      stepped.push_back(l.params().weight);
    else if (update)
      l.invalidate_weight_cache();
  });
  std::vector<ParamSlot> slots;
  slots.reserve(params_.size());
  for (RankParam& p : params_) {
    if (stepped_apart(&p) || std::find(stepped.begin(), stepped.end(), &p) != stepped.end()) continue;
    slots.push_back(updating_slot(p, update, stream));
  }
  optimizer_step(slots, step, stream);
}

bool RankModel::quantizes_weights() const {
  bool any = false;
  for_each_linear([&](const ParallelLinear& l) { any = any || l.quantizes_weight(); });
  return any;
}

void RankModel::quantize_weights(RankContext& ctx, const Stream& s) {
  for_each_linear([&](ParallelLinear& l) { l.quantize_weight(ctx, s); });
}

void RankModel::invalidate_weight_caches() {
  for_each_linear([](ParallelLinear& l) { l.invalidate_weight_cache(); });
}

void RankModel::set_optimizer_state(size_t i, const Tensor& state1, const Tensor& state2) {
  RankParam& p = params_[i];
  auto put = [&](Tensor& dst, const Tensor& src, const char* what) {
    TE_CHECK(src.shape() == dst.shape() && src.dtype() == DType::f32,
             p.spec->name << " " << what << ": expected f32 " << shape_str(dst.shape()) << ", got " << src.str());
    dst.copy_from(src.contiguous(), ctx_.stream);
  };
  TE_CHECK(p.state1.defined(), "set_optimizer_state on a model built for inference");
  put(p.state1, state1, "optimizer state 1");
  if (state2.defined()) put(p.state2, state2, "optimizer state 2");
}

std::vector<std::pair<std::string, Quantizer*>> RankModel::quantizers() {
  std::vector<std::pair<std::string, Quantizer*>> out;
  for_each_linear([&](ParallelLinear& l) {
    for (const auto& [role, q] : l.quantizers())
      if (q) out.emplace_back(l.params().weight->spec->name + "." + role, q);
  });
  return out;
}

RankModel::Memory RankModel::memory() const {
  Memory m;
  auto bytes = [](const Tensor& t) { return t.defined() ? t.nbytes() : 0; };
  for (const RankParam& p : params_) {
    m.weights += bytes(p.value);
    if (p.host_value.defined() && ctx_.device.is_cuda()) m.host_weights += bytes(p.host_value);
    m.master_weights += bytes(p.master);
    m.gradients += bytes(p.grad);
    m.optimizer_state += bytes(p.state1) + bytes(p.state2);
  }
  for_each_linear([&](const ParallelLinear& l) {
    m.weights += l.weight_cache_bytes();
    m.weight_images += l.weight_image_bytes();
  });
  return m;
}

Tensor RankModel::master_values(size_t i) const {
  const RankParam& p = params_[i];
  if (p.master.defined()) return p.master;
  if (p.value.defined()) return cast(p.value, DType::f32, ctx_.stream);
  return cast(p.host_value.to(ctx_.device, ctx_.stream), DType::f32, ctx_.stream);
}

void RankModel::export_params(GlobalParams& global) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor host = master_values(i).to(Device::cpu(), ctx_.stream);
    unshard_param(*params_[i].spec, host, ctx_.rank(), ctx_.world(), global.values[i]);
  }
}

}  // namespace te
