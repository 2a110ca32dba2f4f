// See gemm_wgmma.h.
//
// A CTA computes 128 × TN tiles of the output, TN 192 or 128 columns (tile_width). Shared memory, 1024-byte aligned: a
// ring of stages, each a 128-byte K block of 128 lhs rows and of TN rhs rows (TMA boxes with the 128-byte swizzle,
// which is what the wgmma descriptors read); the bf16 output tile the TMA store reads; each stage's scales (128 lhs
// rows, then the one or two rhs tile scales the tile spans, or TN rhs row scales); then a "full" and an "empty"
// barrier per stage (ops/gemm/tma_pipeline.cuh). Warpgroup 0 is the producer: its first warp copies scales (every
// lane) and issues the two TMA loads (lane 0); its registers go to the consumers. Warpgroups 1 and 2 are the
// consumers, 64 rows each.
//
// Tiles are walked in groups of kGroupRows row tiles, column by column inside a group, so the CTAs running at once
// share a few lhs row blocks and rhs column blocks in L2 instead of sweeping all of lhs for every column.
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "engine/cuda_check.h"
#include "engine/element.h"
#include "ops/gemm/cluster.cuh"
#include "ops/gemm/fp8_epilogue.cuh"
#include "ops/gemm/gemm_wgmma.h"
#include "ops/gemm/tensor_map.h"
#include "ops/gemm/tma_pipeline.cuh"
#include "ops/gemm/wgmma.cuh"

namespace te::cuda {
namespace {

constexpr int kTileM = 128, kBlockK = 128;
constexpr int kConsumers = 2;                     // warpgroups of 64 rows each
constexpr int kThreads = 128 * (1 + kConsumers);  // + the producer warpgroup
constexpr int kBoxBytes = 64 * 128;               // one TMA store box: 64 rows of 64 bf16 columns
constexpr int kScaleBlock = 128;                  // rows and columns of an rhs tile scale's block
// What a tile of TN columns takes: a stage holds both operands' K blocks and their scales; the output tile is apart.
template <int TN>
struct TileShape {
  static constexpr int kStageBytes = (kTileM + TN) * kBlockK;  // 32 or 40 KiB
  static constexpr int kScaleFloats = kTileM + TN;
  static constexpr int kOutBytes = kTileM * TN * 2;
  static constexpr int kStages = TN == 128 ? 5 : 4;  // as many as fit beside the output tile
  static constexpr int kSmemBytes = 1024 + kStages * (kStageBytes + kScaleFloats * 4) + kOutBytes + 2 * kStages * 8;
  static_assert(kSmemBytes <= 227 * 1024);
};
constexpr int kGroupRows = 16;
// CTAs per cluster sharing rhs / lhs blocks through multicast. 2 × 1 and 2 × 2 halve or quarter the operand bytes
// each CTA reads from L2, but every CTA of a cluster then waits for the slowest to free a stage: measured slower on an
// H100 (docs/PERFORMANCE.md), so one CTA per cluster.
constexpr int kClusterM = 1, kClusterN = 1;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;  // 128 · 40 + 256 · 232 ≤ 384 · 168 registers

// A cluster of CM × CN CTAs computes CM × CN neighbouring tiles; CTA (im, in) has rank im + CM · in. The CTAs of
// one tile row need the same lhs block, those of one tile column the same rhs block: each loads a 1/CN slice of its
// lhs block and a 1/CM slice of its rhs block and multicasts them to the CTAs that share them.
template <int CM, int CN>
struct Cluster {
  static constexpr int kSize = CM * CN;
  uint32_t im, in;
  __device__ explicit Cluster(uint32_t rank) : im(rank % CM), in(rank / CM) {}
  __device__ uint16_t row_mask() const {  // the CTAs sharing this CTA's lhs block
    uint16_t m = 0;
    for (int j = 0; j < CN; ++j) m |= uint16_t(1u << (im + CM * j));
    return m;
  }
  __device__ uint16_t column_mask() const {  // the CTAs sharing its rhs block
    uint16_t m = 0;
    for (int j = 0; j < CM; ++j) m |= uint16_t(1u << (j + CM * in));
    return m;
  }
  // A stage may be refilled once every CTA that writes into it, or that it writes into, has released it.
  static constexpr uint32_t kEmptyArrivals = (CM + CN - 1) * kConsumers * 4;
  __device__ void release(uint64_t* empty) const {
    if constexpr (kSize == 1) {
      tma::arrive(empty);
    } else {
      const uint16_t m = row_mask() | column_mask();
      for (int r = 0; r < kSize; ++r)
        if (m & (1u << r)) cluster::arrive(empty, uint32_t(r));
    }
  }
};

// Cluster units (CM × CN tiles) in groups of kGroupRows tile rows, column by column inside a group.
struct UnitOrigin {
  int64_t m_unit, n_unit;
};
__device__ __forceinline__ UnitOrigin unit_origin(int64_t u, int64_t m_units, int64_t n_units, int group_rows) {
  const int64_t per_group = group_rows * n_units;
  const int64_t group = u / per_group, first = group * group_rows;
  const int64_t rows = min(int64_t(group_rows), m_units - first);
  const int64_t r = u - group * per_group;
  return {first + r % rows, r / rows};
}

// The 128 threads of consumer warpgroup c (barrier 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_sync(int c) { asm volatile("bar.sync %0, 128;" ::"r"(1 + c) : "memory"); }

// total += acc · f[rhs scale][row half]: accumulators in the tile's columns before kSplit take the first rhs tile
// scale, the others the second.
template <int kAcc, int kSplit>
__device__ __forceinline__ void promote(float (&total)[kAcc], const float (&acc)[kAcc], const float (&f)[2][2]) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i)
    total[i] = fmaf(acc[i], f[wgmma::acc_col(i) < kSplit ? 0 : 1][wgmma::acc_row(i) / 8], total[i]);
}

