// CUDA LayerNorm/RMSNorm. Forward: a small block per row, the row in registers (16-byte loads), fp32
// statistics from one (mean, M2) merge per row, one rounding per output; on Hopper, blocks of two rows staged in
// shared memory by bulk copies, gamma/beta read once per block (same per-row code, same bits). Backward:
// one block per row for dx; dgamma/dbeta by the deterministic column reduction in ops/elementwise/column_sum.cuh.
#include <algorithm>
#include <type_traits>

#include "engine/device.h"
#include "ops/elementwise/bulk_copy.cuh"
#include "ops/elementwise/column_sum.cuh"
#include "ops/norm/norm_kernels.cuh"

namespace te::cuda {
namespace {
using namespace norm_detail;

constexpr int64_t kMaxGrid = int64_t(1) << 20;
constexpr int kBwdItems = 4;  // the backward streams its chunks (no cache): blocks of 128 threads for H = 4096 bf16

// A small block per row (two warps for H = 4096 bf16), the row in registers, no prefetch: at 64 registers many
// blocks fit per SM, and their rows are the loads in flight. (Persistent blocks that prefetch the next row took
// 128 registers and measured slower: 58.2 against 42.5 µs for bf16 [8192, 4096].)
template <class TX, class TP, class TO, int VEC>
__global__ void __launch_bounds__(kMaxThreads) norm_fwd_kernel(const TX* __restrict__ x, const TP* __restrict__ gamma,
                                                               const TP* __restrict__ beta, TO* __restrict__ out,
                                                               float* mean_out, float* rstd_out, int64_t M, int64_t H,
                                                               float eps, bool rms) {
  __shared__ float smem[96];
  const int nch = static_cast<int>(H / VEC);
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const TX* xr = x + row * H;
    TO* yr = out + row * H;
    Vec<TX, VEC> v[kItems];
    load_row<TX, VEC>(xr, nch, v);
    float mu, rstd;
    row_stats<TX, VEC>(v, xr, nch, H, rms, eps, smem, mu, rstd);
    store_row_stats(mean_out, rstd_out, row, mu, rstd);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int c = chunk_of<VEC>(i);
      if (c < nch) {
        float t[VEC], gg[VEC], bb[VEC], y[VEC];
        unpack<TX, VEC>(v[i], t);
        load_params<TP, VEC>(gamma, beta, c, gg, bb);  // L1 hits after the first row
        normalize_chunk<VEC>(t, gg, beta != nullptr, bb, mu, rstd, y);
        store_vec<TO, VEC, true>(yr, int64_t(c) * VEC, y);
      }
    }
    for (int c = threadIdx.x + kItems * blockDim.x; c < nch; c += blockDim.x) {  // long rows: re-read the rest
      float t[VEC], gg[VEC], bb[VEC], y[VEC];
      load_vec<TX, VEC>(xr, int64_t(c) * VEC, t);
      load_params<TP, VEC>(gamma, beta, c, gg, bb);
      normalize_chunk<VEC>(t, gg, beta != nullptr, bb, mu, rstd, y);
      store_vec<TO, VEC, true>(yr, int64_t(c) * VEC, y);
    }
  }
}

// The per-row kernel above reads gamma/beta after the statistics, on every row's critical path (without them it ran
// at the speed of a plain copy of its structure). Here a block takes kStagedRows consecutive rows, reads the
// parameters once into registers for all of them, and stages its rows in shared memory by bulk copies, which hold
// no registers in flight: the next row is requested as soon as the current one is in registers. Not persistent:
// the hardware hands out blocks as others finish (persistent blocks with fixed shares of rows were slower and
// erratic; more rows per block lengthen the tail). Chunks and parameters are raw words and the kind a template
// parameter (kRms: no beta, no mean; else LayerNorm with beta, mean written): at 128 registers every one counted
// (Vec chunks and parameters with runtime kind tests cost 6 %). The staged row starts 128-byte aligned in shared
// memory: at the default 16 bytes (after 400 bytes of static shared memory) every bulk copy crossed a 128-byte line
// and the kernel ran 5 % slower. Needs sm_90, a row held whole in registers, and parameters no wider than x. Blocks
// stride over groups when the grid is capped.
constexpr int kStagedRows = 2;

