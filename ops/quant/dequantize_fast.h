// Fast path of dequantize_cuda for copies whose elements are stored along the output's rows: every row-wise copy,
// and MXFP8's column-wise copy (kept in x's [M, K] order), without RHT, into a contiguous bf16/f16/f32 [M, K] whose
// K is a multiple of 8. The emulated GEMMs of MXFP8 and NVFP4 dequantize both operands on every call, so this is
// on their critical path.
#pragma once
#include "ops/quant/quant_kernels.h"

namespace te {

// Launches and returns true when `a` has the fast path; returns false (nothing launched) otherwise.
bool dequantize_fast_cuda(const DequantArgs& a, void* out, DType out_dtype, const Stream& stream);

}  // namespace te
