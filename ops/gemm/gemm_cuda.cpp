// gemm() on CUDA builds: an empty reduction, or the call routed to the fp8 path (gemm_fp8.cpp), the high-precision
// cuBLASLt path (gemm_cublaslt.cpp) or the emulation of the other quantized formats (gemm_emulated.cpp).
#include "engine/device.h"
#include "engine/error.h"
#include "ops/gemm/cublaslt_call.h"
#include "ops/gemm/gemm_kernels.h"

namespace te::detail {
namespace {

bool is_block(QuantFormat f) { return f == QuantFormat::fp8_block_1d || f == QuantFormat::fp8_block_2d; }

}  // namespace

bool gemm_cuda(const GemmOperand& a, const GemmOperand& b, GemmRole role, Tensor& out, const GemmOptions& opts,
               GemmContext& ctx, const Stream& stream) {
  set_current_device(out.device());
  const GemmShape s = gemm_shape(a, b, role);
  if ((role == GemmRole::wgrad ? s.M : role == GemmRole::dgrad ? s.N : s.K) == 0) {
    // Empty reduction: out = [out when accumulating] + bias.
    if (!opts.accumulate) out.fill(0.0, stream);
    if (opts.bias.defined()) {
      Tensor tmp = out.contiguous(stream);
      Tensor bias = opts.bias.contiguous(stream);
      cuda::gemm_add_bias(tmp.data_ptr(), out.dtype(), s.P, s.Q, s.Q, bias.data_ptr(), bias.dtype(), stream);
      if (tmp.storage() != out.storage()) out.copy_from(tmp, stream);
    }
    return false;
  }
  const bool fp8 = [&] {
    if (!a.is_quantized() || !b.is_quantized()) return false;
    const QuantFormat fa = a.quantized().format, fb = b.quantized().format;
    return (fa == QuantFormat::fp8_per_tensor && fb == QuantFormat::fp8_per_tensor) || (is_block(fa) && is_block(fb));
  }();
  TE_CHECK_HINT(
      fp8 || (opts.kernel != GemmKernel::streaming && opts.kernel != GemmKernel::wgmma),
      "GEMM " << gemm_role_name(role) << ": the "
              << (opts.kernel == GemmKernel::wgmma ? "warpgroup kernel runs fp8 block-scaled"
                                                   : "weight-streaming kernel runs fp8 per-tensor or block-scaled")
              << " operands only, not " << a.str() << " × " << b.str(),
      "leave GemmOptions::kernel automatic");
  if (fp8) return run_fp8(ctx, a, b, role, out, opts, stream);
  if (!a.is_quantized() && !b.is_quantized()) {
    Tensor lhs, rhs;
    role_views(role, as_2d(a.tensor(), stream), as_2d(b.tensor(), stream), lhs, rhs);
    run_hp(ctx, role, lhs, rhs, out, opts, nullptr, stream);
  } else {
    run_emulated(ctx, a, b, role, out, opts, stream);
  }
  return false;
}

}  // namespace te::detail
