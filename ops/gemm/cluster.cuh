// Thread-block clusters (sm_90+) for a producer/consumer ring shared by several CTAs: a CTA's rank, a cluster-wide
// barrier, an arrival on a barrier in another CTA's shared memory, and the TMA load that lands the same box in the
// shared memory of several CTAs at once (each destination's barrier at the same offset receives the bytes).
#pragma once
#include <cuda.h>

#include <cstdint>

#include "ops/elementwise/bulk_copy.cuh"

namespace te::cuda::cluster {

__device__ __forceinline__ uint32_t rank() {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}

// Every thread of every CTA of the cluster: earlier shared-memory writes (barrier initialisation included) are
// visible cluster-wide after it.
__device__ __forceinline__ void sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// One arrival on the barrier at `bar`'s offset in the shared memory of CTA `cta` of this cluster (this CTA too).
// CTA-scope semantics: it orders nothing but the arrival itself (a cluster-scope release costs a memory fence per
// call), which suffices for "this CTA has finished reading a stage" once its reads have completed.
__device__ __forceinline__ void arrive(uint64_t* bar, uint32_t cta) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t remote = 0;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bulk::smem_addr(bar)), "r"(cta));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
#endif
}

// The box at (column x, row y) of `map` into `dst` of every CTA in `cta_mask`; each one's barrier at `bar`'s offset
// receives the bytes that land in it.
__device__ __forceinline__ void load_2d_multicast(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar,
                                                  uint16_t cta_mask, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5, %6;" ::"r"(bulk::smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bulk::smem_addr(bar)), "h"(cta_mask), "l"(policy)
      : "memory");
#else
  __trap();
#endif
}

}  // namespace te::cuda::cluster
