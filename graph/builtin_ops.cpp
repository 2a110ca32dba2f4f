#include "graph/builtin_ops.h"

#include "engine/element.h"
#include "engine/error.h"
#include "graph/autograd.h"
#include "te_config.h"

namespace te::builtin {

static_assert(find_op(kBuiltinOps, "fill") == &kBuiltinOps[static_cast<size_t>(BuiltinOp::fill)]);
static_assert(find_op(kBuiltinOps, "add") == &kBuiltinOps[static_cast<size_t>(BuiltinOp::add)]);
static_assert(find_op(kBuiltinOps, "all_reduce") == &kBuiltinOps[static_cast<size_t>(BuiltinOp::all_reduce)]);

std::vector<ValueType> infer_fill(const Node& node, const std::vector<ValueType>&) { return {fill_type(node)}; }

std::vector<ValueType> infer_same_as_all(const Node& node, const std::vector<ValueType>& in) {
  TE_CHECK(!in.empty(), "needs at least one input");
  for (size_t i = 1; i < in.size(); ++i)
    TE_CHECK_HINT(in[i] == in[0], "input " << i << " (" << in[i].str() << ") differs from input 0 (" << in[0].str() << ")",
                  "'" << node.op->name << "' needs inputs of one shape, dtype, device and sharding");
  TE_CHECK(!in[0].is_quantized(), "'" << node.op->name << "' takes high-precision values, got " << in[0].str());
  return {in[0]};
}

void backward_add(BackwardBuilder& bb) {
  const int dy = bb.grad_output(0);
  for (int i = 0; i < 2; ++i)
    if (bb.needs_grad(i)) bb.set_grad_input(i, dy);
}

void run_fill(KernelCall& c) { c.outputs[0].fill(c.node.attr<double>("value"), c.stream); }

void run_add(KernelCall& c) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  Tensor& out = c.outputs[0];
  TE_CHECK(is_high_precision(a.dtype()), "add: dtype " << dtype_name(a.dtype()) << " is not f32/bf16/f16");
#if TE_WITH_CUDA
  if (out.device().is_cuda()) {
    add_cuda(a, b, out, c.stream);
    return;
  }
#endif
  const int64_t n = out.numel();
  const void* pa = a.data_ptr();
  const void* pb = b.data_ptr();
  void* po = out.data_ptr();
  for (int64_t i = 0; i < n; ++i)
    store_f32(po, out.dtype(), i, load_f32(pa, a.dtype(), i) + load_f32(pb, b.dtype(), i));
}

void run_all_reduce(KernelCall& c) {
  c.outputs[0].copy_from(c.inputs[0], c.stream);
  if (c.env.world_size == 1) return;
  TE_CHECK_HINT(static_cast<bool>(c.env.all_reduce_sum),
                "node '" << c.node.name << "': all_reduce over " << c.env.world_size << " ranks without a collective",
                "set ExecEnv::all_reduce_sum (models/ wires the Communicator there)");
  c.env.all_reduce_sum(c.outputs[0], c.stream);
}

}  // namespace te::builtin
