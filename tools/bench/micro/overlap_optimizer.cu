// Micro benchmark (dev tool, not built by meson): can the optimizer's memory-bound pass hide behind the backward's
// compute-bound GEMMs? A training step at T=8192 (hidden 4096, ffn 16384) runs FC1's dgrad and wgrad after FC2's
// gradients are final, so FC2's AdamW step (67 M parameters, 30 bytes each) could run beside them. cuBLASLt's
// block-scaled FP8 kernels hold every SM, so the two only overlap if the GEMMs leave some SMs free
// (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET) and the optimizer runs on those. Timed, medians of 20:
//   gemms(S)        the two GEMMs (fprop-shaped 1x128 × 128x128 and wgrad-shaped 1x128 × 1x128) on S SMs
//   adamw(B)        FC2's AdamW pass as B blocks of 1024 threads, one per SM (shared memory keeps others off)
//   pinned(k)       adamw(k) on a low-priority stream, launched first, beside gemms(SMs − k) on a high-priority one
//   flood(k, order) the same with AdamW as a plain grid (one float4 per thread, 256 threads a block): its blocks
//                   take any SM the GEMMs leave free, and all of them once the GEMMs end; launched before or after
// Each "both" figure is the time until both streams are done.
// Build and run (sm_90), from the repository root:
//   nvcc -O3 -std=c++20 -I. -gencode=arch=compute_90a,code=sm_90a tools/bench/micro/overlap_optimizer.cu \
//     -lcublasLt -o overlap_optimizer && ./overlap_optimizer
#include <cublasLt.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "graph/optimizer_math.h"
#include "micro_check.h"
#include "micro_timing.h"

