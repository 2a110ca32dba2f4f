// Hopper warpgroup tensor-core instructions (sm_90a): the shared-memory matrix descriptor, the fp8 m64n128k32 and
// m64n192k32 MMAs with f32 accumulators, its fence / commit / wait, and the register hand-over between warpgroups.
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

// Descriptor of a K-major tile with the 128-byte swizzle starting at shared address `addr` (1024-byte aligned atoms).
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

#define TE_WGMMA_D64                                                                                      \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "  \
  "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "  \
  "%62, %63}"
#define TE_WGMMA_D64_OPERANDS(d)                                                                              \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), \
      "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// d (+)= a · bᵀ for a 64 × 32 fp8 tile of A and a 128 × 32 fp8 tile of B, both K-major in shared memory; the first
// product of a sum passes accumulate = false (d is overwritten). kAE5M2 / kBE5M2 pick E5M2 for that operand.
template <bool kAE5M2, bool kBE5M2>
__device__ __forceinline__ void mma_m64n128k32(float (&d)[64], uint64_t a_desc, uint64_t b_desc, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TE_WGMMA_FP8(AT, BT)                                                                                \
  asm volatile(                                                                                             \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                          \
      "wgmma.mma_async.sync.aligned.m64n128k32.f32." AT "." BT " " TE_WGMMA_D64 ", %64, %65, p, 1, 1;\n}\n" \
      : TE_WGMMA_D64_OPERANDS(d)                                                                            \
      : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)))
  if constexpr (kAE5M2)
    TE_WGMMA_FP8("e5m2", "e4m3");
  else if constexpr (kBE5M2)
    TE_WGMMA_FP8("e4m3", "e5m2");
  else
    TE_WGMMA_FP8("e4m3", "e4m3");
#undef TE_WGMMA_FP8
#endif
}

#define TE_WGMMA_D96                                                                                 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "  \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "  \
  "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, "  \
  "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"
#define TE_WGMMA_D96_OPERANDS(d)                                                                              \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), \
      "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), \
      "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), \
      "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), \
      "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), \
      "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])

// The same with a 192-row tile of B (E4M3 × E4M3 only): 96 accumulators a thread, in the same layout.
__device__ __forceinline__ void mma_m64n192k32(float (&d)[96], uint64_t a_desc, uint64_t b_desc, bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 " TE_WGMMA_D96 ", %96, %97, p, 1, 1;\n}\n"
      : TE_WGMMA_D96_OPERANDS(d)
      : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)));
#endif
}

#undef TE_WGMMA_D64
#undef TE_WGMMA_D64_OPERANDS
#undef TE_WGMMA_D96
#undef TE_WGMMA_D96_OPERANDS

}  // namespace te::cuda::wgmma
