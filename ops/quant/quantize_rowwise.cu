// Row-wise fast quantize: a lane owns a span of 32 consecutive elements of a row (four 16-byte loads of 16-bit
// input), so B/32 lanes share a 1x128 block (a whole 1x32 MXFP8 block is one lane's). Everything a lane pays once —
// index math, the shuffles, the block scale with its two IEEE divisions, the scale store — is spread over 32
// elements instead of 8: with 8 per lane that fixed work outweighed the per-element work and the kernel ran at half
// of copy bandwidth (FP8 block, bf16 [8192, 16384] on the H200: 186 → 109 µs, 0.52 → 0.89 of copy; giving each
// group of lanes interleaved 64-byte runs instead of one contiguous 64-byte span per lane measured the same). The
// format and the input dtype are template parameters, so the block scale and unpacking fold to one case's code.
#include <cuda_runtime.h>

#include <type_traits>

#include "engine/cuda_check.h"
#include "engine/device.h"
#include "engine/error.h"
#include "ops/elementwise/cuda_common.cuh"
#include "ops/quant/quant_fast_common.cuh"
#include "ops/quant/quant_pre_act.cuh"
#include "ops/quant/quantize_rowwise.h"

namespace te {
namespace {

using namespace quant_fast;

constexpr int kThreads = 256, kSpan = 32, kChunks = kSpan / 8;  // 8 elements per 16-byte chunk of 16-bit input

// Chunk c of a lane's span: eight elements of x from (m, k), zeros when the chunk is outside x.
template <DType kIn>
__device__ __forceinline__ void load_chunk(const QuantInput& x, int64_t m, int64_t k, bool in, float* v) {
  if (!in) {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = 0.f;
    return;
  }
  const char* base = static_cast<const char*>(x.data);
  if constexpr (kIn == DType::f32) {
    const float4 a = *reinterpret_cast<const float4*>(base + (m * x.stride_m + k) * 4);
    const float4 b = *reinterpret_cast<const float4*>(base + (m * x.stride_m + k + 4) * 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    unpack8(*reinterpret_cast<const uint4*>(base + (m * x.stride_m + k) * 2), kIn, v);
  }
}

// max(acc, |x|) with NaN propagated (PTX max.NaN): one instruction per element; a NaN result sends the lane to
// the NaN-ignoring fold of the reference (scale_math.h amax_fold), which only a lane holding a NaN pays.
__device__ __forceinline__ float max_abs_nan(float acc, float x) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(acc), "f"(fabsf(x)));
  return r;
}

// The 32 codes of a span, four per word; the NaN code where x * factor is NaN (only when `may_nan`).
template <bool kE5M2>
__device__ __forceinline__ void encode_span(const float (&v)[kSpan], float factor, bool may_nan, uint32_t (&q)[8]) {
#pragma unroll
  for (int w = 0; w < 8; ++w) {
    const float* e = v + 4 * w;
    q[w] = fp8_pair_raw<kE5M2>(e[0] * factor, e[1] * factor) | (fp8_pair_raw<kE5M2>(e[2] * factor, e[3] * factor) << 16);
  }
  if (may_nan) {
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      const float* e = v + 4 * w;
      q[w] = nan_fixed_pair(q[w] & 0xFFFFu, e[0] * factor, e[1] * factor) |
             (nan_fixed_pair(q[w] >> 16, e[2] * factor, e[3] * factor) << 16);
    }
  }
}

// Lane indices below this fit 32 bits (with a warp's slack past the end).
constexpr int64_t kIndex32 = (int64_t(1) << 31) - 1024;

