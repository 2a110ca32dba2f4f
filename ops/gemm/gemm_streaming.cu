// See gemm_streaming.h.
//
// Work split: a CTA owns a tile of 128 rows of the streamed operand (one 128x128 weight-scale tile) and a range of
// its 128-wide K blocks (split K); one CTA per SM. One producer warp copies the tile's K blocks (128 rows × 128
// bytes each) and the same K blocks of the small operand (all P rows) into a ring of shared-memory stages with the
// tensor-memory accelerator, a few stages ahead; eight consumer warps each multiply 16 of the tile's rows by every
// small-operand row on the tensor cores and hand the stage back. The streamed bytes never pass through registers,
// so one thread keeps a hundred kilobytes or more in flight per SM.
//
// A stage holds several consecutive K blocks (Ring::KPS), loaded back to back, so that each weight row is read
// 256–512 contiguous bytes at a time: with one 128-byte block per stage, HBM delivered 1.9 TB/s to this kernel on an
// H100 even with the multiplies removed; with four, 2.3 TB/s (docs/PERFORMANCE.md).
//
// The MMA runs "swapped": its M dimension is the streamed rows (the 16 of a warp), its N dimension the small
// operand's rows in tiles of 8, so a handful of tokens still fill the tensor core's wide side. Fragments come from
// the swizzled stages with ldmatrix (four 8×16-byte matrices per load: exactly the m16n8k32 fp8 A fragment, or the
// B fragments of two 8-row tiles) and go to mma.m16n8k32 in fp8 with fp32 accumulators. The epilogue can add a
// residual after rounding the output (StreamingGemm::residual), saving the add kernel after the GEMM.
#include <cuda.h>

#include <algorithm>

#include "engine/cuda_check.h"
#include "engine/element.h"
#include "ops/attention/warp_mma.cuh"
#include "ops/gemm/fp8_epilogue.cuh"
#include "ops/gemm/gemm_streaming.h"
#include "ops/gemm/tensor_map.h"
#include "ops/gemm/tma_pipeline.cuh"

