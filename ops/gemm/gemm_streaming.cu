// See gemm_streaming.h.
//
// Work split: a CTA owns 128 columns (rows of the streamed operand; one 128x128 weight-scale tile) and a range of
// K blocks; each of its 8 warps owns 16 of those columns (two m16n8 n-tiles) and all P rows (up to four m16
// tiles). The streamed operand is read exactly once; the small operand is re-read by every CTA from L1/L2.
//
// The tensor cores run f16 m16n8k16 (fp8 → f16 is exact for both fp8 formats; the products and the fp32
// accumulation are those of an fp8 MMA). Register fragments (PTX ISA, "mma.m16n8k16"), lane = 4·g + t: A regs hold
// rows g / g+8 and logical k = 2t, 2t+1 / 2t+8, 2t+9; B regs hold column g and the same k. A dot product does not
// care about the order of k, so logical k is mapped to physical bytes such that each lane's k values are 16
// contiguous bytes of a 64-byte chunk: in k-step s (0..3) the pair (2t, 2t+1) is bytes 16t + 4s + {0, 1} and the pair
// (2t+8, 2t+9) is bytes 16t + 4s + {2, 3}. Both operands use the same map, so one 16-byte load feeds four k-steps.
#include "ops/gemm/gemm_streaming.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "engine/cuda_check.h"
#include "engine/element.h"

namespace te::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kColsPerWarp = 16;
constexpr int kTileCols = kWarps * kColsPerWarp;  // 128
constexpr int kBlockK = 128;
constexpr int kUnroll = 2;  // K blocks whose streamed bytes are in flight at once per warp

enum class Types : int { e4m3_e4m3, e5m2_e4m3, e4m3_e5m2 };  // lhs × rhs

