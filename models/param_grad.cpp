#include "models/param_grad.h"

#include "engine/error.h"
#include "models/spec.h"
#include "ops/elementwise/elementwise.h"

namespace te {
namespace {
// True for the step's first contribution to p, which writes the gradient instead of adding to it.
bool take_first_contribution(RankParam& p) {
  TE_CHECK(p.grad.defined(), "parameter " << (p.spec ? p.spec->name : std::string("?"))
                                          << " has no gradient (the model was built for inference)");
  const bool first = p.grad_stale;
  p.grad_stale = false;
  return first;
}
}  // namespace

void begin_grad_step(std::vector<RankParam>& params) {
  for (RankParam& p : params) p.grad_stale = true;
}

void finish_grad_step(std::vector<RankParam>& params, const Stream& stream) {
  for (RankParam& p : params)
    if (p.grad_stale) {
      p.grad.fill(0.0, stream);
      p.grad_stale = false;
    }
}

void add_to_grad(RankParam& p, const Tensor& g, const Stream& stream) {
  if (take_first_contribution(p))
    p.grad.copy_from(g, stream);
  else
    add(p.grad, g, Tensor(), p.grad, stream);
}

void wgrad_into_grad(RankParam& p, const GemmOperand& dy, const GemmOperand& x, GemmContext& gemm_ctx,
                     const Stream& stream) {
  GemmOptions opts;
  opts.out_dtype = DType::f32;
  opts.accumulate = !take_first_contribution(p);
  gemm(dy, x, GemmRole::wgrad, p.grad, opts, gemm_ctx, stream);
}

}  // namespace te
