// Shared by the attention kernels (attention.cu, attention_mma.cu): the layout as the device reads it, the tile
// extent at a sequence's end, the warp maximum (the sum is cuda_common.cuh's), and the launch that raises a kernel's shared-memory limit.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "ops/attention/attention.h"
#include "ops/elementwise/cuda_common.cuh"

namespace te::cuda::attention_detail {

constexpr int kTile = 64;      // query rows and keys per tile, in every attention kernel
constexpr int kThreads = 128;  // 4 warps, each owning 16 rows of a tile

// The geometry every kernel reads from the layout.
struct Geometry {
  int64_t seq, head_dim, qkv_cols, out_cols, heads, group;
  bool kinds_apart;  // AttentionLayout::kinds_apart
  __device__ __forceinline__ int64_t q_col(int64_t h) const {
    return kinds_apart ? h * head_dim : ((h / group) * (group + 2) + h % group) * head_dim;
  }
  __device__ __forceinline__ int64_t k_col(int64_t g) const {
    return kinds_apart ? (heads + g) * head_dim : (g * (group + 2) + group) * head_dim;
  }
  __device__ __forceinline__ int64_t v_col(int64_t g) const {
    return kinds_apart ? (heads + heads / group + g) * head_dim : k_col(g) + head_dim;
  }
};

// Rows of the tile starting at `at` in a sequence of `seq`.
__device__ __forceinline__ int tile_extent(int64_t seq, int64_t at) {
  return seq - at < kTile ? static_cast<int>(seq - at) : kTile;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

inline Geometry geometry_of(const AttentionLayout& l) {
  return {l.seq, l.head_dim, l.qkv_cols(), l.out_cols(), l.heads, l.group(), l.kinds_apart};
}

// Launches Kernel with `smem` bytes of dynamic shared memory, first raising its limit past the default 48 KiB once
// per device (the attribute belongs to the device's copy of the kernel).
template <auto Kernel, class... Args>
void launch(size_t smem, dim3 grid, int threads, const Stream& stream, Args... args) {
  static std::atomic<uint64_t> raised{0};  // one bit per device
  int device = 0;
  TE_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t(1) << (device % 64);
  if (!(raised.load() & bit)) {
    TE_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    raised.fetch_or(bit);
  }
  Kernel<<<grid, threads, smem, raw_stream(stream)>>>(args...);
  TE_CUDA_CHECK_LAUNCH();
}

// Calls f(T{}) with T the CUDA type of a bf16 or f16 dtype (the kernels take no other).
template <class F>
void dispatch_16bit(DType t, F&& f) {
  if (t == DType::bf16) f(__nv_bfloat16());
  else f(__half());
}

// Grid of (tiles of `seq`, ys, batch).
inline dim3 tiles(int64_t seq, int64_t ys, int64_t batch) {
  return dim3(static_cast<unsigned>((seq + kTile - 1) / kTile), static_cast<unsigned>(ys),
              static_cast<unsigned>(batch));
}

// The register-resident tensor-core kernels of attention_mma.cu, for head_dim 64 or 128 with every buffer's rows
// 16-byte aligned; the shared-memory WMMA kernels of attention.cu take the rest.
bool mma_path_applies(const AttentionLayout& l, DType t, std::initializer_list<const void*> buffers);
void forward_mma(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* qkv, DType t,
                 void* out, float* lse, const Stream& stream);
// delta: Σ dO · O per row and head, computed first.
void backward_mma(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* dout,
                  const void* qkv, const float* lse, const float* delta, DType t, void* dqkv, const Stream& stream);

}  // namespace te::cuda::attention_detail
