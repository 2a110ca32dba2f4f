// The row-wise NVFP4 1D fast quantize kernel (quantize_nvfp4.cu); quantize_cuda tries it before the generic tile
// kernel, which then writes only the column-wise copy where one is asked for.
#pragma once
#include "ops/quant/quant_kernels.h"

namespace te {

// Launches and returns true for NVFP4 1D with a row-wise copy of 16-bit rows that allow 16-byte loads, K a multiple
// of 16 (whole blocks) and the amax already computed; returns false (nothing launched) otherwise.
bool quantize_nvfp4_rowwise_cuda(const QuantInput& x, const QuantParams& p, const QuantOutputs& out,
                                 const Stream& stream);

}  // namespace te
