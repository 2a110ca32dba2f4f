// See gemm_kernels.h.
#include "ops/gemm/gemm_kernels.h"

#include "engine/cuda_check.h"
#include "engine/device.h"
#include "engine/element.h"
#include "ops/quant/scale_math.h"

namespace te::cuda {
namespace {

cudaStream_t as_cuda(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }

__global__ void add_bias_kernel(void* out, DType out_dtype, int64_t rows, int64_t cols, int64_t ld,
                                const void* bias, DType bias_dtype) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const int64_t o = r * ld + c;
    store_f32(out, out_dtype, o, load_f32(out, out_dtype, o) + load_f32(bias, bias_dtype, c));
  }
}

__global__ void nvfp4_alpha_kernel(const float* amax_a, const float* amax_b, float alpha, float beta, float* ab) {
  float f = alpha;
  if (amax_a) f *= 1.0f / nvfp4_global_encode_scale(*amax_a);
  if (amax_b) f *= 1.0f / nvfp4_global_encode_scale(*amax_b);
  ab[0] = f;
  ab[1] = beta;
}

}  // namespace

void gemm_add_bias(void* out, DType out_dtype, int64_t rows, int64_t cols, int64_t ld, const void* bias,
                   DType bias_dtype, const Stream& stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  const int threads = 256;
  const int64_t blocks = grid_stride_blocks(n, threads, 16);
  add_bias_kernel<<<static_cast<unsigned>(blocks), threads, 0, as_cuda(stream)>>>(out, out_dtype, rows, cols, ld,
                                                                                    bias, bias_dtype);
  TE_CUDA_CHECK_LAUNCH();
}

void gemm_nvfp4_alpha(const float* amax_a, const float* amax_b, float alpha, float beta, float* alpha_beta,
                      const Stream& stream) {
  nvfp4_alpha_kernel<<<1, 1, 0, as_cuda(stream)>>>(amax_a, amax_b, alpha, beta, alpha_beta);
  TE_CUDA_CHECK_LAUNCH();
}

}  // namespace te::cuda
