// The CPU GEMM of the forward and of dgrad, row-independent: C[M, P] = A[M, L] · B, where every element of C is one
// chain of fused multiply-adds over l = 0 … L-1 in order, started from zero. A row's result therefore depends on that
// row of A and on B alone, never on M, on the row's position or on the other rows, so a request batched with others
// gets the same bytes as run alone. BLAS libraries give no such promise: OpenBLAS picks its micro-kernel (and so
// the rounding of a row's sums) by the row's place in its tiling, which depends on M. Each fma rounds once, so the
// AVX-512, AVX2 and portable kernels give identical results too.
#pragma once
#include <cstdint>

namespace te::detail {

enum class RowGemmIsa { automatic, avx512, avx2, portable };

// `b_transposed`: B is given as Bᵀ [P, L] row-major (fprop: x · Wᵀ with W [N, K]); else B is [L, P] (dgrad: dy · W).
// C [M, P] row-major is overwritten. `isa` forces a kernel (tests); a forced one the CPU lacks falls back to portable.
void row_gemm(const float* a, const float* b, bool b_transposed, int64_t m, int64_t p, int64_t l, float* c,
              RowGemmIsa isa = RowGemmIsa::automatic);

}  // namespace te::detail
