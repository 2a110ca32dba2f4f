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

// An L2 policy for data several CTAs read at about the same time (a GEMM tile's operands): the default priority.
__device__ __forceinline__ uint64_t evict_normal_policy() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
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

// 4 bytes global → shared through cp.async (zeros when !valid): for scales a stage carries beside its TMA boxes.
// Its completion is counted on a stage barrier by cp_async_arrive, one of the barrier's arrivals per thread.
__device__ __forceinline__ void copy4_async(float* dst, const float* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(bulk::smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
#endif
}
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bulk::smem_addr(bar)) : "memory");
#endif
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

// Stores the box at (column x, row y) of `map` from `src` (shared, 1024-byte aligned for the 128-byte swizzle). Before
// it, every thread that wrote `src` runs async_fence() and the writers synchronise; the stores of a thread form a
// group with store_commit(), and store_wait_read() returns once they have read their shared memory.
__device__ __forceinline__ void store_2d(const CUtensorMap* map, int x, int y, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(x), "r"(y), "r"(bulk::smem_addr(src))
               : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void async_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
__device__ __forceinline__ void store_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}
__device__ __forceinline__ void store_wait_read() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#endif
}
// Returns once this thread's stores have completed (their writes are done), e.g. before the kernel ends.
__device__ __forceinline__ void store_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

}  // namespace te::cuda::tma
