// Hopper warpgroup tensor-core instructions (sm_90a): the shared-memory matrix descriptor, the fp8 m64nNk32 MMAs
// (N = 128, 192) with f32 accumulators, their fence / commit / wait, and the register hand-over between warpgroups.
//
// A warpgroup is four consecutive warps (128 threads); wgmma.mma_async runs one 64 × N × K product for all of them,
// reading both operands from shared memory through descriptors. For fp8 both operands must be K-major: here each
// is a tile of rows of 128 bytes (one 128-element K block) laid out by TMA with the 128-byte swizzle, so eight rows
// form a 1024-byte swizzle atom and consecutive atoms are 1024 bytes apart (the descriptor's stride). The k-th
// 32-byte step inside the atom is addressed by moving the start address by 32·k bytes: the hardware applies the
// swizzle to the final address, as TMA did when it wrote the tile.
//
// Accumulator layout of m64nN (PTX's): thread t of the warpgroup (warp w = t / 32, lane l) holds, for register i,
//   row 16·w + l / 4 + 8·((i / 2) % 2),  column 8·(i / 4) + 2·(l % 4) + i % 2.
#pragma once
#include <cstdint>

namespace te::cuda::wgmma {

// Where accumulator i of a thread lies relative to the thread's accumulator 0 in the layout above: acc_row(i) rows
// down (0 or 8), acc_col(i) columns right.
__device__ __forceinline__ constexpr int acc_row(int i) { return 8 * ((i >> 1) & 1); }
__device__ __forceinline__ constexpr int acc_col(int i) { return 8 * (i >> 2) + (i & 1); }

// Descriptor of a K-major tile with the 128-byte swizzle starting at shared address `addr` (1024-byte aligned atoms).
// Its low 14 bits hold the address in 16-byte units, so the descriptor of addr + d (d a multiple of 16, the sum still
// inside shared memory) is the descriptor plus d / 16.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
  constexpr uint64_t kStrideBytes = 1024;       // between 8-row swizzle atoms
  return uint64_t((addr & 0x3FFFF) >> 4)        // start address, 16-byte units
         | (uint64_t(kStrideBytes >> 4) << 32)  // stride byte offset
         | (uint64_t(1) << 62);                 // 128-byte swizzle
}

// Orders this warpgroup's earlier register writes before the next wgmma reads or writes its accumulators.
__device__ __forceinline__ void fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most N committed groups of this warpgroup are in flight.
template <int N>
__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// Gives registers back (producer warpgroups) or takes them (consumers); every thread of the warpgroup executes it.
template <int kRegs>
__device__ __forceinline__ void shrink_registers() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void grow_registers() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// Operand lists: "=f" for a product that overwrites d (nothing flows in, so the compiler neither zeroes nor copies the
// registers first), "+f" for one that adds to it.
#define TE_WGMMA_F8(c, d, i) \
  c(d[i]), c(d[i + 1]), c(d[i + 2]), c(d[i + 3]), c(d[i + 4]), c(d[i + 5]), c(d[i + 6]), c(d[i + 7])
#define TE_WGMMA_F32(c, d, i) \
  TE_WGMMA_F8(c, d, i), TE_WGMMA_F8(c, d, i + 8), TE_WGMMA_F8(c, d, i + 16), TE_WGMMA_F8(c, d, i + 24)
#define TE_WGMMA_R32                                                                                               \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31"
#define TE_WGMMA_R64                                                                             \
  TE_WGMMA_R32                                                                                   \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, " \
  "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define TE_WGMMA_R96                                                                             \
  TE_WGMMA_R64                                                                                   \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, " \
  "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"

// d = a · bᵀ (kAdd false) or d += a · bᵀ for a 64 × 32 fp8 (E4M3) tile of A and an N × 32 tile of B, N = 128 or
// 192, both K-major in shared memory: N / 2 accumulators a thread.
template <int N, bool kAdd>
__device__ __forceinline__ void mma_m64k32(float (&d)[N / 2], uint64_t a_desc, uint64_t b_desc) {
  static_assert(N == 128 || N == 192);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TE_WGMMA_128(C, SCALE_D)                                                                               \
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" TE_WGMMA_R64 "}, %64, %65, " #SCALE_D \
               ", 1, 1;\n"                                                                                     \
               : TE_WGMMA_F32(C, d, 0), TE_WGMMA_F32(C, d, 32)                                                 \
               : "l"(a_desc), "l"(b_desc))
#define TE_WGMMA_192(C, SCALE_D)                                                                               \
  asm volatile("wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 {" TE_WGMMA_R96 "}, %96, %97, " #SCALE_D \
               ", 1, 1;\n"                                                                                     \
               : TE_WGMMA_F32(C, d, 0), TE_WGMMA_F32(C, d, 32), TE_WGMMA_F32(C, d, 64)                         \
               : "l"(a_desc), "l"(b_desc))
  if constexpr (N == 128 && kAdd)
    TE_WGMMA_128("+f", 1);
  else if constexpr (N == 128)
    TE_WGMMA_128("=f", 0);
  else if constexpr (kAdd)
    TE_WGMMA_192("+f", 1);
  else
    TE_WGMMA_192("=f", 0);
#undef TE_WGMMA_128
#undef TE_WGMMA_192
#endif
}

#undef TE_WGMMA_F8
#undef TE_WGMMA_F32
#undef TE_WGMMA_R32
#undef TE_WGMMA_R64
#undef TE_WGMMA_R96

}  // namespace te::cuda::wgmma
