// CUDA kernels of the builtin ops: the same arithmetic as the CPU loop in builtin_ops.cpp (f32 sum, one rounding).
#include "engine/cuda_check.h"
#include "engine/element.h"
#include "graph/builtin_ops.h"

namespace te::builtin {

namespace {
__global__ void add_kernel(const void* a, const void* b, void* out, DType t, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    store_f32(out, t, i, __fadd_rn(load_f32(a, t, i), load_f32(b, t, i)));
}
}  // namespace

void add_cuda(const Tensor& a, const Tensor& b, Tensor& out, const Stream& stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 4096));
  add_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream.handle())>>>(a.data_ptr(), b.data_ptr(),
                                                                                  out.data_ptr(), out.dtype(), n);
  TE_CUDA_CHECK_LAUNCH();
}

}  // namespace te::builtin
