// The Hopper bulk-copy engine (cp.async.bulk, sm_90+) for one-dimensional global → shared copies, completed on an
// mbarrier: a copy in flight holds no registers and bypasses L1, so a kernel can stream rows through shared memory
// while its registers and L1 serve other data. One thread issues; every thread waits on the barrier's phase.
#pragma once
#include <cstdint>

namespace te::cuda::bulk {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A barrier that completes a phase on `arrivals` arrivals (one, for load() below) plus the bytes announced with
// them. Then, before any thread waits: __syncthreads().
__device__ __forceinline__ void barrier_init(uint64_t* bar, uint32_t arrivals = 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global src to shared dst; the barrier's
// current phase completes when they have landed. Give dst 128-byte alignment (`extern __shared__ __align__(128)`):
// a dst that is only 16-byte aligned costs the LayerNorm forward 5 %. A refill of a buffer other threads have read
// needs a __syncthreads() between their reads and this call.
__device__ __forceinline__ void load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // earlier generic accesses before the async write
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
#else
  __trap();
#endif
}

// Waits until the barrier's phase of the given parity (0 for the first load, then alternating) has completed.
__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(smem_addr(bar)), "r"(parity)
                 : "memory");
#endif
}

}  // namespace te::cuda::bulk
