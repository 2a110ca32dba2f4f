// CUDA LayerNorm/RMSNorm. Forward: a small block per row, the row in registers (16-byte loads), fp32
// statistics from one (mean, M2) merge per row, one rounding per output; on Hopper, blocks of two rows staged in
// shared memory by bulk copies, gamma/beta read once per block (same per-row code, same bits). Backward:
// one block per row for dx; dgamma/dbeta by the deterministic column reduction in ops/elementwise/column_sum.cuh.
#include <algorithm>
#include <type_traits>

#include "engine/device.h"
#include "ops/elementwise/column_sum.cuh"
#include "ops/norm/norm_kernels.cuh"
#include "ops/norm/norm_staged.cuh"

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

// The staged forward (norm_staged.cuh): rows by bulk copies, parameters held, y stored chunk by chunk.
template <class TX, class TP, class TO, int VEC, bool kRms>
__global__ void __launch_bounds__(kMaxThreads) norm_fwd_staged_kernel(
    const TX* __restrict__ x, const TP* __restrict__ gamma, const TP* __restrict__ beta, TO* __restrict__ out,
    float* mean_out, float* rstd_out, int64_t M, int64_t H, float eps) {
  const int nch = static_cast<int>(H / VEC);
  staged_rows<TX, TP, VEC, kRms>(x, gamma, beta, mean_out, rstd_out, M, H, eps,
                                 [&](int64_t row, auto& v, auto& g, auto& b, float mu, float rstd) {
#pragma unroll
                                   for (int i = 0; i < kItems; ++i) {
                                     const int c = chunk_of<VEC>(i);
                                     if (c < nch) {
                                       float y[VEC];
                                       staged_chunk<TX, TP, VEC, kRms>(v[i], g[i], b[i], mu, rstd, y);
                                       store_vec<TO, VEC, true>(out + row * H, int64_t(c) * VEC, y);
                                     }
                                   }
                                 });
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
        if constexpr (kStageable<TX, TP>) {
          if (staged_forward_fits<TX, TP>(a, vec, threads)) {
            const int64_t grid = std::min((a.rows + kStagedRows - 1) / kStagedRows, kMaxGrid);
            const auto kernel =
                rms ? norm_fwd_staged_kernel<TX, TP, TO, V, true> : norm_fwd_staged_kernel<TX, TP, TO, V, false>;
            kernel<<<static_cast<unsigned>(grid), threads, a.cols * sizeof(TX), raw_stream(stream)>>>(
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