// store_outputs (fp8_epilogue.cuh) for a consumer's N sums, value i at row row0 + acc_row(i) and column
// col0 + acc_col(i) (wgmma.cuh), with each pair of columns as one 4- or 8-byte store where aligned.
template <DType kOut, int N>
__device__ __forceinline__ void store_fragment(const WgmmaGemm& g, const float (&t)[N], int64_t row0, int64_t col0) {
#pragma unroll
  for (int i = 0; i < N; i += 2) {
    const int64_t r = row0 + wgmma::acc_row(i), q = col0 + wgmma::acc_col(i), o = r * g.Q + q;
    if (r >= g.P || q >= g.Q) continue;
    const bool second = q + 1 < g.Q;
    float v0 = t[i], v1 = t[i + 1];
    if (g.accumulate) {
      v0 += load_f32(g.out, kOut, o);
      if (second) v1 += load_f32(g.out, kOut, o + 1);
    }
    if (second && (o & 1) == 0 && kOut == DType::bf16) {
      *reinterpret_cast<__nv_bfloat162*>(static_cast<uint16_t*>(g.out) + o) = __floats2bfloat162_rn(v0, v1);
    } else if (second && (o & 1) == 0 && kOut == DType::f32) {
      *reinterpret_cast<float2*>(static_cast<float*>(g.out) + o) = make_float2(v0, v1);
    } else {
      store_f32(g.out, kOut, o, v0);
      if (second) store_f32(g.out, kOut, o + 1, v1);
    }
  }
}

