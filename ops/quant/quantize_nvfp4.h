// The NVFP4 1D fast quantize kernels (quantize_nvfp4.cu); quantize_cuda tries them before the generic tile kernel.
#pragma once
#include "ops/quant/quant_kernels.h"

namespace te {

// Launches and returns true for NVFP4 1D with a row-wise copy of 16-bit rows that allow 16-byte loads, K a multiple
// of 16 (whole blocks) and the amax already computed; returns false (nothing launched) otherwise. A fused
// activation (p.pre_act, row-wise only, dense input; its amax from quant_amax_cuda with the same p) must take this
// path: it throws when it cannot.
bool quantize_nvfp4_rowwise_cuda(const QuantInput& x, const QuantParams& p, const QuantOutputs& out,
                                 const Stream& stream);

// Launches and returns true for NVFP4 1D asked for the column-wise copy, from 16-bit rows that allow 16-byte loads,
// K a multiple of 8, the column-wise amax already computed; when the row-wise copy is asked too, it is written from
// the same tiles (the row-wise conditions above must hold as well). Returns false (nothing launched) otherwise.
bool quantize_nvfp4_columnwise_cuda(const QuantInput& x, const QuantParams& p, const QuantOutputs& out,
                                    const Stream& stream);

// The amaxes NVFP4 1D with the Hadamard transform scales by, in one pass over 16-bit x (the column-wise kernel's
// input conditions): amax[0] folds max|x|, col_amax[0] max|RHT(xᵀ)| over full 16-token groups (raw values in a
// shorter last group), as quant_amax_cuda defines them. Returns false (nothing launched) for other inputs.
bool nvfp4_rht_amax_cuda(const QuantInput& x, float* amax, float* col_amax, const Stream& stream);

}  // namespace te
