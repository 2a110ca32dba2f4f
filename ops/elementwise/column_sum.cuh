// Deterministic column reductions over [rows, cols] in fp32 (CUDA builds only): dgamma/dbeta of the norms and
// the bias gradient of the activations. Pass 1: block (32, 16) sums a strip of rows for 32 columns into
// partial[strip][k][col]; pass 2 sums the strips in a fixed order and rounds once to the output dtype. The same
// inputs always give the same bits, independent of timing.
#pragma once
#include <algorithm>

#include "engine/element.h"
#include "engine/tensor.h"
#include "ops/elementwise/cuda_common.cuh"

namespace te::cuda {

// F: __device__ void operator()(int64_t row, int64_t col, float (&acc)[NOUT]) const — adds one element's terms.
template <int NOUT, class F>
__global__ void column_partial_kernel(F f, int64_t rows, int64_t cols, float* partial) {
  __shared__ float red[NOUT][16][33];
  const int64_t col = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float acc[NOUT];
#pragma unroll
  for (int k = 0; k < NOUT; ++k) acc[k] = 0.f;
  if (col < cols)
    for (int64_t r = int64_t(blockIdx.y) * 16 + threadIdx.y; r < rows; r += int64_t(gridDim.y) * 16) f(r, col, acc);
#pragma unroll
  for (int k = 0; k < NOUT; ++k) red[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
#pragma unroll
    for (int k = 0; k < NOUT; ++k) {
      float s = 0.f;
      for (int y = 0; y < 16; ++y) s += red[k][y][threadIdx.x];
      partial[(int64_t(blockIdx.y) * NOUT + k) * cols + col] = s;
    }
  }
}

// out_k[col] = sum over strips of partial[strip][k][col]; out_k == nullptr skips output k.
template <int NOUT>
struct ColumnOutputs {
  void* out[NOUT];
};
template <int NOUT>
__global__ void column_finish_kernel(const float* partial, int strips, int64_t cols, ColumnOutputs<NOUT> outs,
                                     DType tout) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= cols) return;
#pragma unroll
  for (int k = 0; k < NOUT; ++k) {
    if (!outs.out[k]) continue;
    float s = 0.f;
    for (int st = 0; st < strips; ++st) s += partial[(int64_t(st) * NOUT + k) * cols + col];
    store_f32(outs.out[k], tout, col, s);
  }
}

// Runs both passes on `stream`; the fp32 workspace comes from the caching allocator (stream-ordered).
template <int NOUT, class F>
void column_reduce(F f, int64_t rows, int64_t cols, ColumnOutputs<NOUT> outs, DType tout, const Stream& stream,
                   Device device) {
  const int64_t col_blocks = (cols + 31) / 32;
  // Enough strips to fill the GPU (~4 blocks per SM on 132 SMs), never more than there are 16-row groups.
  const int64_t want = std::max<int64_t>(1, (132 * 4 + col_blocks - 1) / col_blocks);
  const int strips = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, (rows + 15) / 16, 65535})));
  Tensor ws = Tensor::empty({int64_t(strips) * NOUT * cols}, DType::f32, device, stream);
  TE_CHECK(col_blocks <= INT32_MAX, "column_reduce: too many columns " << cols);
  column_partial_kernel<NOUT, F><<<dim3(static_cast<unsigned>(col_blocks), strips), dim3(32, 16), 0,
                                   raw_stream(stream)>>>(f, rows, cols, ws.data<float>());
  TE_CUDA_CHECK_LAUNCH();
  column_finish_kernel<NOUT><<<static_cast<unsigned>((cols + 255) / 256), 256, 0, raw_stream(stream)>>>(
      ws.data<float>(), strips, cols, outs, tout);
  TE_CUDA_CHECK_LAUNCH();
}

}  // namespace te::cuda
