// Fused LayerNorm/RMSNorm + FP8 block-1D row-wise quantize. Same launch shape and per-row code as norm.cu (so the
// high-precision values are bit-identical to the plain forward's output), then per 1x128 block: round to the
// output dtype, amax over the block's lanes by warp shuffles, compute_scale (ops/quant/scale_math.h), cast, and
// store the fp8 bytes and the block's scale_inv. x is read once; no high-precision output touches memory.
#include <cuda_fp8.h>

#include "ops/norm/norm_kernels.cuh"
#include "ops/norm/norm_quantize_impl.h"
#include "ops/quant/quant_block.h"
#include "ops/quant/quant_fast_common.cuh"

namespace te::cuda {
namespace {
using namespace norm_detail;

constexpr int kBlock = 128;

// The rounded outputs of one chunk, held until the block's scale is known: 16-bit values as packed pairs
// (round_pair, the plain forward's store rounding; half the registers of floats: the fused kernel ran at 112
// registers, 9 rows in flight per SM), f32 as is. The amax skips GPU arithmetic's NaN, which the cast turns into
// the NaN code.
template <class TO, int VEC>
struct HeldChunk {
  static constexpr bool kPacked = !std::is_same_v<TO, float>;
  uint32_t w[kPacked ? VEC / 2 : 1];
  float f[kPacked ? 1 : VEC];
  // Rounds y to TO and folds the rounded values into amax.
  __device__ __forceinline__ void hold(const float (&y)[VEC], float& amax) {
#pragma unroll
    for (int k = 0; k < VEC; k += 2) {
      float2 r;
      if constexpr (kPacked) r = unpack_pair<TO>(w[k / 2] = round_pair<TO>(y[k], y[k + 1]));
      else r = make_float2(f[k] = y[k], f[k + 1] = y[k + 1]);
      amax = amax_fold(amax_fold(amax, r.x), r.y);
    }
  }
  __device__ __forceinline__ float2 pair(int k) const {  // elements k, k + 1
    if constexpr (kPacked) return unpack_pair<TO>(w[k / 2]);
    else return make_float2(f[k], f[k + 1]);
  }
};

template <int N>
struct alignas(N) Bytes {
  uint8_t b[N];
};

template <class TX, class TP, class TO, int VEC>
__global__ void __launch_bounds__(kMaxThreads) norm_quant_kernel(const TX* __restrict__ x, const TP* __restrict__ gamma,
                                                          const TP* __restrict__ beta, uint8_t* __restrict__ q,
                                                          float* __restrict__ scale_inv, int64_t scale_ld,
                                                          float* mean_out, float* rstd_out, int64_t M, int64_t H,
                                                          float eps, bool rms, bool e5m2, bool pow2, float qeps,
                                                          float value_for_inf) {
  constexpr int kChunksPerBlock = kBlock / VEC, kPerRound = kChunksPerBlock / 4;  // chunk_of's layout
  __shared__ float smem[96];
  const int nch = static_cast<int>(H / VEC);
  const int64_t nkb = (H + kBlock - 1) / kBlock;
  const int tid = threadIdx.x, bd = blockDim.x;
  const float fmt_max = e5m2 ? 57344.0f : 448.0f;
  if (blockIdx.x == 0)  // padding of the scale rows (M..round4(M)) is zero, never uninitialised
    for (int64_t j = tid; j < nkb * (scale_ld - M); j += bd)
      scale_inv[(j / (scale_ld - M)) * scale_ld + M + j % (scale_ld - M)] = 0.f;
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const TX* xr = x + row * H;
    Vec<TX, VEC> v[kItems];
    load_row<TX, VEC>(xr, nch, v);
    float mu, rstd;
    row_stats<TX, VEC>(v, xr, nch, H, rms, eps, smem, mu, rstd);
    store_row_stats(mean_out, rstd_out, row, mu, rstd);
    // Per round, each group of four lanes holds one 128-element block (chunk_of): the block's amax takes two
    // shuffles, its scale one compute_scale, both shared by the lane's kPerRound chunks.
#pragma unroll
    for (int round = 0; round < kItems / kPerRound; ++round) {
      HeldChunk<TO, VEC> held[kPerRound];  // the values the unfused path stores in out_dtype
      float amax = 0.f;
#pragma unroll
      for (int j = 0; j < kPerRound; ++j) {
        const int i = round * kPerRound + j, c = chunk_of<VEC>(i);
        if (c < nch) {
          float t[VEC], g[VEC], b[VEC], y[VEC];
          unpack<TX, VEC>(v[i], t);
          load_params<TP, VEC>(gamma, beta, c, g, b);
          normalize_chunk<VEC>(t, g, beta != nullptr, b, mu, rstd, y);
          held[j].hold(y, amax);
        }
      }
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));  // every lane reaches these
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
      const float scale = compute_scale(amax, fmt_max, pow2, qeps, value_for_inf);
      const int block = round * (bd / 4) + tid / 4;
      if (tid % 4 == 0 && block * kChunksPerBlock < nch) scale_inv[block * scale_ld + row] = 1.0f / scale;
#pragma unroll
      for (int j = 0; j < kPerRound; ++j) {
        const int c = chunk_of<VEC>(round * kPerRound + j);
        if (c >= nch) continue;
        // Hardware cvt.rn.satfinite (quant_fast_common.cuh): the library's e4m3/e5m2_from_f32 bits (NUMERICS.md
        // §1) for every value GPU arithmetic produces here; the tests compare against the portable encoder.
        Bytes<VEC> out;
#pragma unroll
        for (int k = 0; k < VEC; k += 2) {
          const float2 y = held[j].pair(k);
          const float a = __fmul_rn(y.x, scale), b = __fmul_rn(y.y, scale);
          const uint32_t p = e5m2 ? quant_fast::fp8_pair_raw<true>(a, b) : quant_fast::fp8_pair_raw<false>(a, b);
          out.b[k] = static_cast<uint8_t>(p & 0xFF);
          out.b[k + 1] = static_cast<uint8_t>(p >> 8);
        }
        *reinterpret_cast<Bytes<VEC>*>(q + row * H + int64_t(c) * VEC) = out;
      }
    }
  }
}