// With a fused activation, four blocks per SM (64 registers, a few bytes of spill) instead of the three that 74
// registers allow: at three, ncu showed neither memory (DRAM 57 %) nor issue (72 %) saturated, a latency-bound
// kernel, and the extra warps hide more of it (H200, GELU → FP8 block [8192, 16384]: 138.8 → 131.0 µs, warps
// active 34 → 44 %). The plain quantize (minimum 0: no .minnctapersm directive at all) keeps its registers; it was
// not measured with the cap.
// kImage: the copy's GEMM image is written too (a separate instantiation: the codes it keeps live cost the plain
// fused kernel 60 more bytes of spill under the 64-register cap).
template <QuantFormat F, QuantPreAct Act, DType kIn, bool kImage>
__global__ void __launch_bounds__(kThreads, Act == QuantPreAct::none ? 0 : 4)
    rowwise_kernel(QuantInput x, QuantParams p_in, QuantOutputs out) {
  constexpr int B = F == QuantFormat::mxfp8 ? 32 : 128, G = B / kSpan;  // G lanes share a block
  constexpr bool per_tensor = F == QuantFormat::fp8_per_tensor;
  QuantParams p = p_in;
  p.format = F;  // block_scale folds to this format's case
  store_tensor_scales(p, out, kIn);
  const BlockScale pt = per_tensor ? tensor_scale(p, kIn, out.row_amax) : BlockScale{0.f, 0.f, 0};
  const bool e5m2 = p.data_dtype == DType::fp8_e5m2;
  const int64_t per_row = ceil_div(x.K, B) * G;  // lanes per row: whole blocks, so no block spans rows
  const int64_t total = x.M * per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  // Whole warps iterate together so the shuffles see every lane.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x + (threadIdx.x & ~31); base < total;
       base += stride) {
    const int64_t i = base + (threadIdx.x & 31);
    int64_t m, lr;
    if (total < kIndex32) {  // 32-bit division: a few instructions instead of the 64-bit division routine
      const uint32_t u = static_cast<uint32_t>(i), pr = static_cast<uint32_t>(per_row), q = u / pr;
      m = q, lr = u - q * pr;
    } else {
      m = i / per_row, lr = i % per_row;
    }
    const int r = static_cast<int>(lr % G);
    const int64_t kb = (lr / G) * B, k = kb + kSpan * r;  // this lane's block, and its first element
    const bool in = i < total;
    float v[kSpan];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) load_chunk<kIn>(x, m, k + 8 * c, in && k + 8 * c < x.K, v + 8 * c);
    if constexpr (Act != QuantPreAct::none) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        uint32_t h[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) h[j] = act_round_pair<Act, kIn>(v[8 * c + 2 * j], v[8 * c + 2 * j + 1]);
        if (out.act_out && in && k + 8 * c < x.K)  // the activation itself, for a training forward's backward
          reinterpret_cast<uint4*>(out.act_out)[(m * x.K + k) / 8 + c] = make_uint4(h[0], h[1], h[2], h[3]);
      }
    }
    float a = 0.f;
#pragma unroll
    for (int j = 0; j < kSpan; ++j) a = max_abs_nan(a, v[j]);
    const bool lane_nan = isnan(a);
    if (lane_nan) {
      a = 0.f;
      for (int j = 0; j < kSpan; ++j) a = amax_fold(a, v[j]);
    }
#pragma unroll
    for (int off = 1; off < G; off <<= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
    if (!in) continue;
    BlockScale bs = pt;
    if constexpr (!per_tensor) {
      bs = block_scale(p, kIn, a, 1.f);
      if (r == 0 && kb < x.K) store_block_scale(p, out.row.scale_inv, scale_offset(out.row.layout, m, kb / B), bs);
    }
    const float factor = bs.factor;
    // x * factor is NaN for a NaN x, and for 0 · Inf or Inf · 0 with a degenerate per-tensor scale.
    const bool may_nan = lane_nan || !(fabsf(factor) < INFINITY) || factor == 0.f;
    uint32_t q[8];
    if (e5m2) encode_span<true>(v, factor, may_nan, q);
    else encode_span<false>(v, factor, may_nan, q);
    uint8_t* dst = out.row.data + data_offset(out.row.layout, m, k);
    if (k + kSpan <= x.K && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
      reinterpret_cast<uint4*>(dst)[0] = make_uint4(q[0], q[1], q[2], q[3]);
      reinterpret_cast<uint4*>(dst)[1] = make_uint4(q[4], q[5], q[6], q[7]);
    } else {
#pragma unroll
      for (int c = 0; c < kChunks; ++c)
        if (k + 8 * c < x.K) reinterpret_cast<uint2*>(dst)[c] = make_uint2(q[2 * c], q[2 * c + 1]);
    }
    if constexpr (kImage) {
      const float decoded = decoded_block_scale(p, bs);
#pragma unroll
      for (int c = 0; c < kChunks; ++c)
        if (k + 8 * c < x.K) store_image8(p, out, out.row_image, m * x.K + k + 8 * c, q[2 * c], q[2 * c + 1], decoded);
    }
  }
}

}  // namespace