template <int TN, int CM, int CN, bool kRhsRowScales>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap lhs_map, const __grid_constant__ CUtensorMap rhs_map,
                      const __grid_constant__ CUtensorMap out_map, const WgmmaGemm g, bool tma_store) {
  using C = Cluster<CM, CN>;
  using T = TileShape<TN>;
  constexpr int kStages = T::kStages, kStageBytes = T::kStageBytes, kScaleFloats = T::kScaleFloats;
  constexpr int kOutBytes = T::kOutBytes, kAcc = TN / 2;  // accumulators a consumer thread holds
  extern __shared__ uint8_t smem_raw[];
  uint8_t* ring = smem_raw + ((1024 - bulk::smem_addr(smem_raw) % 1024) % 1024);
  uint8_t* out_tile = ring + kStages * kStageBytes;                // [consumer][TN / 64][64 rows][128 bytes]
  float* scales = reinterpret_cast<float*>(out_tile + kOutBytes);  // [stage][kScaleFloats]
  auto* full = reinterpret_cast<uint64_t*>(scales + kStages * kScaleFloats);
  uint64_t* empty = full + kStages;
  const C cl(C::kSize == 1 ? 0 : cluster::rank());
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s)
      bulk::barrier_init(&full[s], 1 + 32), bulk::barrier_init(&empty[s], C::kEmptyArrivals);
  }
  if constexpr (C::kSize == 1)
    __syncthreads();
  else
    cluster::sync();

  const int64_t m_tiles = (g.P + kTileM - 1) / kTileM, n_tiles = (g.Q + TN - 1) / TN;
  const int64_t m_units = (m_tiles + CM - 1) / CM, n_units = (n_tiles + CN - 1) / CN;
  const int64_t units = m_units * n_units, kblocks = g.D / kBlockK;
  const int64_t first_unit = blockIdx.x / C::kSize, unit_stride = gridDim.x / C::kSize;
  const auto tile_of = [&](int64_t u, int64_t& m0, int64_t& n0) {
    const UnitOrigin o = unit_origin(u, m_units, n_units, kGroupRows / CM);
    m0 = (o.m_unit * CM + cl.im) * kTileM, n0 = (o.n_unit * CN + cl.in) * TN;
  };
  const int wg = threadIdx.x / 128;
  int s = 0;
  uint32_t phase = 0;

  if (wg == 0) {  // producer
    wgmma::shrink_registers<kProducerRegs>();
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x;
      const uint64_t policy = tma::evict_normal_policy();
      constexpr int kLhsRows = kTileM / CN, kRhsRows = TN / CM;  // this CTA's slices
      for (int64_t u = first_unit; u < units; u += unit_stride) {
        int64_t m0, n0;
        tile_of(u, m0, n0);
        for (int64_t kb = 0; kb < kblocks; ++kb) {
          bulk::wait(&empty[s], phase ^ 1);
          float* slot = scales + s * kScaleFloats;
          for (int i = lane; i < kTileM; i += 32) {
            const int64_t p = m0 + i;
            tma::copy4_async(slot + i, g.lhs_scale + (p < g.P ? kb * g.lhs_scale_ld + p : 0), p < g.P);
          }
          if constexpr (kRhsRowScales) {
            for (int i = lane; i < TN; i += 32) {
              const int64_t q = n0 + i;
              tma::copy4_async(slot + kTileM + i, g.rhs_scale + (q < g.Q ? kb * g.rhs_scale_ld + q : 0), q < g.Q);
            }
          } else if (lane < (TN == 128 ? 1 : 2)) {  // the scale blocks of the tile's first and last columns
            const int64_t block = n0 / kScaleBlock + lane;
            const bool valid = block * kScaleBlock < g.Q;
            tma::copy4_async(slot + kTileM + lane, g.rhs_scale + (valid ? block * g.rhs_scale_ld + kb : 0), valid);
          }
          tma::cp_async_arrive(&full[s]);
          if (lane == 0) {
            uint8_t* stage = ring + s * kStageBytes;
            tma::arrive_expect_bytes(&full[s], kStageBytes);
            uint8_t* lhs_dst = stage + cl.in * kLhsRows * kBlockK;
            uint8_t* rhs_dst = stage + kTileM * kBlockK + cl.im * kRhsRows * kBlockK;
            const int x = int(kb * kBlockK);
            if constexpr (CN == 1)
              tma::load_2d(lhs_dst, &lhs_map, x, int(m0), &full[s], policy);
            else
              cluster::load_2d_multicast(lhs_dst, &lhs_map, x, int(m0 + cl.in * kLhsRows), &full[s], cl.row_mask(),
                                         policy);
            if constexpr (CM == 1)
              tma::load_2d(rhs_dst, &rhs_map, x, int(n0), &full[s], policy);
            else
              cluster::load_2d_multicast(rhs_dst, &rhs_map, x, int(n0 + cl.im * kRhsRows), &full[s], cl.column_mask(),
                                         policy);
          }
          if (++s == kStages) s = 0, phase ^= 1;
        }
      }
      asm volatile("cp.async.wait_all;" ::: "memory");
    }
  } else {
    // Consumer c multiplies rows 64c .. 64c + 63 of each tile.
    wgmma::grow_registers<kConsumerRegs>();
    const int c = wg - 1, t128 = threadIdx.x - 128 * wg, warp = t128 / 32, lane = t128 % 32;
    const int row = 64 * c + 16 * warp + lane / 4;  // of accumulator 0; accumulator i's is + acc_row(i)
    const int col = 2 * (lane % 4);                 // of accumulator 0; accumulator i's is + acc_col(i)
    for (int64_t u = first_unit; u < units; u += unit_stride) {
      int64_t m0, n0;
      tile_of(u, m0, n0);
      float total[kAcc], acc[kAcc];  // acc: each K block's first MMA overwrites it
#pragma unroll
      for (int i = 0; i < kAcc; ++i) total[i] = 0.f;
      // A 192-wide tile starts on or half-way into a 128-wide rhs scale block: columns before `split` take the first
      // tile scale, the others the second.
      const int split = kScaleBlock - int(n0 % kScaleBlock);
      for (int64_t kb = 0; kb < kblocks; ++kb) {
        bulk::wait(&full[s], phase);
        const uint32_t a = bulk::smem_addr(ring + s * kStageBytes + 64 * c * kBlockK);
        const uint32_t b = bulk::smem_addr(ring + s * kStageBytes + kTileM * kBlockK);
        wgmma::fence();
        wgmma::mma_m64k32<TN, false>(acc, wgmma::sw128_desc(a), wgmma::sw128_desc(b));
#pragma unroll
        for (int k = 1; k < kBlockK / 32; ++k)
          wgmma::mma_m64k32<TN, true>(acc, wgmma::sw128_desc(a + 32 * k), wgmma::sw128_desc(b + 32 * k));
        wgmma::commit();
        wgmma::wait<0>();
        const float* slot = scales + s * kScaleFloats;
        const float sa[2] = {slot[row], slot[row + 8]};
        if constexpr (kRhsRowScales) {
#pragma unroll
          for (int i = 0; i < kAcc; ++i)
            total[i] = fmaf(acc[i], sa[wgmma::acc_row(i) / 8] * slot[kTileM + col + wgmma::acc_col(i)], total[i]);
          __syncwarp();
          if (lane == 0) cl.release(&empty[s]);
        } else {
          const float sb[2] = {slot[kTileM], TN == 128 ? 0.f : slot[kTileM + 1]};
          __syncwarp();
          if (lane == 0) cl.release(&empty[s]);
          const float f[2][2] = {{sa[0] * sb[0], sa[1] * sb[0]}, {sa[0] * sb[1], sa[1] * sb[1]}};
          if (TN == 128 || split == kScaleBlock)
            promote<kAcc, kScaleBlock>(total, acc, f);
          else
            promote<kAcc, kScaleBlock / 2>(total, acc, f);
        }
        if (++s == kStages) s = 0, phase ^= 1;
      }
      const bool in_bounds = m0 < g.P && n0 < g.Q;
      scale_and_bias(g, g.alpha, [&](auto&& fn) {
#pragma unroll
        for (int i = 0; i < kAcc; ++i)
          if (const int64_t q = n0 + col + wgmma::acc_col(i); q < g.Q) fn(total[i], m0 + row + wgmma::acc_row(i), q);
      });
      if (tma_store) {
        // This warpgroup's 64 rows as TN / 64 boxes of 64 columns, 128-byte rows, 16-byte chunk k of row r at
        // k ^ (r % 8).
        uint8_t* mine = out_tile + c * (kOutBytes / 2);
        if (t128 == 0) tma::store_wait_read();  // the previous tile's stores have read the buffer
        warpgroup_sync(c);
        const int r = 16 * warp + lane / 4;
#pragma unroll
        for (int i = 0; i < kAcc; i += 2) {
          const int rr = r + wgmma::acc_row(i), chunk = (i >> 2) & 7;
          uint8_t* p = mine + (i >> 5) * kBoxBytes + rr * 128 + ((chunk ^ (rr & 7)) << 4) + 4 * (lane % 4);
          *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(total[i], total[i + 1]);
        }
        tma::async_fence();
        warpgroup_sync(c);
        if (t128 == 0 && in_bounds) {
          const int y = int(m0 + 64 * c);
#pragma unroll
          for (int box = 0; box < TN / 64; ++box)
            tma::store_2d(&out_map, int(n0 + 64 * box), y, mine + box * kBoxBytes);
          tma::store_commit();
        }
      } else if (in_bounds) {
        with_high_precision(g.out_dtype,
                            [&](auto t) { store_fragment<decltype(t)::value>(g, total, m0 + row, n0 + col); });
      }
    }
    if (tma_store && t128 == 0) tma::store_wait_all();
  }
  // No CTA leaves while another may still multicast into it or arrive on its barriers.
  if constexpr (C::kSize > 1) cluster::sync();
}