template <class TX, class TP, class TO, int VEC, bool kRms>
__global__ void __launch_bounds__(kMaxThreads) norm_fwd_staged_kernel(
    const TX* __restrict__ x, const TP* __restrict__ gamma, const TP* __restrict__ beta, TO* __restrict__ out,
    float* mean_out, float* rstd_out, int64_t M, int64_t H, float eps) {
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
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int c = chunk_of<VEC>(i);
      if (c < nch) {
        float t[VEC], gg[VEC], bb[VEC], y[VEC];
        g[i].keep_packed();
        g[i].unpack(gg);
        if constexpr (!kRms) {
          b[i].keep_packed();
          b[i].unpack(bb);
        }
        v[i].unpack(t);
        normalize_chunk<VEC>(t, gg, !kRms, bb, mu, rstd, y);
        store_vec<TO, VEC, true>(out + row * H, int64_t(c) * VEC, y);
      }
    }
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma (RMSNorm: no mean(g) term).
template <class TX, class TP, class TD, int VEC>
__global__ void __launch_bounds__(kMaxThreads) norm_bwd_dx_kernel(const TX* __restrict__ dy, const TX* __restrict__ x,
                                                           const float* mean, const float* rstd_in,
                                                           const TP* __restrict__ gamma, TD* __restrict__ dx,
                                                           int64_t M, int64_t H) {
  __shared__ float smem[32];
  const int64_t nch = H / VEC;
  const int tid = threadIdx.x, bd = blockDim.x;
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const TX* xr = x + row * H;
    const TX* dyr = dy + row * H;
    const float mu = mean ? mean[row] : 0.f, rstd = rstd_in[row];
    float s1 = 0.f, s2 = 0.f;
    for (int64_t c = tid; c < nch; c += bd) {
      float xv[VEC], dv[VEC], g[VEC];
      load_vec<TX, VEC>(xr, c * VEC, xv);
      load_vec<TX, VEC>(dyr, c * VEC, dv);
      load_vec<TP, VEC>(gamma, c * VEC, g);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float gg = __fmul_rn(dv[k], g[k]);
        const float xhat = __fmul_rn(__fsub_rn(xv[k], mu), rstd);
        s1 += gg;
        s2 += gg * xhat;
      }
    }
    const float m1 = mean ? block_sum(s1, smem) / static_cast<float>(H) : 0.f;
    const float m2 = block_sum(s2, smem) / static_cast<float>(H);
    for (int64_t c = tid; c < nch; c += bd) {  // second read hits L1/L2: the row was just read
      float xv[VEC], dv[VEC], g[VEC], o[VEC];
      load_vec<TX, VEC>(xr, c * VEC, xv);
      load_vec<TX, VEC>(dyr, c * VEC, dv);
      load_vec<TP, VEC>(gamma, c * VEC, g);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float gg = __fmul_rn(dv[k], g[k]);
        const float xhat = __fmul_rn(__fsub_rn(xv[k], mu), rstd);
        o[k] = __fmul_rn(rstd, __fsub_rn(__fsub_rn(gg, m1), __fmul_rn(xhat, m2)));
      }
      store_vec<TD, VEC, true>(dx + row * H, c * VEC, o);
    }
  }
}

// dgamma[col] += dy * xhat, dbeta[col] += dy.
template <class TX>
struct GammaBetaTerms {
  const TX* dy;
  const TX* x;
  const float* mean;
  const float* rstd;
  __device__ void operator()(int64_t r, int64_t col, float (&acc)[2]) const {
    const int64_t i = r * cols + col;
    const float d = to_f(dy[i]);
    const float xhat = __fmul_rn(__fsub_rn(to_f(x[i]), mean ? mean[r] : 0.f), rstd[r]);
    acc[0] += d * xhat;
    acc[1] += d;
  }
  int64_t cols;
};

}  // namespace