#define LT(x)                                                                 \
  do {                                                                        \
    cublasStatus_t s_ = (x);                                                  \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                        \
      std::printf("%s failed: status %d (line %d)\n", #x, int(s_), __LINE__); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

namespace {

constexpr int kThreads = 1024;
constexpr int kPinSmem = 160 * 1024;  // one such block per SM, and no GEMM CTA beside it

// AdamW on the four elements at i0 (as the engine's optimizer_math.h does them) and their bf16 copy.
__device__ __forceinline__ void adamw_unit(float* p, const float* g, float* m, float* v, uint16_t* w, int64_t i0,
                                           const te::AdamWScalars& s) {
  float4 pp = *reinterpret_cast<const float4*>(p + i0);
  const float4 gg = *reinterpret_cast<const float4*>(g + i0);
  float4 mm = *reinterpret_cast<const float4*>(m + i0);
  float4 vv = *reinterpret_cast<const float4*>(v + i0);
  te::detail::adamw_update(pp.x, gg.x, mm.x, vv.x, s);
  te::detail::adamw_update(pp.y, gg.y, mm.y, vv.y, s);
  te::detail::adamw_update(pp.z, gg.z, mm.z, vv.z, s);
  te::detail::adamw_update(pp.w, gg.w, mm.w, vv.w, s);
  *reinterpret_cast<float4*>(p + i0) = pp;
  *reinterpret_cast<float4*>(m + i0) = mm;
  *reinterpret_cast<float4*>(v + i0) = vv;
  const uint32_t lo = te::bf16_from_f32(pp.x) | (uint32_t{te::bf16_from_f32(pp.y)} << 16);
  const uint32_t hi = te::bf16_from_f32(pp.z) | (uint32_t{te::bf16_from_f32(pp.w)} << 16);
  *reinterpret_cast<uint2*>(w + i0) = make_uint2(lo, hi);
}

// AdamW over n f32 elements (n a multiple of 4), a grid-stride loop of float4 units.
__global__ void __launch_bounds__(kThreads) adamw_kernel(float* p, const float* g, float* m, float* v, uint16_t* w,
                                                         int64_t n, const te::AdamWScalars* scalars) {
  extern __shared__ uint8_t pin[];
  if (n < 0) pin[threadIdx.x] = 0;  // never: keeps the shared memory request
  const te::AdamWScalars s = *scalars;
  for (int64_t i0 = (blockIdx.x * int64_t{kThreads} + threadIdx.x) * 4; i0 < n; i0 += int64_t{gridDim.x} * kThreads * 4)
    adamw_unit(p, g, m, v, w, i0, s);
}

// The same update as a plain grid: one float4 unit per thread.
__global__ void __launch_bounds__(256)
    adamw_flood(float* p, const float* g, float* m, float* v, uint16_t* w, int64_t n, const te::AdamWScalars* scalars) {
  const int64_t i0 = (blockIdx.x * int64_t{256} + threadIdx.x) * 4;
  if (i0 < n) adamw_unit(p, g, m, v, w, i0, *scalars);
}

__global__ void fill_bytes(uint8_t* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = uint8_t((uint32_t(i) * 2654435761u + seed) >> 24) & 0x77;  // finite e4m3, |x| < 2
}
__global__ void fill_f32(float* x, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x[i] = value;
}

// One TN block-scaled FP8 GEMM: D[m, n] (column-major) = Aᵀ B, A stored k × m, B k × n.
struct Gemm {
  int64_t m, n, k;
  int32_t a_mode, b_mode;
  void *a, *b, *d;
  float *as, *bs;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo;
};

void* dev_alloc(size_t bytes) {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, bytes));
  return p;
}

Gemm make_gemm(cublasLtHandle_t h, int64_t m, int64_t n, int64_t k, int32_t a_mode, int32_t b_mode, int sm_target,
               void* ws, size_t ws_bytes) {
  Gemm g{m, n, k, a_mode, b_mode};
  g.a = dev_alloc(m * k), g.b = dev_alloc(n * k), g.d = dev_alloc(m * n * 2);
  fill_bytes<<<1024, 256>>>(static_cast<uint8_t*>(g.a), m * k, 1);
  fill_bytes<<<1024, 256>>>(static_cast<uint8_t*>(g.b), n * k, 2);
  const int64_t scales = std::max(m, n) * ((k + 127) / 128);  // enough for either layout; all ones
  g.as = static_cast<float*>(dev_alloc(scales * 4)), g.bs = static_cast<float*>(dev_alloc(scales * 4));
  fill_f32<<<256, 256>>>(g.as, scales, 1.0f);
  fill_f32<<<256, 256>>>(g.bs, scales, 1.0f);
  LT(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof a_mode));
  LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof b_mode));
  LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.as, sizeof g.as));
  LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.bs, sizeof g.bs));
  if (sm_target > 0)
    LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sm_target, sizeof sm_target));
  LT(cublasLtMatrixLayoutCreate(&g.la, CUDA_R_8F_E4M3, k, m, k));
  LT(cublasLtMatrixLayoutCreate(&g.lb, CUDA_R_8F_E4M3, k, n, k));
  LT(cublasLtMatrixLayoutCreate(&g.ld, CUDA_R_16BF, m, n, m));
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t wsb = ws_bytes;
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
  cublasLtMatmulHeuristicResult_t r[1];
  int found = 0;
  LT(cublasLtMatmulAlgoGetHeuristic(h, g.desc, g.la, g.lb, g.ld, g.ld, pref, 1, r, &found));
  if (found == 0) {
    std::printf("no algorithm for %lld x %lld x %lld\n", (long long)m, (long long)n, (long long)k);
    std::exit(1);
  }
  g.algo = r[0].algo;
  cublasLtMatmulPreferenceDestroy(pref);
  return g;
}

void run_gemm(cublasLtHandle_t h, const Gemm& g, void* ws, size_t ws_bytes, cudaStream_t s) {
  const float alpha = 1.0f, beta = 0.0f;
  LT(cublasLtMatmul(h, g.desc, &alpha, g.a, g.la, g.b, g.lb, &beta, g.d, g.ld, g.d, g.ld, &g.algo, ws, ws_bytes, s));
}