__device__ __forceinline__ uint4 load_streamed(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 load_cached(const uint8_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// fp8 pair (low byte = lower k) → f16x2, exact for E4M3 and E5M2.
template <bool E5M2>
__device__ __forceinline__ uint32_t to_f16x2(uint32_t two_bytes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xFFFFu),
                                                   E5M2 ? __NV_E5M2 : __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The scale of K block kb for one row of an operand (per-tensor scales are applied once at the end instead).
__device__ __forceinline__ float block_scale(StreamingScale kind, const float* s, int64_t ld, int64_t kb,
                                             int64_t row) {
  switch (kind) {
    case StreamingScale::per_tensor: return 1.f;
    case StreamingScale::vec128: return __ldg(s + kb * ld + row);
    case StreamingScale::blk128: return __ldg(s + (row / 128) * ld + kb);
  }
  return 1.f;
}

__device__ __forceinline__ void store_result(const StreamingGemm& g, float factor, int64_t row, int64_t col, float v) {
  v *= factor;
  const int64_t o = row * g.Q + col;
  if (g.bias) v += load_f32(g.bias, g.bias_dtype, col);
  if (g.accumulate) v += load_f32(g.out, g.out_dtype, o);
  store_f32(g.out, g.out_dtype, o, v);
}

template <int MT, Types T>
__global__ void __launch_bounds__(kWarps * 32) streaming_gemm_kernel(const StreamingGemm g, int splits) {
  constexpr bool kLhsE5M2 = T == Types::e5m2_e4m3, kRhsE5M2 = T == Types::e4m3_e5m2;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, t = lane & 3;
  const int64_t tile = blockIdx.x;
  const int split = blockIdx.y;
  const int64_t kblocks = g.D / kBlockK;
  const int64_t kb0 = split * kblocks / splits, kb1 = (split + 1) * kblocks / splits;
  const auto* lhs = static_cast<const uint8_t*>(g.lhs);
  const auto* rhs = static_cast<const uint8_t*>(g.rhs);

  // This lane's streamed rows (one per n-tile) and small-operand rows (g and g+8 of each m-tile).
  int64_t col[2];
  bool col_ok[2];
  const uint8_t* w_ptr[2];
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    col[nt] = tile * kTileCols + warp * kColsPerWarp + nt * 8 + gid;
    col_ok[nt] = col[nt] < g.Q;
    w_ptr[nt] = rhs + (col_ok[nt] ? col[nt] : 0) * g.D + t * 16;
  }
  bool row_ok[MT][2];
  const uint8_t* x_ptr[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t row = mt * 16 + gid + r * 8;
      row_ok[mt][r] = row < g.P;
      x_ptr[mt][r] = lhs + (row_ok[mt][r] ? row : 0) * g.D + t * 16;
    }

  float acc[MT][2][4] = {};
  for (int64_t kb = kb0; kb < kb1; kb += kUnroll) {
    uint4 w[kUnroll][2][2];  // [block][64-byte chunk][n-tile]: issued first, the long-latency loads
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
          w[u][c][nt] = (kb + u < kb1 && col_ok[nt]) ? load_streamed(w_ptr[nt] + (kb + u) * kBlockK + c * 64)
                                                     : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (kb + u >= kb1) break;
      float blk[MT][2][4] = {};
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        uint4 x[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r)
            x[mt][r] = row_ok[mt][r] ? load_cached(x_ptr[mt][r] + (kb + u) * kBlockK + c * 64) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int st = 0; st < 4; ++st) {  // k-steps of 16: 4 bytes (word st) of each lane's 16
          uint32_t b[2][2];
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
            const uint32_t wd = word(w[u][c][nt], st);
            b[nt][0] = to_f16x2<kRhsE5M2>(wd), b[nt][1] = to_f16x2<kRhsE5M2>(wd >> 16);
          }
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const uint32_t lo = word(x[mt][0], st), hi = word(x[mt][1], st);  // rows g, g+8
            const uint32_t a0 = to_f16x2<kLhsE5M2>(lo), a1 = to_f16x2<kLhsE5M2>(hi);
            const uint32_t a2 = to_f16x2<kLhsE5M2>(lo >> 16), a3 = to_f16x2<kLhsE5M2>(hi >> 16);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) mma_f16(blk[mt][nt], a0, a1, a2, a3, b[nt][0], b[nt][1]);
          }
        }
      }
      // Promote the block's sum into the fp32 result with its scales (accumulator c_i: row g + 8·(i/2),
      // column 2t + i%2 of the n-tile).
      float sw[2][2];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int64_t q = tile * kTileCols + warp * kColsPerWarp + nt * 8 + 2 * t + j;
          sw[nt][j] = q < g.Q ? block_scale(g.rhs_kind, g.rhs_scale, g.rhs_scale_ld, kb + u, q) : 0.f;
        }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int64_t row = mt * 16 + gid + r * 8;
          const float sx = row < g.P ? block_scale(g.lhs_kind, g.lhs_scale, g.lhs_scale_ld, kb + u, row) : 0.f;
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) acc[mt][nt][r * 2 + j] += blk[mt][nt][r * 2 + j] * (sx * sw[nt][j]);
        }
    }
  }

  float factor = g.alpha;
  if (g.lhs_kind == StreamingScale::per_tensor) factor *= __ldg(g.lhs_scale);
  if (g.rhs_kind == StreamingScale::per_tensor) factor *= __ldg(g.rhs_scale);
  const auto for_each_output = [&](auto&& fn) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t row = mt * 16 + gid + (i >> 1) * 8;
          const int64_t q = tile * kTileCols + warp * kColsPerWarp + nt * 8 + 2 * t + (i & 1);
          if (row < g.P && q < g.Q) fn(acc[mt][nt][i], row, q);
        }
  };
  if (splits == 1) {
    for_each_output([&](float v, int64_t row, int64_t q) { store_result(g, factor, row, q, v); });
    return;
  }
  // Split K: publish this CTA's partial sums; the last CTA of the tile adds all of them in split order.
  for_each_output([&](float v, int64_t row, int64_t q) { __stcg(g.partials + (split * g.P + row) * g.Q + q, v); });
  __threadfence();
  __syncthreads();
  __shared__ int is_last;
  if (threadIdx.x == 0) {
    const int arrived = atomicAdd(g.counters + tile, 1);
    is_last = arrived == splits - 1;
    if (is_last) g.counters[tile] = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  for_each_output([&](float, int64_t row, int64_t q) {
    float v = 0.f;
    for (int s = 0; s < splits; ++s) v += __ldcg(g.partials + (s * g.P + row) * g.Q + q);
    store_result(g, factor, row, q, v);
  });
}

