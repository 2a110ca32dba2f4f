// Device side of a producer/consumer ring in shared memory (sm_90+), on the mbarriers of
// ops/elementwise/bulk_copy.cuh (bulk::barrier_init with the arrival count, bulk::wait): arrivals with and without
// announced bytes, L2 policies, and the 2-D TMA load itself (ops/gemm/tensor_map.h builds its descriptor).
// A "full" barrier completes when the producer's loads of a stage have landed; an "empty" barrier when every
// consumer warp has finished reading it. Waits name the phase parity: 0 for a stage's first use, then alternating;
// a producer waits for "empty" with the opposite parity, which a fresh barrier passes at once.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "ops/elementwise/bulk_copy.cuh"

namespace te::cuda::tma {

__device__ __forceinline__ void arrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bulk::smem_addr(bar)) : "memory");
#endif
}

// One arrival that also announces `bytes` still to land through loads completing on this barrier.
__device__ __forceinline__ void arrive_expect_bytes(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bulk::smem_addr(bar)), "r"(bytes)
               : "memory");
#endif
}

// An L2 policy for data read once (a streamed weight): evicted first, so it does not push out what is reused.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

// An L2 policy for data every CTA reads again (the small operand): evicted last.
__device__ __forceinline__ uint64_t evict_last_policy() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}

// The box at (column x in elements, row y) of `map` into dst (1024-byte aligned for the 128-byte swizzle); its
// bytes complete on `bar`.
__device__ __forceinline__ void load_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar,
                                        uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(bulk::smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bulk::smem_addr(bar)), "l"(policy)
      : "memory");
#else
  __trap();
#endif
}

}  // namespace te::cuda::tma