namespace te::cuda {
namespace {

constexpr int kConsumerWarps = 8;
constexpr int kThreads = (kConsumerWarps + 1) * 32;
constexpr int kTileRows = kConsumerWarps * 16;  // 128
constexpr int kBlockK = 128;
constexpr int kTileBytes = kTileRows * kBlockK;  // 16 KiB of the streamed operand per stage
constexpr int kSmemPerSm = 226 * 1024;           // of 228 KiB, 1 KiB reserved per CTA

// Per small-operand tile count NT (8 rows each, even): a stage holds KPS consecutive K blocks (the streamed tile's
// and the small operand's). A stage's scale slot holds, per K block, the small operand's scales, then the streamed
// rows' (one for 128x128 tiles, 128 for 1x128 blocks).
template <int NT>
struct Ring {
  static constexpr int KPS = NT <= 2 ? 4 : 2;
  static constexpr int kXBytes = NT * 8 * kBlockK;  // one K block of the small operand
  static constexpr int kStageBytes = KPS * (kTileBytes + kXBytes);
  static constexpr int kScaleFloats = NT * 8 + kTileRows;                       // per K block
  static constexpr int kSlotBytes = kStageBytes + KPS * kScaleFloats * 4 + 16;  // + the two barriers
  static constexpr int kStages = std::min(8, (kSmemPerSm - 1024) / kSlotBytes);
  static constexpr int kSmemBytes = 1024 + kStages * kSlotBytes;  // + alignment slack
};

enum class Types : int { e4m3_e4m3, e5m2_e4m3, e4m3_e5m2 };  // lhs × rhs

// d += a · b for one m16n8k32 fp8 tile with fp32 accumulators; A is the streamed operand (E5M2 when kAE5M2).
template <bool kAE5M2, bool kBE5M2>
__device__ __forceinline__ void mma_fp8(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#define TE_MMA_FP8(AT, BT)                                        \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." AT "." BT \
               ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "        \
               "{%8, %9}, {%0, %1, %2, %3};"                      \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])   \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
  if constexpr (kAE5M2)
    TE_MMA_FP8("e5m2", "e4m3");
  else if constexpr (kBE5M2)
    TE_MMA_FP8("e4m3", "e5m2");
  else
    TE_MMA_FP8("e4m3", "e4m3");
#undef TE_MMA_FP8
}

template <int NT, bool kBlockScaled, Types T>
__global__ void __launch_bounds__(kThreads, 1)
    streaming_gemm_kernel(const __grid_constant__ CUtensorMap rhs_map, const __grid_constant__ CUtensorMap lhs_map,
                          const StreamingGemm g, int splits) {
  using R = Ring<NT>;
  constexpr bool kLhsE5M2 = T == Types::e5m2_e4m3, kRhsE5M2 = T == Types::e4m3_e5m2;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t tile = blockIdx.x;
  const int split = blockIdx.y;
  const int64_t kblocks = g.D / kBlockK;
  const int64_t kb0 = split * kblocks / splits, kb1 = (split + 1) * kblocks / splits;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* ring = smem_raw + ((1024 - bulk::smem_addr(smem_raw) % 1024) % 1024);
  auto* scale_slots = reinterpret_cast<float*>(ring + R::kStages * R::kStageBytes);  // [stage][KPS][kScaleFloats]
  auto* full = reinterpret_cast<uint64_t*>(scale_slots + R::kStages * R::KPS * R::kScaleFloats);
  uint64_t* empty = full + R::kStages;
  // A stage is full when its TMA bytes have landed and, block-scaled, when each producer lane's scale copies have.
  constexpr uint32_t kFullArrivals = kBlockScaled ? 1 + 32 : 1;
  if (threadIdx.x == 0) {
    for (int s = 0; s < R::kStages; ++s)
      bulk::barrier_init(&full[s], kFullArrivals), bulk::barrier_init(&empty[s], kConsumerWarps);
  }
  __syncthreads();

  float acc[NT][4] = {};
  if (warp == kConsumerWarps) {  // producer: lane 0 issues the TMA loads, every lane copies scales
    const uint64_t streamed = tma::evict_first_policy(), reused = tma::evict_last_policy();
    int s = 0;
    uint32_t phase = 0;
    for (int64_t kb = kb0; kb < kb1; kb += R::KPS) {
      const int blocks = int(std::min<int64_t>(R::KPS, kb1 - kb));
      bulk::wait(&empty[s], phase ^ 1);
      if constexpr (kBlockScaled) {
        for (int u = 0; u < blocks; ++u) {
          float* slot = scale_slots + (s * R::KPS + u) * R::kScaleFloats;
          for (int i = lane; i < NT * 8; i += 32)
            tma::copy4_async(slot + i, g.lhs_scale + (i < g.P ? (kb + u) * g.lhs_scale_ld + i : 0), i < g.P);
          if (g.rhs_kind == Fp8ScaleLayout::blk128) {
            if (lane == 0) tma::copy4_async(slot + NT * 8, g.rhs_scale + tile * g.rhs_scale_ld + kb + u, true);
          } else {
            for (int i = lane; i < kTileRows; i += 32) {
              const int64_t q = tile * kTileRows + i;
              tma::copy4_async(slot + NT * 8 + i, g.rhs_scale + (q < g.Q ? (kb + u) * g.rhs_scale_ld + q : 0), q < g.Q);
            }
          }
        }
        tma::cp_async_arrive(&full[s]);
      }
      if (lane == 0) {
        uint8_t* stage = ring + s * R::kStageBytes;
        tma::arrive_expect_bytes(&full[s], blocks * (kTileBytes + R::kXBytes));
        for (int u = 0; u < blocks; ++u)
          tma::load_2d(stage + u * kTileBytes, &rhs_map, int((kb + u) * kBlockK), int(tile * kTileRows), &full[s],
                       streamed);
        for (int u = 0; u < blocks; ++u)
          tma::load_2d(stage + R::KPS * kTileBytes + u * R::kXBytes, &lhs_map, int((kb + u) * kBlockK), 0, &full[s],
                       reused);
      }
      if (++s == R::kStages) s = 0, phase ^= 1;
    }
  } else {  // consumers
    // ldmatrix row addresses (lane i gives row i % 8 of matrix i / 8); chunk c of row r sits at c ^ (r % 8).
    const int sw = lane & 7, g8 = lane >> 2, t = lane & 3;
    const int a_row = warp * 16 + sw + ((lane >> 3) & 1) * 8, a_hi = lane >> 4;  // rows 0-7/8-15 × chunk 2s/2s+1
    const int b_row = ((lane >> 4) << 3) + sw, b_hi = (lane >> 3) & 1;           // tile pair's rows × chunk
    const bool w_blk128 = g.rhs_kind == Fp8ScaleLayout::blk128;
    int s = 0;
    uint32_t phase = 0;
    for (int64_t kb = kb0; kb < kb1; kb += R::KPS) {
      const int blocks = int(std::min<int64_t>(R::KPS, kb1 - kb));
      bulk::wait(&full[s], phase);
#pragma unroll
      for (int u = 0; u < R::KPS; ++u) {
        if (u >= blocks) break;
        const uint8_t* w_stage = ring + s * R::kStageBytes + u * kTileBytes;
        const uint8_t* x_stage = ring + s * R::kStageBytes + R::KPS * kTileBytes + u * R::kXBytes;
        // This lane's scales: small-operand rows 8j + 2t + {0, 1}, streamed rows g and g + 8 of the warp.
        float sx[NT][2], sw_row[2];
        if constexpr (kBlockScaled) {
          const float* slot = scale_slots + (s * R::KPS + u) * R::kScaleFloats;
#pragma unroll
          for (int j = 0; j < NT; ++j) sx[j][0] = slot[8 * j + 2 * t], sx[j][1] = slot[8 * j + 2 * t + 1];
#pragma unroll
          for (int r = 0; r < 2; ++r) sw_row[r] = slot[NT * 8 + (w_blk128 ? 0 : warp * 16 + g8 + 8 * r)];
        }
        float blk[NT][4] = {};
        float(&sum)[NT][4] = kBlockScaled ? blk : acc;
#pragma unroll
        for (int ks = 0; ks < kBlockK / 32; ++ks) {
          uint32_t a[4];
          warp_mma::load_x4(a, w_stage + a_row * kBlockK + (((2 * ks + a_hi) ^ sw) << 4));
#pragma unroll
          for (int jp = 0; jp < NT / 2; ++jp) {
            uint32_t b[4];  // b0, b1 of tile 2jp, then of tile 2jp + 1
            warp_mma::load_x4(b, x_stage + (jp * 16 + b_row) * kBlockK + (((2 * ks + b_hi) ^ sw) << 4));
            mma_fp8<kRhsE5M2, kLhsE5M2>(sum[2 * jp], a, b[0], b[1]);
            mma_fp8<kRhsE5M2, kLhsE5M2>(sum[2 * jp + 1], a, b[2], b[3]);
          }
        }
        if constexpr (kBlockScaled) {
          // Accumulator i of tile j: streamed row g + 8·(i / 2), small-operand row 8j + 2t + i % 2.
#pragma unroll
          for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[j][i] += blk[j][i] * (sx[j][i & 1] * sw_row[i >> 1]);
        }
      }
      __syncwarp();
      if (lane == 0) tma::arrive(&empty[s]);
      if (++s == R::kStages) s = 0, phase ^= 1;
    }
  }

  float factor = g.alpha;
  if (!kBlockScaled) factor *= __ldg(g.lhs_scale) * __ldg(g.rhs_scale);
  const bool consumer = warp < kConsumerWarps;
  const auto for_each_output = [&](auto&& fn) {
    if (!consumer) return;
    const int g8 = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t p = 8 * j + 2 * t + (i & 1);
        const int64_t q = tile * kTileRows + warp * 16 + g8 + 8 * (i >> 1);
        if (p < g.P && q < g.Q) fn(acc[j][i], p, q);
      }
  };
  const auto store = [&] {
    scale_and_bias(g, factor, for_each_output);
    if (g.residual)
      store_outputs_plus(g, g.residual, g.residual_dtype, for_each_output);
    else
      store_outputs(g, for_each_output);
  };
  if (splits == 1) {
    store();
    return;
  }
  // Split K: publish this CTA's partial sums; the last CTA of the tile adds all of them in split order.
  for_each_output([&](float& v, int64_t p, int64_t q) { __stcg(g.partials + (split * g.P + p) * g.Q + q, v); });
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
  // Each split's partials for all of this thread's outputs at once, so that their L2 reads overlap (one output at a
  // time, they were a chain of dependent round trips at the end of the tile's last CTA); every output is still the
  // sum in split order from 0.
  for_each_output([&](float& v, int64_t, int64_t) { v = 0.f; });
  for (int sp = 0; sp < splits; ++sp)
    for_each_output([&](float& v, int64_t p, int64_t q) { v += __ldcg(g.partials + (sp * g.P + p) * g.Q + q); });
  store();
}

template <int NT, bool kBlockScaled, Types T>
void launch(const StreamingGemm& g, dim3 grid, int splits, cudaStream_t s) {
  auto* kernel = streaming_gemm_kernel<NT, kBlockScaled, T>;
  TE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Ring<NT>::kSmemBytes));
  const CUtensorMap rhs_map = swizzled_byte_map(g.rhs, uint64_t(g.Q), uint64_t(g.D), kTileRows);
  const CUtensorMap lhs_map = swizzled_byte_map(g.lhs, uint64_t(g.P), uint64_t(g.D), NT * 8);
  kernel<<<grid, kThreads, Ring<NT>::kSmemBytes, s>>>(rhs_map, lhs_map, g, splits);
}