template <int MT>
void launch_rows(const StreamingGemm& g, Types types, dim3 grid, int splits, cudaStream_t s) {
  const dim3 block(kWarps * 32);
  switch (types) {
    case Types::e4m3_e4m3: streaming_gemm_kernel<MT, Types::e4m3_e4m3><<<grid, block, 0, s>>>(g, splits); break;
    case Types::e5m2_e4m3: streaming_gemm_kernel<MT, Types::e5m2_e4m3><<<grid, block, 0, s>>>(g, splits); break;
    case Types::e4m3_e5m2: streaming_gemm_kernel<MT, Types::e4m3_e5m2><<<grid, block, 0, s>>>(g, splits); break;
  }
}

bool is_fp8(DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }

}  // namespace

const char* streaming_gemm_unsupported(const StreamingGemm& g) {
  if (g.P < 1 || g.P > StreamingGemm::kMaxRows) return "more than 64 output rows";
  if (g.D % StreamingGemm::kBlockK != 0) return "the reduced dimension is not a multiple of 128";
  if (!is_fp8(g.lhs_dtype) || !is_fp8(g.rhs_dtype)) return "operands are not fp8";
  if (g.lhs_dtype == DType::fp8_e5m2 && g.rhs_dtype == DType::fp8_e5m2) return "E5M2 × E5M2";
  if (g.lhs_kind == StreamingScale::blk128) return "the small operand has 128x128 scales";
  if ((g.lhs_kind == StreamingScale::per_tensor) != (g.rhs_kind == StreamingScale::per_tensor))
    return "per-tensor and block scales mixed";
  if (reinterpret_cast<uintptr_t>(g.lhs) % 16 || reinterpret_cast<uintptr_t>(g.rhs) % 16)
    return "operands not 16-byte aligned";
  if (g.out_dtype != DType::f32 && g.out_dtype != DType::bf16 && g.out_dtype != DType::f16)
    return "output dtype is not f32/bf16/f16";
  return "";
}

void streaming_gemm(const StreamingGemm& g, const Stream& stream) {
  const int64_t tiles = (g.Q + kTileCols - 1) / kTileCols;
  const int64_t kblocks = g.D / kBlockK;
  // Enough CTAs to keep every SM streaming (about four resident per SM), limited by the K blocks, the workspace
  // and the counters.
  int64_t splits = std::clamp<int64_t>((4 * g.sm_count + tiles - 1) / tiles, 1, kblocks);
  while (splits > 1 && splits * g.P * g.Q > g.partials_floats) --splits;
  if (tiles > g.counters_len) splits = 1;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
  const Types types = g.lhs_dtype == DType::fp8_e5m2   ? Types::e5m2_e4m3
                      : g.rhs_dtype == DType::fp8_e5m2 ? Types::e4m3_e5m2
                                                       : Types::e4m3_e4m3;
  const auto s = static_cast<cudaStream_t>(stream.handle());
  const int splits_i = static_cast<int>(splits);
  switch ((g.P + 15) / 16) {
    case 1: launch_rows<1>(g, types, grid, splits_i, s); break;
    case 2: launch_rows<2>(g, types, grid, splits_i, s); break;
    case 3: launch_rows<3>(g, types, grid, splits_i, s); break;
    default: launch_rows<4>(g, types, grid, splits_i, s); break;
  }
  TE_CUDA_CHECK_LAUNCH();
}

}  // namespace te::cuda