template <typename Fn>
double median_ms(Fn fn) {
  const std::vector<float> ms = sorted_event_ms(fn, 20, 3);
  return ms[ms.size() / 2];
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cublasLtHandle_t h;
  LT(cublasLtCreate(&h));
  const size_t ws_bytes = 32u << 20;
  void* ws_main = dev_alloc(ws_bytes);
  int lo_prio = 0, hi_prio = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&lo_prio, &hi_prio));
  cudaStream_t hi, lo;  // the GEMMs' stream and the optimizer's
  CHECK(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, hi_prio));
  CHECK(cudaStreamCreateWithPriority(&lo, cudaStreamNonBlocking, lo_prio));
  cudaEvent_t fork, join;
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

  const int64_t n = int64_t{4096} * 16384;  // FC2's weight
  auto* p = static_cast<float*>(dev_alloc(n * 4));
  auto* g = static_cast<float*>(dev_alloc(n * 4));
  auto* m = static_cast<float*>(dev_alloc(n * 4));
  auto* v = static_cast<float*>(dev_alloc(n * 4));
  auto* w = static_cast<uint16_t*>(dev_alloc(n * 2));
  fill_f32<<<1024, 256>>>(p, n, 0.01f);
  fill_f32<<<1024, 256>>>(g, n, 0.001f);
  fill_f32<<<1024, 256>>>(m, n, 0.0f);
  fill_f32<<<1024, 256>>>(v, n, 0.0f);
  te::AdamWScalars hs{1e-3f, 0.9f, 0.1f, 0.999f, 0.001f, 1e-8f, 1.0f - 1e-5f, 0.1f, 0.001f};
  auto* ds = static_cast<te::AdamWScalars*>(dev_alloc(sizeof hs));
  CHECK(cudaMemcpy(ds, &hs, sizeof hs, cudaMemcpyHostToDevice));
  CHECK(cudaFuncSetAttribute(adamw_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kPinSmem));
  auto adamw = [&](int blocks, cudaStream_t s) {
    adamw_kernel<<<blocks, kThreads, kPinSmem, s>>>(p, g, m, v, w, n, ds);
  };

  const int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  auto gemms_on = [&](int target) {
    // fprop-shaped: out [8192, 4096] = x [8192, 16384] · Wᵀ (W 128x128 blocks); wgrad-shaped: dW [16384, 4096].
    std::vector<Gemm> out;
    out.push_back(make_gemm(h, 4096, 8192, 16384, blk, vec, target, ws_main, ws_bytes));
    out.push_back(make_gemm(h, 4096, 16384, 8192, vec, vec, target, ws_main, ws_bytes));
    return out;
  };
  auto run_gemms = [&](const std::vector<Gemm>& gs, cudaStream_t s) {
    for (const Gemm& x : gs) run_gemm(h, x, ws_main, ws_bytes, s);
  };
  const double bytes = 30.0 * double(n);

  const int64_t flood_blocks = n / (256 * 4);
  auto flood = [&](cudaStream_t st) { adamw_flood<<<unsigned(flood_blocks), 256, 0, st>>>(p, g, m, v, w, n, ds); };
  // Both streams forked from and joined back into stream 0 (the timed one); `first` enqueues first.
  auto both = [&](auto&& first, auto&& second) {
    return median_ms([&] {
      CHECK(cudaEventRecord(fork, 0));
      CHECK(cudaStreamWaitEvent(hi, fork));
      CHECK(cudaStreamWaitEvent(lo, fork));
      first();
      second();
      CHECK(cudaEventRecord(join, lo));
      CHECK(cudaStreamWaitEvent(0, join));
      CHECK(cudaEventRecord(join, hi));
      CHECK(cudaStreamWaitEvent(0, join));
    });
  };

  const auto full = gemms_on(0);
  const double t_gemm = median_ms([&] { run_gemms(full, 0); });
  const double t_adamw = median_ms([&] { adamw(sms, 0); });
  const double t_flood = median_ms([&] { flood(0); });
  std::printf(
      "%d SMs; gemms(all) %.4f ms; adamw(%d pinned) %.4f ms (%.2f TB/s); flood %.4f ms (%.2f TB/s); serial "
      "sum %.4f ms\n",
      sms, t_gemm, sms, t_adamw, bytes / (t_adamw * 1e-3) / 1e12, t_flood, bytes / (t_flood * 1e-3) / 1e12,
      t_gemm + t_flood);
  std::printf("k= 0: flood first %.4f ms, gemms first %.4f ms\n",
              both([&] { flood(lo); }, [&] { run_gemms(full, hi); }),
              both([&] { run_gemms(full, hi); }, [&] { flood(lo); }));
  for (int k : {4, 8, 12, 16, 24, 32}) {
    const auto carved = gemms_on(sms - k);
    const double t_g = median_ms([&] { run_gemms(carved, 0); });
    const double t_a = median_ms([&] { adamw(k, 0); });
    const double t_pin = both([&] { adamw(k, lo); }, [&] { run_gemms(carved, hi); });
    const double t_ff = both([&] { flood(lo); }, [&] { run_gemms(carved, hi); });
    const double t_gf = both([&] { run_gemms(carved, hi); }, [&] { flood(lo); });
    std::printf(
        "k=%2d: gemms(%d SMs) %.4f ms (%.3fx all); adamw(%d pinned) %.4f ms (%.1f GB/s/SM); pinned %.4f, "
        "flood first %.4f, gemms first %.4f ms (serial %.4f)\n",
        k, sms - k, t_g, t_g / t_gemm, k, t_a, bytes / (t_a * 1e-3) / 1e9 / k, t_pin, t_ff, t_gf, t_gemm + t_flood);
  }
  return 0;
}
