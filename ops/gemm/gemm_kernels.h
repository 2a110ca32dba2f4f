// Small CUDA kernels around the cuBLASLt call (CUDA builds only): the bias add for configurations whose epilogue
// cuBLASLt does not offer, and the device-side alpha of the NVFP4 emulation.
#pragma once
#include <cstdint>

#include "engine/dtype.h"
#include "engine/stream.h"

namespace te::cuda {
// out[r, c] += bias[c] for r < rows, c < cols; out row stride `ld` elements (last stride 1).
void gemm_add_bias(void* out, DType out_dtype, int64_t rows, int64_t cols, int64_t ld, const void* bias,
                   DType bias_dtype, const Stream& stream);
// alpha_beta[0] = alpha · S_dec(amax_a) · S_dec(amax_b) (a null amax contributes 1), alpha_beta[1] = beta.
// S_dec = 1 / S_enc of docs/NUMERICS.md §2 (NVFP4), so the bf16 GEMM of the block-dequantized values times
// alpha equals the GEMM of the fully dequantized values.
void gemm_nvfp4_alpha(const float* amax_a, const float* amax_b, float alpha, float beta, float* alpha_beta,
                      const Stream& stream);
}  // namespace te::cuda
