// One weight's optimizer step that also writes the weight's next quantized copies, in one pass: masters, gradient
// and state are read once, and the copies the GEMMs read are written from the updated masters — rounded to the model
// dtype, then quantized, so the bytes equal quantizing the model-dtype copy the plain step writes. A training step
// under FP8 block scaling does this for each GEMM weight instead of writing a model-dtype copy for the next forward
// to quantize: the copy's write and re-read (4 bytes a parameter) and one quantize launch per weight are gone.
#pragma once
#include "graph/optimizer.h"
#include "ops/quant/quantizer.h"

namespace te {

// Whether optimizer_quantize_step takes this slot: on a GPU, f32 master, gradient and AdamW's two moments, contiguous
// and 16-byte aligned, no model-dtype copy in the slot; `cached` holds copies `q` (FP8 128x128 blocks) made of a 2-D
// 16-bit tensor of the master's shape whose last dim is a multiple of 8, and no images.
bool optimizer_quantize_supported(const ParamSlot& slot, const Quantizer& q, const QuantizedTensor& cached);

// The AdamW step of `slot` with `step`'s scalars and skip flag (`step.update` must be true), writing every copy
// `cached` holds in place. A step skipped on the device keeps masters and state, zeroes the gradient and writes the
// copies of the unchanged masters again (the same bytes).
void optimizer_quantize_step(const ParamSlot& slot, const OptimizerStep& step, const Quantizer& q,
                             const QuantizedTensor& cached, const Stream& stream);

}  // namespace te