void quantize_rowwise_cuda(const QuantInput& x, const QuantParams& p, const QuantOutputs& out, const Stream& stream) {
  const int block = p.format == QuantFormat::mxfp8 ? 32 : 128;
  const int64_t lanes = x.M * ceil_div(x.K, block) * (block / kSpan);
  // Up to 64 blocks per SM, far more than are resident at once (3 or 4 at these kernels' 64–79 registers): the
  // block scheduler hands out the rest as blocks finish, so the grid-stride tail stays one short iteration
  // (≈ 2 iterations per thread at [8192, 16384]) instead of a static split's imbalance.
  const unsigned blocks = static_cast<unsigned>(grid_stride_blocks(lanes, kThreads, 64));
  cudaStream_t st = static_cast<cudaStream_t>(stream.handle());
  // One instantiation per (format, activation, input dtype); activations are fused for 16-bit input and block
  // formats only.
  auto launch_image = [&](auto f, auto act, auto image) {
    constexpr QuantFormat Fv = decltype(f)::value;
    constexpr QuantPreAct A = decltype(act)::value;
    constexpr bool I = decltype(image)::value;
    if (x.dtype == DType::bf16) rowwise_kernel<Fv, A, DType::bf16, I><<<blocks, kThreads, 0, st>>>(x, p, out);
    else if (x.dtype == DType::f16) rowwise_kernel<Fv, A, DType::f16, I><<<blocks, kThreads, 0, st>>>(x, p, out);
    else if constexpr (A == QuantPreAct::none)
      rowwise_kernel<Fv, A, DType::f32, I><<<blocks, kThreads, 0, st>>>(x, p, out);
    else TE_THROW("fused activation → quantize of " << dtype_name(x.dtype) << " input", "pass bf16 or f16");
  };
  auto launch = [&](auto f, auto act) {
    if (out.row_image) launch_image(f, act, std::true_type{});
    else launch_image(f, act, std::false_type{});
  };
  auto with_act = [&](auto f) {
    constexpr QuantFormat Fv = decltype(f)::value;
    if constexpr (Fv == QuantFormat::fp8_per_tensor) {  // quantize_fast_cuda rejects a fused activation here
      launch(f, std::integral_constant<QuantPreAct, QuantPreAct::none>{});
    } else {
      with_pre_act(p.pre_act, [&](auto act) { launch(f, act); });
    }
  };
  switch (p.format) {
    case QuantFormat::fp8_per_tensor:
      with_act(std::integral_constant<QuantFormat, QuantFormat::fp8_per_tensor>{});
      break;
    case QuantFormat::fp8_block_1d: with_act(std::integral_constant<QuantFormat, QuantFormat::fp8_block_1d>{}); break;
    case QuantFormat::mxfp8: with_act(std::integral_constant<QuantFormat, QuantFormat::mxfp8>{}); break;
    default: TE_THROW("row-wise fast quantize of " << quant_format_name(p.format), "use quantize_cuda");
  }
  TE_CUDA_CHECK_LAUNCH();
}

}  // namespace te
