// The row-wise-only fast quantize kernel (per-tensor fp8, FP8 block 1x128, MXFP8 1x32) with the optional fused
// activation; quantize_fast_cuda launches it once it has checked eligibility.
#pragma once
#include "ops/quant/quant_kernels.h"

namespace te {

// x: 16-byte-aligned rows (stride_k 1, K % 8 == 0), out.row.data 8-byte aligned; p.format one of the three above.
void quantize_rowwise_cuda(const QuantInput& x, const QuantParams& p, const QuantOutputs& out, const Stream& stream);

}  // namespace te
