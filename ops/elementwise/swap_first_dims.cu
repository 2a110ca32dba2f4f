// swap_first_dims on CUDA: one grid row per (a, b) row group, threads copy the row with the widest vector that
// every pointer, pitch and the row length allow (16/8/4/2/1 bytes). Pure data movement, so bit-exact vs the CPU.
#include "engine/cuda_check.h"
#include "ops/elementwise/swap_first_dims.h"

namespace te::detail {
namespace {
template <class V>
__global__ void swap_rows_kernel(SwapFirstDimsArgs g) {
  const int64_t rows = g.A * g.B;
  const int64_t n = g.row_bytes / static_cast<int64_t>(sizeof(V));
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t a = r / g.B, b = r % g.B;
    const V* src = reinterpret_cast<const V*>(g.in + a * g.in_pitch_a + b * g.in_pitch_b);
    V* dst = reinterpret_cast<V*>(g.out + b * g.out_pitch_b + a * g.out_pitch_a);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
      dst[i] = src[i];
  }
}

bool aligned_to(const SwapFirstDimsArgs& g, int64_t v) {
  auto ok = [v](int64_t x) { return x % v == 0; };
  return ok(reinterpret_cast<uintptr_t>(g.in)) && ok(reinterpret_cast<uintptr_t>(g.out)) && ok(g.row_bytes) &&
         ok(g.in_pitch_a) && ok(g.in_pitch_b) && ok(g.out_pitch_a) && ok(g.out_pitch_b);
}

template <class V>
void launch(const SwapFirstDimsArgs& g, cudaStream_t st) {
  const int threads = 256;
  const int64_t n = g.row_bytes / static_cast<int64_t>(sizeof(V));
  const unsigned gx = static_cast<unsigned>(std::min<int64_t>((n + threads - 1) / threads, 1024));
  const unsigned gy = static_cast<unsigned>(std::min<int64_t>(g.A * g.B, 65535));
  swap_rows_kernel<V><<<dim3(gx, gy), threads, 0, st>>>(g);
  TE_CUDA_CHECK_LAUNCH();
}
}  // namespace

void swap_first_dims_cuda(const SwapFirstDimsArgs& g, const Stream& stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream.handle());
  if (aligned_to(g, 16)) return launch<uint4>(g, st);
  if (aligned_to(g, 8)) return launch<uint2>(g, st);
  if (aligned_to(g, 4)) return launch<uint32_t>(g, st);
  if (aligned_to(g, 2)) return launch<uint16_t>(g, st);
  launch<uint8_t>(g, st);
}

}  // namespace te::detail
