#include "models/held_values.h"

#include <algorithm>

#include "models/model_kernel_call.h"
#include "models/train_ops.h"

namespace te {
namespace {

int64_t dense_bytes(const ValueType& t) { return dtype_storage_bytes(t.dtype, shape_numel(t.shape)); }

// A quantized value with the GEMM images its quantizing pass writes beside the copies (run.activation_images).
int64_t quantized_bytes_with_images(const ValueType& t, const RankContext& ctx) {
  int64_t bytes = quantized_value_bytes(t);
  const std::optional<ImageSpec> image = gemm_image_spec(*t.quant, ctx.device);
  if (!ctx.activation_images || !image) return bytes;
  for (Usage u : {Usage::rowwise, Usage::columnwise})
    if (has_usage(t.usages, u)) bytes += dtype_storage_bytes(image->dtype, shape_numel(t.shape));
  return bytes;
}

bool is_own_wgrad_input(const Node& n) {
  return is_train_op(n.op, {TrainOp::wgrad_input}) && n.attr_or<bool>("own", false);
}

// Whether node `c` reads value `v` (an own wgrad_input names the activation only to type its output).
bool reads(const Node& c, int v) { return !(is_own_wgrad_input(c) && c.inputs[0] == v); }

int64_t held_bytes(const Graph& g, const Value& v, const ModelBinding& b) {
  const Node& n = g.node(v.producer);
  // Parameter gradients accumulate into the model's own tensors; the loss gate and the loss sum's reduction pass
  // their input on in place.
  if (is_train_op(n.op, {TrainOp::wgrad, TrainOp::bias_grad, TrainOp::loss_gate, TrainOp::sum_all_reduce})) return 0;
  if (is_train_op(n.op, {TrainOp::layernorm_backward, TrainOp::rmsnorm_backward}) && v.id != n.outputs[0]) return 0;
  if (is_own_wgrad_input(n)) {
    const Value& act = g.value(n.inputs[0]);  // the activation the fused pass quantized
    const Node& fused = g.node(act.producer);
    const ParallelLinear& l = n.state_as<ParallelLinear>();
    const bool col = l.keeps_columnwise_copy(model_ops::act_of(fused), g.value(fused.inputs[0]).type.shape, *b.ctx);
    return col ? quantized_bytes_with_images(v.type, *b.ctx) : dense_bytes(act.type);
  }
  if (!v.type.is_quantized()) return dense_bytes(v.type);
  // A gather may fall back to the model dtype (comm/gather.h), whose quantize writes images: the larger of the two.
  return n.op->is_gather ? std::max(quantized_bytes_with_images(v.type, *b.ctx), dense_bytes(v.type))
                         : quantized_bytes_with_images(v.type, *b.ctx);
}

}  // namespace

HeldValues plan_held_values(const Graph& g, const Plan& plan, const ModelBinding& binding) {
  const int num_steps = static_cast<int>(plan.steps.size());
  std::vector<int> pos(static_cast<size_t>(g.num_nodes()));
  for (int s = 0; s < num_steps; ++s) pos[static_cast<size_t>(plan.steps[static_cast<size_t>(s)].node)] = s;
  auto stream_at = [&](int node) { return plan.steps[static_cast<size_t>(pos[static_cast<size_t>(node)])].stream; };
  const bool gpu = binding.ctx->device.is_cuda();

  HeldValues h;
  h.release_after.resize(static_cast<size_t>(g.num_nodes()));
  std::vector<int64_t> delta(static_cast<size_t>(num_steps) + 1, 0);  // bytes taken at a step, given back after one
  for (const Value& v : g.values()) {
    if (!plan.buffers[static_cast<size_t>(v.id)].held_by_binding || v.producer < 0) continue;
    int last = v.producer;
    bool one_stream = true;
    for (int c : v.consumers) {
      if (!reads(g.node(c), v.id)) continue;
      one_stream = one_stream && stream_at(c) == stream_at(v.producer);
      if (pos[static_cast<size_t>(c)] > pos[static_cast<size_t>(last)]) last = c;
    }
    const bool early = !v.is_output && (!gpu || one_stream);
    if (early) h.release_after[static_cast<size_t>(last)].push_back(v.id);
    const Node& n = g.node(v.producer);
    const int first = pos[static_cast<size_t>(is_own_wgrad_input(n) ? g.value(n.inputs[0]).producer : v.producer)];
    const int end = early ? pos[static_cast<size_t>(last)] : num_steps - 1;
    const int64_t bytes = held_bytes(g, v, binding);
    delta[static_cast<size_t>(first)] += bytes;
    delta[static_cast<size_t>(end) + 1] -= bytes;
  }
  int64_t live = 0;
  for (int s = 0; s < num_steps; ++s) h.peak_bytes = std::max(h.peak_bytes, live += delta[static_cast<size_t>(s)]);
  return h;
}

}  // namespace te
