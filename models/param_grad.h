// Parameter gradients over one training step without zeroing them first. begin_grad_step marks every gradient
// stale; the step's first contribution to a gradient then writes it — the wgrad GEMM with beta = 0, which does not
// read the old values either, a bias or norm gradient copied — and later contributions in the same step add to it;
// finish_grad_step zeroes the gradients nothing wrote. Every place that produces a gradient goes through
// add_to_grad or wgrad_into_grad, the only readers of RankParam::grad_stale.
//
// Same bits as zero-then-accumulate: writing x stores x, accumulating stores 0 + x (cuBLASLt: alpha·AB + 1·0), and
// 0 + x == x for every x but −0 — which no gradient here produces, as every reduction behind one (GEMM, bias and
// norm column sums) starts from +0.
#pragma once
#include <vector>

#include "models/rank_context.h"
#include "ops/gemm/gemm.h"

namespace te {

void begin_grad_step(std::vector<RankParam>& params);
// After the backward (or instead of it, when the loss is not finite): what received no contribution becomes 0.
void finish_grad_step(std::vector<RankParam>& params, const Stream& stream);

// p.grad (+)= g, g f32 in p's local shape.
void add_to_grad(RankParam& p, const Tensor& g, const Stream& stream);
// p.grad (+)= dyᵀ · x: the wgrad GEMM (gemm.h) into the f32 gradient.
void wgrad_into_grad(RankParam& p, const GemmOperand& dy, const GemmOperand& x, GemmContext& gemm_ctx,
                     const Stream& stream);

}  // namespace te
