#include "models/model_ops.h"

#include <any>

#include "engine/error.h"
#include "models/model_kernel_call.h"
#include "ops/act/act.h"
#include "ops/elementwise/elementwise.h"

namespace te {

static_assert(find_op(kModelOps, "residual_add") == &kModelOps[static_cast<size_t>(ModelOp::residual_add)]);
static_assert(find_op(kModelOps, "row_gemm_residual") == &kModelOps[static_cast<size_t>(ModelOp::row_gemm_residual)]);
static_assert(find_op(kModelOps, "sp_gather") == &kModelOps[static_cast<size_t>(ModelOp::sp_gather)]);

bool model_value_held_by_binding(const Graph& g, const Value& v) {
  return v.type.is_quantized() || (v.producer >= 0 && g.node(v.producer).op->stream == StreamClass::comm);
}

namespace model_ops {
namespace {

void check_2d(const Node& n, const ValueType& t, const char* what) {
  TE_CHECK(t.shape.size() == 2, "node '" << n.name << "': " << what << " must be 2-D, got " << t.str());
}

// The value with `format` applied (quantized row-wise), when the node has that attribute.
ValueType maybe_quantized(const Node& n, ValueType t) {
  if (!n.attrs.has("format")) return t;
  const std::string& name = n.attr<std::string>("format");
  const auto f = quant_format_from_name(name);
  TE_CHECK(f.has_value(), "node '" << n.name << "': format '" << name << "' is not a quantized format");
  t.quant = *f;
  t.usages = Usage::rowwise;
  return t;
}

}  // namespace

std::vector<ValueType> infer_norm(const Node& n, const std::vector<ValueType>& in) {
  TE_CHECK(in.size() == 2 || in.size() == 3, "node '" << n.name << "': norm takes x, gamma[, beta]");
  check_2d(n, in[0], "x");
  TE_CHECK(in[1].shape == Shape{in[0].shape[1]}, "node '" << n.name << "': gamma " << in[1].str() << " for x "
                                                          << in[0].str());
  return {in[0]};
}

std::vector<ValueType> infer_quantize(const Node& n, const std::vector<ValueType>& in) {
  if (in.size() > 1) (void)infer_norm(n, in);  // norm_quantize: x, gamma[, beta]
  check_2d(n, in[0], "x");
  TE_CHECK(!in[0].is_quantized(), "node '" << n.name << "': quantizes a high-precision value, got " << in[0].str());
  return {maybe_quantized(n, in[0])};
}

std::vector<ValueType> infer_gather(const Node& n, const std::vector<ValueType>& in) {
  check_2d(n, in[0], "x");
  TE_CHECK(in[0].sharding == Sharding::split(0), "node '" << n.name << "': gathers a split(0) value, got "
                                                          << in[0].str());
  ValueType out = in[0];
  out.shape[0] *= n.attr<int64_t>("world");
  out.sharding = Sharding::replicated();
  return {maybe_quantized(n, out)};
}

std::vector<ValueType> infer_gemm(const Node& n, const std::vector<ValueType>& in) {
  TE_CHECK(in.size() == 2 || in.size() == 3, "node '" << n.name << "': a GEMM takes input, weight[, bias]");
  check_2d(n, in[0], "input");
  check_2d(n, in[1], "weight");
  TE_CHECK(in[0].shape[1] == in[1].shape[1], "node '" << n.name << "': input " << in[0].str() << " and weight "
                                                      << in[1].str() << " disagree on K");
  ValueType out;
  out.shape = {in[0].shape[0], in[1].shape[0]};
  out.dtype = in[0].dtype;
  out.device = in[0].device;
  const bool row = is_model_op(n.op, ModelOp::row_gemm);
  out.sharding = n.attr<int64_t>("world") == 1 ? in[0].sharding : row ? Sharding::partial() : Sharding::split(1);
  return {out};
}

std::vector<ValueType> infer_gemm_residual(const Node& n, const std::vector<ValueType>& in) {
  TE_CHECK(in.size() == 3 || in.size() == 4, "node '" << n.name << "': takes input, weight, residual[, bias]");
  TE_CHECK(n.attr<int64_t>("world") == 1, "node '" << n.name << "': the residual joins a whole sum (world 1)");
  std::vector<ValueType> gemm_in{in[0], in[1]};
  if (in.size() == 4) gemm_in.push_back(in[3]);
  const ValueType out = infer_gemm(n, gemm_in)[0];
  TE_CHECK(in[2] == out, "node '" << n.name << "': residual add of " << in[2].str() << " and " << out.str());
  return {out};
}

std::vector<ValueType> infer_act(const Node& n, const std::vector<ValueType>& in) {
  check_2d(n, in[0], "x");
  ValueType out = in[0];
  out.shape[1] = act_out_cols(act_of(n), in[0].shape[1]);
  return {maybe_quantized(n, out)};
}

std::vector<ValueType> infer_reduce(const Node& n, const std::vector<ValueType>& in) {
  check_2d(n, in[0], "partial");
  TE_CHECK(in[0].sharding == Sharding::partial(), "node '" << n.name << "': reduces a partial value, got "
                                                           << in[0].str());
  ValueType out = in[0];
  if (n.attr<bool>("sp")) {
    out.shape[0] /= n.attr<int64_t>("world");
    out.sharding = Sharding::split(0);
  } else {
    out.sharding = Sharding::replicated();
  }
  return {out};
}

std::vector<ValueType> infer_residual(const Node& n, const std::vector<ValueType>& in) {
  TE_CHECK(in[0] == in[1], "node '" << n.name << "': residual add of " << in[0].str() << " and " << in[1].str());
  return {in[0]};
}

void run_norm(KernelCall& c) {
  linear(c).norm(tensor_input(c, 0), c.outputs[0], *binding(c).ctx, c.stream);
}

void run_norm_quantize(KernelCall& c) {
  hold(c, GemmOperand(linear(c).norm_quantized(tensor_input(c, 0), *binding(c).ctx, c.stream)));
}

void run_sp_gather(KernelCall& c) {
  hold(c, linear(c).gather_input(tensor_input(c, 0), *binding(c).ctx, c.stream));
}

void run_quantize(KernelCall& c) {
  hold(c, linear(c).local_input(tensor_input(c, 0), *binding(c).ctx, c.stream));
}

void run_column_gemm(KernelCall& c) { linear(c).column_gemm(operand(c, 0), c.outputs[0], *binding(c).ctx, c.stream); }

void run_act(KernelCall& c) {
  act_forward(act_of(c.node), tensor_input(c, 0), c.outputs[0], c.stream);
}

void run_act_quantize(KernelCall& c) {
  hold(c, GemmOperand(linear(c).act_quantized(act_of(c.node), tensor_input(c, 0), *binding(c).ctx, c.stream)));
}

void run_row_gemm(KernelCall& c) { linear(c).row_gemm(operand(c, 0), c.outputs[0], *binding(c).ctx, c.stream); }

void run_row_gemm_residual(KernelCall& c) {
  linear(c).row_gemm(operand(c, 0), c.outputs[0], *binding(c).ctx, c.stream, tensor_input(c, 2));
}

void run_reduce(KernelCall& c) {
  RankContext& ctx = *binding(c).ctx;
  Tensor partial = tensor_input(c, 0);
  // Without SP the reduction is in place: reduce a copy, since the partial's arena bytes are reused after this node.
  if (!ctx.sequence_parallel) {
    Tensor own = Tensor::empty(partial.shape(), partial.dtype(), partial.device(), c.stream);
    own.copy_from(partial, c.stream);
    partial = own;
  }
  hold(c, GemmOperand(linear(c).reduce_partial(partial, ctx, c.stream)));
}

void run_residual(KernelCall& c) { add(tensor_input(c, 0), tensor_input(c, 1), Tensor(), c.outputs[0], c.stream); }

}  // namespace model_ops
}  // namespace te