template <int TN>
void launch(const WgmmaGemm& g, cudaStream_t stream) {
  constexpr int CM = kClusterM, CN = kClusterN, kSmemBytes = TileShape<TN>::kSmemBytes;
  const bool row_scales = g.rhs_kind == Fp8ScaleLayout::vec128;
  const bool tma_store =
      g.out_dtype == DType::bf16 && !g.accumulate && g.Q % 8 == 0 && reinterpret_cast<uintptr_t>(g.out) % 16 == 0;
  auto* kernel = row_scales ? wgmma_gemm_kernel<TN, CM, CN, true> : wgmma_gemm_kernel<TN, CM, CN, false>;
  TE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const CUtensorMap lhs_map = swizzled_byte_map(g.lhs, uint64_t(g.P), uint64_t(g.D), kTileM / CN);
  const CUtensorMap rhs_map = swizzled_byte_map(g.rhs, uint64_t(g.Q), uint64_t(g.D), TN / CM);
  const CUtensorMap out_map = tma_store ? swizzled_bf16_map(g.out, uint64_t(g.P), uint64_t(g.Q), 64) : CUtensorMap{};
  const int64_t units = ((g.P + kTileM * CM - 1) / (kTileM * CM)) * ((g.Q + TN * CN - 1) / (TN * CN));

  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CM * CN, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // As many clusters as are resident at once (an SM holds one CTA; a cluster's CTAs share a GPC), asked once per
  // process (every device of one process is taken to be the same kind).
  static const int resident = [&] {
    cudaLaunchConfig_t probe = cfg;
    probe.gridDim = dim3(CM * CN * 256);
    int clusters = 0;
    TE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &probe));
    return std::max(1, clusters);
  }();
  const int64_t clusters = std::min<int64_t>(units, std::min(resident, g.sm_count / (CM * CN)));
  cfg.gridDim = dim3(static_cast<unsigned>(clusters * CM * CN));
  TE_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, lhs_map, rhs_map, out_map, g, tma_store));
}