// As many CTAs as fit on the GPU at once, by splitting K, limited by the workspace and the counters.
template <int NT>
void launch_rows(const StreamingGemm& g, Types types, cudaStream_t s) {
  const int64_t tiles = (g.Q + kTileRows - 1) / kTileRows;
  const int64_t kblocks = g.D / kBlockK;
  int64_t splits = std::clamp<int64_t>(g.sm_count / tiles, 1, kblocks);
  while (splits > 1 && splits * g.P * g.Q > g.partials_floats) --splits;
  if (tiles > g.counters_len) splits = 1;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
  const int sp = static_cast<int>(splits);
  const bool block_scaled = g.lhs_kind != Fp8ScaleLayout::per_tensor;
  switch (types) {
    case Types::e4m3_e4m3:
      block_scaled ? launch<NT, true, Types::e4m3_e4m3>(g, grid, sp, s)
                   : launch<NT, false, Types::e4m3_e4m3>(g, grid, sp, s);
      break;
    case Types::e5m2_e4m3:
      block_scaled ? launch<NT, true, Types::e5m2_e4m3>(g, grid, sp, s)
                   : launch<NT, false, Types::e5m2_e4m3>(g, grid, sp, s);
      break;
    case Types::e4m3_e5m2:
      block_scaled ? launch<NT, true, Types::e4m3_e5m2>(g, grid, sp, s)
                   : launch<NT, false, Types::e4m3_e5m2>(g, grid, sp, s);
      break;
  }
}

}  // namespace

