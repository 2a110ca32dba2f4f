// The emulated path of gemm() on CUDA builds: MXFP8, NVFP4 and mixed-format operands have no Hopper tensor-core
// GEMM, so each is dequantized exactly (or its carried image is read) and a high-precision cuBLASLt GEMM multiplies
// them; an NVFP4 global scale folds into alpha on the device.
#include <map>
#include <mutex>

#include "engine/error.h"
#include "engine/log.h"
#include "ops/gemm/cublaslt_call.h"
#include "ops/gemm/gemm_kernels.h"

namespace te::detail {
namespace {

// amax = 448·6 on `device`, made once per device: a copy from the host on every call would be a synchronising copy
// inside a CUDA-graph capture, and the graph would read a freed buffer at replay. Kept until the process ends (never
// destroyed: static teardown may come after the CUDA context).
const Tensor& nvfp4_unit_amax(Device device) {
  static std::mutex mu;
  static auto* per_device = new std::map<int, Tensor>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = per_device->find(device.index);
  if (it == per_device->end())
    it = per_device->emplace(device.index, Tensor::from_f32({448.0f * 6.0f}, {1}, DType::f32, device)).first;
  return it->second;
}

// q's copy `u` in [rows, cols] orientation as `dtype`: exact for MXFP8, and for NVFP4 without its global factor
// (amax = 448·6 makes S_enc = S_dec = 1: the values are q · S_dec_b, exact in bf16).
Tensor exact_image(QuantizedTensor q, Usage u, DType dtype, const Stream& stream) {
  if (nvfp4_format(q.format)) {
    const Tensor& unit = nvfp4_unit_amax(q.device());
    q.rowwise_amax = unit;
    q.columnwise_amax = unit;
  }
  return as_2d(q.dequantize_usage(u, dtype, stream), stream);
}

// The operand as the emulated GEMM multiplies it: its carried image when it has one in `dtype`, else q's copy made
// exact now; an NVFP4 global amax comes back through *amax, for alpha.
Tensor emulated_operand(const GemmOperand& op, Usage u, DType dtype, GemmRole role, const char* name, bool keep_rht,
                        Tensor* amax, GemmContext& ctx, const Stream& stream) {
  if (!op.is_quantized()) return as_2d(op.tensor(), stream);
  QuantizedTensor q = op.quantized();
  if (keep_rht) q.columnwise_rht = false;  // read the transformed values as stored (rht_cancels)
  TE_CHECK_HINT(q.has(u),
                "GEMM " << gemm_role_name(role) << ": operand " << name << " " << op.str() << " lacks the "
                        << usage_name(u) << " copy this role reads",
                "quantize it with that usage");
  if (nvfp4_format(q.format)) *amax = u == Usage::rowwise ? q.rowwise_amax : q.columnwise_amax;
  if (const Tensor* image = usable_image(op, u, keep_rht, dtype)) {
    ctx.mutable_stats().images_read++;
    return *image;
  }
  ctx.mutable_stats().operands_dequantized++;
  return exact_image(std::move(q), u, dtype, stream);
}

}  // namespace

void run_emulated(GemmContext& ctx, const GemmOperand& a, const GemmOperand& b, GemmRole role, Tensor& out,
                  const GemmOptions& opts, const Stream& stream) {
  ctx.mutable_stats().emulated_calls++;
  TE_LOG_ONCE(info, "GEMM: " << a.str() << " × " << b.str()
                             << " has no Hopper tensor-core path: dequantizing exactly and running a "
                                "high-precision GEMM (emulation)");
  const DType dt = !a.is_quantized() ? a.tensor().dtype() : !b.is_quantized() ? b.tensor().dtype() : DType::bf16;
  const RoleUsages u = role_usages(role);
  Tensor amax_a, amax_b;
  const bool keep_rht = rht_cancels(a, b, role);
  const Tensor a2 = emulated_operand(a, u.a, dt, role, "a", keep_rht, &amax_a, ctx, stream);  // [a.rows, a.cols]
  const Tensor b2 = emulated_operand(b, u.b, dt, role, "b", keep_rht, &amax_b, ctx, stream);  // [b.rows, b.cols]
  Tensor alpha_beta;  // device [alpha, beta] when an NVFP4 global factor is folded into alpha
  if (amax_a.defined() || amax_b.defined()) {
    alpha_beta = Tensor::empty({2}, DType::f32, out.device(), stream);
    cuda::gemm_nvfp4_alpha(amax_a.defined() ? amax_a.data<float>() : nullptr,
                           amax_b.defined() ? amax_b.data<float>() : nullptr, opts.alpha, opts.accumulate ? 1.f : 0.f,
                           alpha_beta.data<float>(), stream);
  }
  Tensor lhs, rhs;
  role_views(role, a2, b2, lhs, rhs);
  run_hp(ctx, role, lhs, rhs, out, opts, alpha_beta.defined() ? alpha_beta.data<float>() : nullptr, stream);
}

}  // namespace te::detail
