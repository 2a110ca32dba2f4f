// The staged row loop of the Hopper norm forward (norm.cu).
// The per-row kernels read gamma/beta after the statistics, on every row's critical path (without them the plain
// one ran at the speed of a plain copy of its structure). Here a block takes kStagedRows consecutive rows, reads
// the parameters once into registers for all of them, and stages its rows in shared memory by bulk copies, which
// hold no registers in flight: the next row is requested as soon as the current one is in registers. Not
// persistent: the hardware hands out blocks as others finish (persistent blocks with fixed shares of rows were
// slower and erratic; more rows per block lengthen the tail). Chunks and parameters are raw words and the kind a
// template parameter (kRms: no beta, no mean; else LayerNorm with beta, mean written): at 128 registers every one
// counted (Vec chunks and parameters with runtime kind tests cost 6 %). The staged row starts 128-byte aligned in
// shared memory: at the default 16 bytes (after 400 bytes of static shared memory) every bulk copy crossed a
// 128-byte line and the kernel ran 5 % slower. Same per-row arithmetic and reduction order as the per-row kernels.
// The fused norm + FP8 quantize on this loop (emit = the quantize rounds) measured slower for LayerNorm (54.9
// against 52.8 µs at bf16 8192 × 4096: 128 registers and spills with the held block values), faster only for
// RMSNorm (44.0 against 45.6), so it is not used.
#pragma once
#include <type_traits>

#include "engine/device.h"
#include "ops/elementwise/bulk_copy.cuh"
#include "ops/norm/norm_kernels.cuh"

namespace te::cuda::norm_detail {

constexpr int kStagedRows = 2;

// The type pairs compiled staged: parameters no wider than x (they stay in registers beside it; f16 x's software
// unpacking spilled too). Launchers test it with `if constexpr` before staged_forward_fits.
template <class TX, class TP>
constexpr bool kStageable = !std::is_same_v<TX, F16> && sizeof(TP) <= sizeof(TX);

// Whether the staged forward takes this configuration: LayerNorm with beta or RMSNorm (the kinds it is compiled
// for), the vector path, the row held whole (no re-read) in the default 48 KB of shared memory, and at least a full
// wave of two-row blocks (about 8 per SM): fewer rows have fewer in flight than the per-row kernel (1024 × 4096 bf16
// took 7.9 against 7.4 µs). Device queries last: the cheap tests first.
template <class TX, class TP>
bool staged_forward_fits(const NormFwdArgs& a, bool vec, int threads) {
  static_assert(kStageable<TX, TP>);
  const bool kind_ok = a.kind == NormKind::rmsnorm ? a.beta == nullptr : a.beta != nullptr && a.mean != nullptr;
  return vec && kind_ok && a.cols / vec_width<TX>() <= int64_t(kItems) * threads &&
         a.cols * static_cast<int64_t>(sizeof(TX)) <= 48 * 1024 &&
         a.rows >= int64_t(kStagedRows) * 8 * current_sm_count() && current_cc_major() >= 9;
}

// Runs the block's rows (groups of kStagedRows, strided by the grid when it is capped): stats stored, then
// emit(row, v, g, b, mu, rstd) with the row's chunks v[i] and the held parameters (Words; b unused for RMSNorm).
// Launch with H * sizeof(TX) bytes of dynamic shared memory and a grid of at most ceil(M / kStagedRows).
template <class TX, class TP, int VEC, bool kRms, class Emit>
__device__ __forceinline__ void staged_rows(const TX* __restrict__ x, const TP* __restrict__ gamma,
                                            const TP* __restrict__ beta, float* mean_out, float* rstd_out, int64_t M,
                                            int64_t H, float eps, Emit&& emit) {
  extern __shared__ __align__(128) unsigned char staged[];  // one row of x, on whole 128-byte lines
  __shared__ __align__(8) uint64_t landed;
  __shared__ float smem[96];
  const int nch = static_cast<int>(H / VEC);
  const uint32_t row_bytes = static_cast<uint32_t>(H * sizeof(TX));
  const TX* xs = reinterpret_cast<const TX*>(staged);
  // This block's k-th row: groups of kStagedRows, strided by the grid.
  const auto row_of = [&](int64_t k) {
    return (blockIdx.x + (k / kStagedRows) * int64_t(gridDim.x)) * kStagedRows + k % kStagedRows;
  };
  if (threadIdx.x == 0) {
    bulk::barrier_init(&landed);
    bulk::load(staged, x + row_of(0) * H, row_bytes, &landed);  // row_of(0) < M: grid ≤ ceil(M / kStagedRows)
  }
  Words<TP, VEC> g[kItems], b[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int c = chunk_of<VEC>(i);
    if (c < nch) {
      g[i].load(gamma + c * VEC);
      if constexpr (!kRms) b[i].load(beta + c * VEC);
    }
  }
  __syncthreads();  // the barrier is initialised
  for (int64_t k = 0, row = row_of(0); row < M; row = row_of(++k)) {
    bulk::wait(&landed, static_cast<uint32_t>(k & 1));
    Words<TX, VEC> v[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      if (chunk_of<VEC>(i) < nch) v[i].load(xs + chunk_of<VEC>(i) * VEC);
    __syncthreads();  // every thread has its chunks: refill
    if (threadIdx.x == 0 && row_of(k + 1) < M) bulk::load(staged, x + row_of(k + 1) * H, row_bytes, &landed);
    float mu, rstd;  // the whole row is in v: xs is not re-read
    row_stats_of<TX, VEC>([&](int i, float (&t)[VEC]) { v[i].unpack(t); }, xs, nch, H, kRms, eps, smem, mu, rstd);
    store_row_stats<!kRms>(mean_out, rstd_out, row, mu, rstd);
    emit(row, v, g, b, mu, rstd);
  }
}

// The normalized values of chunk i from the staged loop's words (parameters kept packed across rows).
template <class TX, class TP, int VEC, bool kRms>
__device__ __forceinline__ void staged_chunk(const Words<TX, VEC>& v, Words<TP, VEC>& g, Words<TP, VEC>& b, float mu,
                                             float rstd, float (&y)[VEC]) {
  float t[VEC], gg[VEC], bb[VEC];
  g.keep_packed();
  g.unpack(gg);
  if constexpr (!kRms) {
    b.keep_packed();
    b.unpack(bb);
  }
  v.unpack(t);
  normalize_chunk<VEC>(t, gg, !kRms, bb, mu, rstd, y);
}

}  // namespace te::cuda::norm_detail
