// The last step of the deterministic double sums (deterministic_sum.cuh).
#include "ops/elementwise/deterministic_sum.cuh"

namespace te::cuda {
namespace {
// One warp: a single thread walking hundreds of partials in order costs ~10 µs of dependent loads.
__global__ void sum_partials_kernel(const double* partial, int n, float* out) {
  double s = 0;
  for (int i = threadIdx.x; i < n; i += 32) s += partial[i];
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xFFFFFFFFu, s, off);
  if (threadIdx.x == 0) *out = static_cast<float>(s);
}
}  // namespace

void sum_partials(const double* partial, int n, float* out, const Stream& stream) {
  sum_partials_kernel<<<1, 32, 0, raw_stream(stream)>>>(partial, n, out);
  TE_CUDA_CHECK_LAUNCH();
}

}  // namespace te::cuda