const char* streaming_gemm_unsupported(const StreamingGemm& g) {
  if (g.P < 1 || g.P > StreamingGemm::kMaxRows) return "more than 64 output rows";
  if (const char* why = fp8_args_unsupported(g); *why) return why;
  if (g.lhs_dtype == DType::fp8_e5m2 && g.rhs_dtype == DType::fp8_e5m2) return "E5M2 × E5M2";
  if (g.lhs_kind == Fp8ScaleLayout::blk128) return "the small operand has 128x128 scales";
  if ((g.lhs_kind == Fp8ScaleLayout::per_tensor) != (g.rhs_kind == Fp8ScaleLayout::per_tensor))
    return "per-tensor and block scales mixed";
  if (g.residual && g.accumulate) return "a residual with accumulate";
  return "";
}

void streaming_gemm(const StreamingGemm& g, const Stream& stream) {
  const Types types = g.lhs_dtype == DType::fp8_e5m2   ? Types::e5m2_e4m3
                      : g.rhs_dtype == DType::fp8_e5m2 ? Types::e4m3_e5m2
                                                       : Types::e4m3_e4m3;
  const auto s = static_cast<cudaStream_t>(stream.handle());
  switch ((g.P + 15) / 16) {
    case 1:
      launch_rows<2>(g, types, s);
      break;
    case 2:
      launch_rows<4>(g, types, s);
      break;
    case 3:
      launch_rows<6>(g, types, s);
      break;
    default:
      launch_rows<8>(g, types, s);
      break;
  }
  TE_CUDA_CHECK_LAUNCH();
}

}  // namespace te::cuda