// 192-column tiles (about 20 % faster than 128 on an H100 at 8192 × 16384 × 4096: each K block's lhs rows feed 1.5×
// the MMAs) unless their padding past the last column costs more than 10 % over 128-column tiles' (Q = 256: 384
// against 256 columns).
int tile_width(const WgmmaGemm& g) {
  const int64_t padded192 = (g.Q + 191) / 192 * 192, padded128 = (g.Q + 127) / 128 * 128;
  return padded192 * 10 <= padded128 * 11 ? 192 : 128;
}

}  // namespace

const char* wgmma_gemm_unsupported(const WgmmaGemm& g) {
  if (g.P < 1 || g.Q < 1) return "an empty output";
  if (g.D < WgmmaGemm::kBlockK) return "the reduced dimension is not a multiple of 128";
  if (const char* why = fp8_args_unsupported(g); *why) return why;
  if (g.lhs_dtype != DType::fp8_e4m3 || g.rhs_dtype != DType::fp8_e4m3) return "E5M2 operands (only E4M3 × E4M3)";
  if (g.lhs_kind != Fp8ScaleLayout::vec128) return "the left operand is not in 1x128 blocks";
  if (g.rhs_kind == Fp8ScaleLayout::per_tensor) return "per-tensor scales";
  if (g.P > (int64_t(1) << 31) || g.Q > (int64_t(1) << 31) || g.D > (int64_t(1) << 31)) return "a dimension past 2^31";
  return "";
}

void wgmma_gemm(const WgmmaGemm& g, const Stream& stream) {
  const auto s = static_cast<cudaStream_t>(stream.handle());
  if (tile_width(g) == 192)
    launch<192>(g, s);
  else
    launch<128>(g, s);
  TE_CUDA_CHECK_LAUNCH();
}

}  // namespace te::cuda