template <class TX>
constexpr int V() { return vec_width<TX>(); }

}  // namespace

bool norm_quantize_fusable(const NormFwdArgs& a) {
  return is_high_precision(a.tx) && is_high_precision(a.tp) && is_high_precision(a.tout) && vector_inputs(a) &&
         a.cols / vector_elems(a.tx) <= int64_t(kItems) * kMaxThreads;  // the row fits the register cache
}

void norm_quantize_forward(const NormQuantArgs& a, const Stream& stream) {
  const NormFwdArgs& n = a.norm;
  TE_CHECK(norm_quantize_fusable(n), "norm_quantize_forward: unsupported configuration [" << n.rows << ", " << n.cols
                                                                                          << "]");
  dispatch_hp(n.tx, "norm_quantize x", [&](auto tx) {
    using TX = decltype(tx);
    dispatch_hp(n.tp, "norm_quantize gamma", [&](auto tp) {
      using TP = decltype(tp);
      dispatch_hp(n.tout, "norm_quantize out", [&](auto to) {
        using TO = decltype(to);
        constexpr int VV = V<TX>();
        // Same block size as norm_forward's vector path: identical reduction order, identical statistics.
        const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(n.rows, int64_t(1) << 20));
        norm_quant_kernel<TX, TP, TO, VV><<<static_cast<unsigned>(grid), threads_for(n.cols / VV), 0,
                                            raw_stream(stream)>>>(
            static_cast<const TX*>(n.x), static_cast<const TP*>(n.gamma), static_cast<const TP*>(n.beta), a.q,
            a.scale_inv, a.scale_ld, n.mean, n.rstd, n.rows, n.cols, n.eps, n.kind == NormKind::rmsnorm, a.e5m2,
            a.pow2, a.qeps, hp_max_finite(n.tout));
        TE_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

}  // namespace te::cuda
