// CUDA elementwise kernels. Conversions go through engine/element.h (the CPU reference's functions), so results
// are bit-identical to elementwise_ref.cpp. Grid-stride loops; the dtype switch is uniform per launch.
#include <algorithm>

#include "engine/device.h"
#include "engine/element.h"
#include "ops/elementwise/cuda_common.cuh"
#include "ops/elementwise/deterministic_sum.cuh"
#include "ops/elementwise/elementwise_impl.h"

namespace te::cuda {
namespace {

int grid_for(int64_t n, int threads) { return static_cast<int>(grid_stride_blocks(n, threads, 32)); }

__global__ void add_kernel(const void* a, DType ta, const void* b, DType tb, const void* bias, DType tbias,
                           void* out, DType tout, int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = load_f32(a, ta, i) + load_f32(b, tb, i);
    if (bias) v += load_f32(bias, tbias, i % cols);
    store_f32(out, tout, i, v);
  }
}

// The residual add of every block: a, b and out of one dtype T, contiguous, 16-byte aligned, cols a multiple of 8.
// Eight elements per thread with 16-byte accesses; the same f32 operations in the same order as add_kernel (a + b,
// then + bias, one rounding), so the bytes are equal. (The scalar kernel's per-element dtype switch ran at a third
// of the copy bandwidth on [8192, 4096] bf16.)
template <class T, class TB>
__global__ void add_vec8_kernel(const T* a, const T* b, const TB* bias, T* out, int64_t n8, int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n8; i += int64_t(gridDim.x) * blockDim.x) {
    float va[8], vb[8];
    load_vec<T, 8>(a, i * 8, va);
    load_vec<T, 8>(b, i * 8, vb);
#pragma unroll
    for (int k = 0; k < 8; ++k) va[k] = va[k] + vb[k];
    if (bias) {
      float vc[8];
      load_vec<TB, 8>(bias, (i * 8) % cols, vc);
#pragma unroll
      for (int k = 0; k < 8; ++k) va[k] += vc[k];
    }
    store_vec<T, 8, true>(out, i * 8, va);
  }
}

__global__ void cast_kernel(const void* x, DType tx, void* out, DType tout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f32(out, tout, i, load_f32(x, tx, i));
}

__global__ void scale_kernel(const void* x, DType tx, float alpha, void* out, DType tout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f32(out, tout, i, alpha * load_f32(x, tx, i));
}

// Σ x² in double: a fixed grid folds fixed grid-stride shares (so the order, and the result, never change), then
// sum_partials adds the per-CTA partials (deterministic_sum.cuh).
constexpr int kSumBlocks = kSumSquaresPartials, kSumThreads = 256;
__global__ void sum_squares_partial(const void* x, DType tx, int64_t n, double* partial) {
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double v = load_f32(x, tx, i);
    acc += v * v;
  }
  block_sum_to_partial<kSumThreads>(acc, partial);
}

// 32x32 tile through shared memory: coalesced reads of x rows and writes of out rows. Block (32, 8).
template <class T>
__global__ void transpose_kernel(const T* x, T* out, int64_t rows, int64_t cols) {
  __shared__ T tile[32][33];
  const int64_t r0 = int64_t(blockIdx.y) * 32, c0 = int64_t(blockIdx.x) * 32;
  for (int k = threadIdx.y; k < 32; k += 8) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[k][threadIdx.x] = x[r * cols + c];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += 8) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;  // out row c, column r
    if (r < rows && c < cols) out[c * rows + r] = tile[threadIdx.x][k];
  }
}

template <class T>
void launch_transpose(const void* x, void* out, int64_t rows, int64_t cols, const Stream& stream) {
  TE_CHECK((cols + 31) / 32 <= INT32_MAX && (rows + 31) / 32 <= 65535,
           "transpose_2d: [" << rows << ", " << cols << "] has too many rows for one launch (max " << 65535 * 32
                             << ")");
  dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32)), block(32, 8);
  transpose_kernel<T><<<grid, block, 0, raw_stream(stream)>>>(static_cast<const T*>(x), static_cast<T*>(out), rows,
                                                              cols);
  TE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void add(const void* a, DType ta, const void* b, DType tb, const void* bias, DType tbias, void* out, DType tout,
         int64_t rows, int64_t cols, const Stream& stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  auto al = [](const void* p, int bytes) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  const bool sixteen = ta == DType::bf16 || ta == DType::f16;
  const bool bias_ok = !bias || tbias == ta || tbias == DType::f32;
  if (sixteen && ta == tb && ta == tout && bias_ok && cols % 8 == 0 && al(a, 16) && al(b, 16) && al(out, 16) &&
      al(bias, tbias == DType::f32 ? 32 : 16)) {
    const int64_t n8 = n / 8;
    const int grid = grid_for(n8, 256);
    auto launch = [&](auto t, auto tb) {
      using T = decltype(t);
      using TB = decltype(tb);
      add_vec8_kernel<T, TB><<<grid, 256, 0, raw_stream(stream)>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                                   static_cast<const TB*>(bias), static_cast<T*>(out),
                                                                   n8, cols);
    };
    if (ta == DType::bf16) tbias == DType::f32 ? launch(BF16{}, float{}) : launch(BF16{}, BF16{});
    else tbias == DType::f32 ? launch(F16{}, float{}) : launch(F16{}, F16{});
  } else {
    add_kernel<<<grid_for(n, 256), 256, 0, raw_stream(stream)>>>(a, ta, b, tb, bias, tbias, out, tout, n, cols);
  }
  TE_CUDA_CHECK_LAUNCH();
}

void cast(const void* x, DType tx, void* out, DType tout, int64_t n, const Stream& stream) {
  if (n == 0) return;
  cast_kernel<<<grid_for(n, 256), 256, 0, raw_stream(stream)>>>(x, tx, out, tout, n);
  TE_CUDA_CHECK_LAUNCH();
}

void scale(const void* x, DType tx, float alpha, void* out, DType tout, int64_t n, const Stream& stream) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n, 256), 256, 0, raw_stream(stream)>>>(x, tx, alpha, out, tout, n);
  TE_CUDA_CHECK_LAUNCH();
}

void sum_squares(const void* x, DType tx, int64_t n, double* p, float* out, const Stream& stream) {
  sum_squares_partial<<<kSumBlocks, kSumThreads, 0, raw_stream(stream)>>>(x, tx, n, p);
  TE_CUDA_CHECK_LAUNCH();
  sum_partials(p, kSumBlocks, out, stream);
}

void transpose_2d(const void* x, void* out, int elem_bytes, int64_t rows, int64_t cols, const Stream& stream) {
  if (rows == 0 || cols == 0) return;
  switch (elem_bytes) {
    case 1: launch_transpose<uint8_t>(x, out, rows, cols, stream); return;
    case 2: launch_transpose<uint16_t>(x, out, rows, cols, stream); return;
    case 4: launch_transpose<uint32_t>(x, out, rows, cols, stream); return;
    case 8: launch_transpose<uint64_t>(x, out, rows, cols, stream); return;
    default: TE_THROW("transpose_2d: unsupported element size " << elem_bytes, "use a dtype of 1, 2, 4 or 8 bytes");
  }
}

}  // namespace te::cuda
