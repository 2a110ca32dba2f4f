// The attention rows of the model's op table (models/model_ops.h) and the training op of their backward
// (models/train_ops.h). Unlike the linear phases, these nodes own everything they need: the layout, mask, scale and
// rotary base are their attributes, and they touch no layer state.
#include "engine/error.h"
#include "graph/autograd.h"
#include "models/model_kernel_call.h"
#include "models/train_ops.h"
#include "ops/attention/attention.h"
#include "ops/attention/rope.h"

namespace te {
namespace {

AttentionLayout attention_layout_of(const Node& n) {
  return {n.attr<int64_t>("heads"), n.attr<int64_t>("kv_heads"), n.attr<int64_t>("head_dim"), n.attr<int64_t>("seq"),
          n.attr_or<bool>("kinds_apart", false)};
}

AttentionOptions attention_options_of(const Node& n) {
  return {n.attr<bool>("causal"), static_cast<float>(n.attr<double>("scale")), n.attr_or<bool>("deterministic", true)};
}

void check_qkv_type(const Node& n, const ValueType& qkv) {
  TE_CHECK(qkv.shape.size() == 2 && !qkv.is_quantized(),
           "node '" << n.name << "': reads a 2-D high-precision QKV value, got " << qkv.str());
  check_attention_layout(attention_layout_of(n), qkv.shape[0], qkv.shape[1]);
}

}  // namespace

namespace model_ops {

AttentionLayout rank_attention_layout(const AttentionSpec& a, int64_t world) {
  return {a.heads / world, a.kv_heads / world, a.head_dim, a.seq_len, qkv_kinds_apart(a)};
}

std::vector<ValueType> infer_rope(const Node& n, const std::vector<ValueType>& in) {
  check_qkv_type(n, in[0]);
  return {in[0]};
}

std::vector<ValueType> infer_attention(const Node& n, const std::vector<ValueType>& in) {
  check_qkv_type(n, in[0]);
  const AttentionLayout l = attention_layout_of(n);
  ValueType out = in[0];
  out.shape = {in[0].shape[0], l.out_cols()};
  ValueType lse = in[0];
  lse.shape = {in[0].shape[0] / l.seq, l.heads, l.seq};
  lse.dtype = DType::f32;
  return {out, lse};
}

void run_rope(KernelCall& c) {
  rope_apply(attention_layout_of(c.node), c.node.attr<double>("base"), c.node.attr_or<bool>("inverse", false),
             tensor_input(c, 0), c.outputs[0], c.stream);
}

void run_attention(KernelCall& c) {
  attention_forward(attention_layout_of(c.node), attention_options_of(c.node), tensor_input(c, 0), c.outputs[0],
                    c.outputs[1], c.stream);
}

// A rotation's transpose is its inverse: the gradient turns back, in place over the incoming gradient.
void backward_rope(BackwardBuilder& bb) {
  if (!bb.needs_grad(0)) return;
  const Node& n = bb.node();
  Attrs a = n.attrs;
  a.set("inverse", !n.attr_or<bool>("inverse", false)).set("in_place", int64_t{0});
  bb.set_grad_input(0, bb.add1(model_op(ModelOp::rope), {bb.grad_output(0)}, a, n.name + "_backward"));
}

// The probabilities are recomputed from the saved statistics (lse), so the forward keeps only qkv, out and lse.
void backward_attention(BackwardBuilder& bb) {
  if (!bb.needs_grad(0)) return;
  const Node& n = bb.node();
  bb.set_grad_input(0, bb.add1(train_op(TrainOp::attention_backward),
                               {bb.grad_output(0), bb.input(0), bb.output(0), bb.output(1)}, n.attrs,
                               n.name + "_backward"));
}

}  // namespace model_ops

namespace train_ops {

void run_attention_backward(KernelCall& c) {
  using model_ops::tensor_input;
  attention_backward(attention_layout_of(c.node), attention_options_of(c.node), tensor_input(c, 0), tensor_input(c, 1),
                     tensor_input(c, 2), tensor_input(c, 3), c.outputs[0], c.stream);
}

}  // namespace train_ops
}  // namespace te
