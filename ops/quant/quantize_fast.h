// Specialised CUDA quantize kernels for the per-step formats (per-tensor fp8, FP8 block 1D, MXFP8) on rows that
// allow 16-byte loads; quantize_cuda tries them first and falls back to its generic tile kernel.
#pragma once
#include "ops/quant/quant_kernels.h"

namespace te {

// Can the row-wise-only fast path quantize x (and so fuse a QuantPreAct into the load)?
bool fast_rowwise_eligible(const QuantInput& x, const QuantParams& p);
// Launches and returns true when (x, p) has a fast path; returns false (nothing launched) otherwise.
bool quantize_fast_cuda(const QuantInput& x, const QuantParams& p, const QuantOutputs& out, const Stream& stream);

}  // namespace te
