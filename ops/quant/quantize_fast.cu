// Fast paths of quantize_cuda for the formats the FP8 recipes run on every step: per-tensor fp8, FP8 block 1D
// (1x128 / 128x1), FP8 block 2D (128x128: the weights, re-quantized after every optimizer step) and MXFP8
// (1x32 / 32x1), from rows that allow 16-byte loads. The per-block and per-element math
// is quant_block.h's (scale, factor, stored scale), so CPU ≡ CUDA bit for bit still holds; only data movement
// differs from the generic tile kernel in quantize.cu:
//   row-wise only  — quantize_rowwise.cu: a lane owns 32 consecutive elements of a row, no shared memory.
//   column-wise    — quant_tile.cuh: a CTA owns a 128x128 tile (16-bit input, optionally through a fused
//   and 2D           activation), parked in shared memory; both copies come from there.
// fp8 codes come from the hardware cvt.rn.satfinite pair conversion (same rounding and saturation as
// e4m3_from_f32/e5m2_from_f32; NaN inputs take the software code, so NaN bits match too).
#include <cuda_runtime.h>

#include <type_traits>

#include "engine/cuda_check.h"
#include "engine/error.h"
#include "ops/quant/quant_fast_common.cuh"
#include "ops/quant/quant_pre_act.cuh"
#include "ops/quant/quant_tile.cuh"
#include "ops/quant/quantize_fast.h"
#include "ops/quant/quantize_rowwise.h"

namespace te {

using namespace quant_fast;

namespace {
// Rows the fast kernels read with 16-byte loads (f32, bf16 or f16).
bool vector_rows(const QuantInput& x) {
  const bool sixteen = x.dtype == DType::bf16 || x.dtype == DType::f16;
  if (!sixteen && x.dtype != DType::f32) return false;
  const int vec = sixteen ? 8 : 4;  // elements per 16 bytes
  return x.stride_k == 1 && x.K % 8 == 0 && x.stride_m % vec == 0 && (reinterpret_cast<uintptr_t>(x.data) & 15) == 0 &&
         x.M > 0 && x.K > 0;
}
}  // namespace

bool fast_rowwise_eligible(const QuantInput& x, const QuantParams& p) {
  const bool format_ok = p.format == QuantFormat::fp8_per_tensor || p.format == QuantFormat::fp8_block_1d ||
                         p.format == QuantFormat::mxfp8;
  return format_ok && vector_rows(x);
}

bool quantize_fast_cuda(const QuantInput& x, const QuantParams& p, const QuantOutputs& out, const Stream& stream) {
  if (nvfp4_format(p.format)) return false;  // quantize_nvfp4.cu, fused activation included
  const bool fused = p.pre_act != QuantPreAct::none;
  // FP8 block 2D (the weights' format, never fused) has the tile kernel only: its copies share the tile's scale.
  const bool two_d = p.format == QuantFormat::fp8_block_2d;
  const bool ok = (fast_rowwise_eligible(x, p) || (two_d && !fused && vector_rows(x))) &&
                  (!p.rowwise || (reinterpret_cast<uintptr_t>(out.row.data) & 7) == 0);
  TE_CHECK(!fused || p.format != QuantFormat::fp8_per_tensor, "fused activation → quantize needs a block format");
  TE_CHECK(ok || !fused, "fused activation → quantize asked for an input without a fast path: " << x.M << "x" << x.K);
  TE_CHECK(!out.act_out || (fused && !p.columnwise && x.stride_m == x.K),
           "activation output asked for without a fused row-wise activation on contiguous input");
  if (!ok) return false;
  cudaStream_t st = static_cast<cudaStream_t>(stream.handle());
  const bool mx = p.format == QuantFormat::mxfp8;
  if (!p.columnwise && !two_d) {
    quantize_rowwise_cuda(x, p, out, stream);
    return true;
  }
  // The generic kernel has no fused activation: a fused request that cannot run here is the caller's error
  // (Quantizer::can_fuse_activation screens for it).
  const bool tile_ok = x.dtype != DType::f32 && quant_tile_grid_fits(x.K) &&
                       out.col.layout.store_transposed == mx;  // MXFP8 keeps [M, K] order, the FP8 formats store xᵀ
  TE_CHECK(tile_ok || !fused, "fused activation → column-wise quantize has no tile path for " << x.M << "x" << x.K);
  if (!tile_ok) return false;
  const dim3 grid(static_cast<unsigned>(ceil_div(x.M, kTile)), static_cast<unsigned>(ceil_div(x.K, kTile)));
  const bool bf = x.dtype == DType::bf16;
  auto launch_act = [&](auto f, auto act) {
    constexpr QuantFormat F = decltype(f)::value;
    constexpr QuantPreAct A = decltype(act)::value;
    if (bf)
      tile_kernel<F, true><<<grid, kTileThreads, 0, st>>>(InputTile<A, DType::bf16>{}, x, p, out);
    else
      tile_kernel<F, false><<<grid, kTileThreads, 0, st>>>(InputTile<A, DType::f16>{}, x, p, out);
  };
  using None = std::integral_constant<QuantPreAct, QuantPreAct::none>;
  auto launch = [&](auto f) {
    if constexpr (decltype(f)::value == QuantFormat::fp8_per_tensor)
      launch_act(f, None{});  // a fused activation needs a block format (checked above)
    else
      with_pre_act(p.pre_act, [&](auto act) { launch_act(f, act); });
  };
  using PerTensor = std::integral_constant<QuantFormat, QuantFormat::fp8_per_tensor>;
  using Block1d = std::integral_constant<QuantFormat, QuantFormat::fp8_block_1d>;
  using Mx = std::integral_constant<QuantFormat, QuantFormat::mxfp8>;
  using Block2d = std::integral_constant<QuantFormat, QuantFormat::fp8_block_2d>;
  switch (p.format) {
    case QuantFormat::fp8_per_tensor: launch(PerTensor{}); break;
    case QuantFormat::fp8_block_1d: launch(Block1d{}); break;
    case QuantFormat::fp8_block_2d: launch_act(Block2d{}, None{}); break;
    default: launch(Mx{}); break;
  }
  TE_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace te