void norm_forward(const NormFwdArgs& a, const Stream& stream) {
  dispatch_hp(a.tx, "norm_forward x", [&](auto tx) {
    using TX = decltype(tx);
    dispatch_hp(a.tp, "norm_forward gamma", [&](auto tp) {
      using TP = decltype(tp);
      dispatch_hp(a.tout, "norm_forward out", [&](auto to) {
        using TO = decltype(to);
        constexpr int V = vec_width<TX>();
        const bool vec = vector_inputs(a) && (reinterpret_cast<uintptr_t>(a.out) % (sizeof(TO) * V)) == 0;
        const bool rms = a.kind == NormKind::rmsnorm;
        const int threads = threads_for(vec ? a.cols / V : a.cols);
        // Staged: LayerNorm with beta or RMSNorm (the kinds it is compiled for), parameters no wider than x (they
        // stay in registers beside it; f16 x's software unpacking spilled too), the row held whole (no re-read), in
        // the default 48 KB of shared memory.
        constexpr bool kStageable = !std::is_same_v<TX, F16> && sizeof(TP) <= sizeof(TX);
        if constexpr (kStageable) {
          const int64_t row_bytes = a.cols * static_cast<int64_t>(sizeof(TX));
          const bool kind_ok = rms ? a.beta == nullptr : a.beta != nullptr && a.mean != nullptr;
          // Fewer rows than a full wave of two-row blocks (about 8 per SM) have fewer rows in flight than the
          // per-row kernel: 1024 × 4096 bf16 took 7.9 against 7.4 µs. (Device queries last: the cheap tests first.)
          if (vec && kind_ok && a.cols / V <= int64_t(kItems) * threads && row_bytes <= 48 * 1024 &&
              a.rows >= int64_t(kStagedRows) * 8 * current_sm_count() && current_cc_major() >= 9) {
            const int64_t grid = std::min((a.rows + kStagedRows - 1) / kStagedRows, kMaxGrid);
            const auto kernel = rms ? norm_fwd_staged_kernel<TX, TP, TO, V, true> : norm_fwd_staged_kernel<TX, TP, TO, V, false>;
            kernel<<<static_cast<unsigned>(grid), threads, row_bytes, raw_stream(stream)>>>(
                static_cast<const TX*>(a.x), static_cast<const TP*>(a.gamma), static_cast<const TP*>(a.beta),
                static_cast<TO*>(a.out), a.mean, a.rstd, a.rows, a.cols, a.eps);
            TE_CUDA_CHECK_LAUNCH();
            return;
          }
        }
        const int64_t grid = std::max<int64_t>(1, std::min(a.rows, kMaxGrid));
        const auto kernel = vec ? norm_fwd_kernel<TX, TP, TO, V> : norm_fwd_kernel<TX, TP, TO, 1>;
        kernel<<<static_cast<unsigned>(grid), threads, 0, raw_stream(stream)>>>(
            static_cast<const TX*>(a.x), static_cast<const TP*>(a.gamma), static_cast<const TP*>(a.beta),
            static_cast<TO*>(a.out), a.mean, a.rstd, a.rows, a.cols, a.eps, rms);
        TE_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void norm_backward(const NormBwdArgs& a, const Stream& stream) {
  int device = 0;
  TE_CUDA_CHECK(cudaGetDevice(&device));
  dispatch_hp(a.tx, "norm_backward x", [&](auto tx) {
    using TX = decltype(tx);
    dispatch_hp(a.tp, "norm_backward gamma", [&](auto tp) {
      using TP = decltype(tp);
      dispatch_hp(a.tdx, "norm_backward dx", [&](auto td) {
        using TD = decltype(td);
        constexpr int V = vec_width<TX>();
        const bool vec = a.cols % V == 0 && aligned16(a.x) && aligned16(a.dy) &&
                         (reinterpret_cast<uintptr_t>(a.gamma) % (sizeof(TP) * V)) == 0 &&
                         (reinterpret_cast<uintptr_t>(a.dx) % (sizeof(TD) * V)) == 0;
        const int64_t grid = std::min(a.rows, kMaxGrid);
        const int threads = threads_for(vec ? a.cols / V : a.cols, kBwdItems);
        if (vec) {
          norm_bwd_dx_kernel<TX, TP, TD, V><<<static_cast<unsigned>(grid), threads, 0, raw_stream(stream)>>>(
              static_cast<const TX*>(a.dy), static_cast<const TX*>(a.x), a.mean, a.rstd,
              static_cast<const TP*>(a.gamma), static_cast<TD*>(a.dx), a.rows, a.cols);
        } else {
          norm_bwd_dx_kernel<TX, TP, TD, 1><<<static_cast<unsigned>(grid), threads, 0, raw_stream(stream)>>>(
              static_cast<const TX*>(a.dy), static_cast<const TX*>(a.x), a.mean, a.rstd,
              static_cast<const TP*>(a.gamma), static_cast<TD*>(a.dx), a.rows, a.cols);
        }
        TE_CUDA_CHECK_LAUNCH();
      });
    });
    if (a.dgamma || a.dbeta) {
      GammaBetaTerms<TX> f{static_cast<const TX*>(a.dy), static_cast<const TX*>(a.x), a.mean, a.rstd, a.cols};
      column_reduce<2>(f, a.rows, a.cols, ColumnOutputs<2>{{a.dgamma, a.dbeta}}, a.tdg, stream, Device::cuda(device));
    }
  });
}

}  // namespace te::cuda
