#include "engine/cuda_check.h"
#include "engine/element.h"
#include "engine/philox.h"
#include "engine/tensor_kernels.h"

namespace te::cuda {
namespace {
cudaStream_t st(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }
int blocks_for(int64_t n, int threads) { return static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535 * 8)); }

__device__ int64_t strided_offset(int64_t i, const StridedLayout& l) {
  int64_t off = 0;
  for (int d = l.dims - 1; d >= 0; --d) {
    int64_t idx = i % l.shape[d];
    i /= l.shape[d];
    off += idx * l.stride[d];
  }
  return off;
}

template <class T>
__global__ void strided_copy_kernel(T* dst, StridedLayout dl, const T* src, StridedLayout sl, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[strided_offset(i, dl)] = src[strided_offset(i, sl)];
}

__global__ void fill_kernel(void* dst, DType t, int64_t n, float v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_f32(dst, t, i, v);
}

// fp4: one thread writes a whole byte (both nibbles), never reading the destination.
__global__ void fill_random_kernel(void* dst, DType t, int64_t n, uint64_t seed, bool normal, float a, float b) {
  const auto value = [&](int64_t j) { return random_fill_value(seed, static_cast<uint64_t>(j), normal, a, b); };
  const int64_t count = t == DType::fp4_e2m1 ? (n + 1) / 2 : n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    if (t == DType::fp4_e2m1)
      static_cast<uint8_t*>(dst)[i] = fp4_byte_of(i, n, value);
    else
      store_f32(dst, t, i, value(i));
  }
}
}  // namespace

void strided_copy(void* dst, const StridedLayout& dl, const void* src, const StridedLayout& sl, int elem_bytes,
                  int64_t n, const Stream& stream) {
  const int threads = 256;
  const int blocks = blocks_for(n, threads);
  switch (elem_bytes) {
    case 1: strided_copy_kernel<<<blocks, threads, 0, st(stream)>>>((uint8_t*)dst, dl, (const uint8_t*)src, sl, n); break;
    case 2: strided_copy_kernel<<<blocks, threads, 0, st(stream)>>>((uint16_t*)dst, dl, (const uint16_t*)src, sl, n); break;
    case 4: strided_copy_kernel<<<blocks, threads, 0, st(stream)>>>((uint32_t*)dst, dl, (const uint32_t*)src, sl, n); break;
    case 8: strided_copy_kernel<<<blocks, threads, 0, st(stream)>>>((uint64_t*)dst, dl, (const uint64_t*)src, sl, n); break;
    default: TE_THROW("strided_copy: unsupported element size " << elem_bytes, "");
  }
  TE_CUDA_CHECK_LAUNCH();
}

void fill(void* dst, DType t, int64_t n, float v, const Stream& stream) {
  if (n == 0) return;
  if (t == DType::fp4_e2m1) {  // replicate the nibble into whole bytes
    uint8_t q = e2m1_from_f32(v);
    TE_CUDA_CHECK(cudaMemsetAsync(dst, q | (q << 4), (n + 1) / 2, st(stream)));
    return;
  }
  fill_kernel<<<blocks_for(n, 256), 256, 0, st(stream)>>>(dst, t, n, v);
  TE_CUDA_CHECK_LAUNCH();
}

void fill_random(void* dst, DType t, int64_t n, uint64_t seed, bool normal, float a, float b, const Stream& stream) {
  if (n == 0) return;
  fill_random_kernel<<<blocks_for(n, 256), 256, 0, st(stream)>>>(dst, t, n, seed, normal, a, b);
  TE_CUDA_CHECK_LAUNCH();
}
}  // namespace te::cuda
