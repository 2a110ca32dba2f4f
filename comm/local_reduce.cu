// CUDA version of the rank-ordered reduction: one thread per element, same arithmetic as local_reduce_ref.cpp.
#include "comm/local_reduce.h"
#include "engine/cuda_check.h"

namespace te::detail {
namespace {
__global__ void local_reduce_kernel(void* out, RankBuffers in, int world, DType dtype, int64_t n, ReduceOp op) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float acc = load_f32(in.ptr[0], dtype, i);
    for (int r = 1; r < world; ++r) acc = reduce_step(acc, load_f32(in.ptr[r], dtype, i), op);
    store_f32(out, dtype, i, acc);
  }
}
}  // namespace

void local_reduce_cuda(void* out, const RankBuffers& in, int world, DType dtype, int64_t n, ReduceOp op,
                       const Stream& stream) {
  if (n == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 4096));
  local_reduce_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream.handle())>>>(out, in, world, dtype, n,
                                                                                          op);
  TE_CUDA_CHECK_LAUNCH();
}
}  // namespace te::detail
