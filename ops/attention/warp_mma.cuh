// Warp-level tensor-core building blocks (sm_80 and later) for the attention kernels: asynchronous 16-byte copies
// into shared memory, ldmatrix fragment loads, and the m16n8k16 bf16/f16 MMA with f32 accumulators, plus the two
// warp GEMM shapes flash attention needs. Fragment layouts are PTX's for mma.m16n8k16: a thread holds
//   C/D  c[0], c[1] at row lane/4,     columns 2·(lane%4) + {0, 1};  c[2], c[3] at row lane/4 + 8
//   A    a[0] rows 0-7 / k 0-7, a[1] rows 8-15 / k 0-7, a[2] rows 0-7 / k 8-15, a[3] rows 8-15 / k 8-15
// so the accumulators of two adjacent 8-column tiles are, rounded, the A fragment of a 16-wide k step: what lets
// probabilities go from one product into the next without leaving registers.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace te::cuda::warp_mma {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared without passing through registers; `valid` false writes zeros and reads nothing.
__device__ __forceinline__ void copy16_async(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8×8 matrices of 16-bit elements; lane i gives the row address of matrix i / 8, row i % 8.
__device__ __forceinline__ void load_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
// The same, each matrix transposed on the way.
__device__ __forceinline__ void load_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += a · b for one 16×8 tile over k = 16.
template <class T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __half>);
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// (lo, hi) rounded to nearest even into one register, lo in the low half.
template <class T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// The A fragment of rows [0, 16) × k [k0, k0 + 16) of a row-major shared tile (`a` at the warp's first row).
template <class T>
__device__ __forceinline__ void load_a(uint32_t (&f)[4], const T* a, int ld, int k0) {
  const int lane = threadIdx.x % 32;
  load_x4(f, a + (lane % 16) * ld + k0 + (lane / 16) * 8);
}

// acc[N/8] += a · Bᵀ for one 16-wide k step at k0: B's N rows from a row-major shared tile.
template <class T, int N>
__device__ __forceinline__ void abt_step(float (&acc)[N / 8][4], const uint32_t (&a)[4], const T* b, int ld,
                                         int k0) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n0 = 0; n0 < N; n0 += 16) {
    uint32_t bf[4];
    load_x4(bf, b + (n0 + lane % 8 + (lane / 16) * 8) * ld + k0 + ((lane / 8) % 2) * 8);
    mma<T>(acc[n0 / 8], a, bf[0], bf[1]);
    mma<T>(acc[n0 / 8 + 1], a, bf[2], bf[3]);
  }
}

// acc[N/8] += A · Bᵀ over K: A the warp's 16 rows of a shared tile, B N rows of another (both row-major, k
// contiguous: Q·Kᵀ, dO·Vᵀ, K·Qᵀ).
template <class T, int N, int K>
__device__ __forceinline__ void gemm_abt(float (&acc)[N / 8][4], const T* a, const T* b, int ld) {
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += 16) {
    uint32_t af[4];
    load_a(af, a, ld, k0);
    abt_step<T, N>(acc, af, b, ld, k0);
  }
}

// The same with A's fragments already in registers (K/16 of them).
template <class T, int N, int K>
__device__ __forceinline__ void gemm_abt(float (&acc)[N / 8][4], const uint32_t (&af)[K / 16][4], const T* b,
                                         int ld) {
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += 16) abt_step<T, N>(acc, af[k0 / 16], b, ld, k0);
}

// acc[N/8] += P · B: P [16 × K] as A fragments in registers, B a row-major shared tile of K rows × N columns
// (P·V, dS·K, Pᵀ·dO, dSᵀ·Q).
template <class T, int N, int K>
__device__ __forceinline__ void gemm_pb(float (&acc)[N / 8][4], const uint32_t (&p)[K / 16][4], const T* b,
                                        int ld) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += 16)
#pragma unroll
    for (int n0 = 0; n0 < N; n0 += 16) {
      uint32_t bf[4];
      load_x4_trans(bf, b + (k0 + lane % 8 + ((lane / 8) % 2) * 8) * ld + n0 + (lane / 16) * 8);
      mma<T>(acc[n0 / 8], p[k0 / 16], bf[0], bf[1]);
      mma<T>(acc[n0 / 8 + 1], p[k0 / 16], bf[2], bf[3]);
    }
}

// Accumulators of N columns, rounded, as the A fragments of a k = N product.
template <class T, int N>
__device__ __forceinline__ void to_a(uint32_t (&p)[N / 16][4], const float (&c)[N / 8][4]) {
#pragma unroll
  for (int j = 0; j < N / 16; ++j) {
    p[j][0] = pack<T>(c[2 * j][0], c[2 * j][1]);
    p[j][1] = pack<T>(c[2 * j][2], c[2 * j][3]);
    p[j][2] = pack<T>(c[2 * j + 1][0], c[2 * j + 1][1]);
    p[j][3] = pack<T>(c[2 * j + 1][2], c[2 * j + 1][3]);
  }
}

}  // namespace te::cuda::warp_mma
