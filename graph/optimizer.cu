// CUDA optimizers: one thread per element (grid-stride), the update of optimizer_math.h.
#include "engine/cuda_check.h"
#include "engine/element.h"
#include "graph/optimizer_math.h"

namespace te::detail {

namespace {
constexpr int kThreads = 256;
int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 8192)); }

__global__ void sgd_kernel(float* p, const void* g, DType gt, float* buf, int64_t n, SgdScalars s) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    sgd_update(p[i], load_f32(g, gt, i), buf[i], s);
}

__global__ void adamw_kernel(float* p, const void* g, DType gt, float* m, float* v, int64_t n, AdamWScalars s) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    adamw_update(p[i], load_f32(g, gt, i), m[i], v[i], s);
}
}  // namespace

void sgd_momentum_cuda(float* p, const void* g, DType gt, float* buf, int64_t n, const SgdScalars& s,
                       const Stream& stream) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream.handle())>>>(p, g, gt, buf, n, s);
  TE_CUDA_CHECK_LAUNCH();
}

void adamw_cuda(float* p, const void* g, DType gt, float* m, float* v, int64_t n, const AdamWScalars& s,
                const Stream& stream) {
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream.handle())>>>(p, g, gt, m, v, n, s);
  TE_CUDA_CHECK_LAUNCH();
}

}  // namespace te::detail
