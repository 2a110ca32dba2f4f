// The fused optimizer step → quantize: eligibility and argument checks; the kernel is optimizer_quantize.cu's.
#include "graph/optimizer_quantize.h"

#include "engine/error.h"
#include "te_config.h"

namespace te {

namespace detail {
void optimizer_quantize_cuda(const ParamSlot& slot, const OptimizerStep& step, const Quantizer::CastTarget& t,
                             const Stream& stream);
}

bool optimizer_quantize_supported(const ParamSlot& slot, const Quantizer& q, const QuantizedTensor& cached) {
#if TE_WITH_CUDA
  const Tensor& p = slot.master;
  if (!p.defined() || !p.device().is_cuda() || p.dim() != 2 || slot.value.defined()) return false;
  auto like_master = [&](const Tensor& t) {  // 16-byte aligned: the kernel's vector loads
    return t.defined() && t.dtype() == DType::f32 && t.shape() == p.shape() && t.is_contiguous() &&
           t.device() == p.device() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  };
  const bool state_ok = like_master(slot.state1) && like_master(slot.state2);  // AdamW's two moments
  const bool copies_ok = q.config().format == QuantFormat::fp8_block_2d && cached.format == QuantFormat::fp8_block_2d &&
                         cached.shape == p.shape() && cached.data_dtype == q.config().data_dtype &&
                         (cached.original_dtype == DType::bf16 || cached.original_dtype == DType::f16) &&
                         cached.usages() != Usage::none && !cached.rowwise_image.defined() &&
                         !cached.columnwise_image.defined();
  return like_master(p) && like_master(slot.grad) && state_ok && copies_ok && p.size(1) % 8 == 0 &&
         quant_tile_grid_fits(p.size(1));
#else
  (void)slot, (void)q, (void)cached;
  return false;
#endif
}

void optimizer_quantize_step(const ParamSlot& slot, const OptimizerStep& step, const Quantizer& q,
                             const QuantizedTensor& cached, const Stream& stream) {
  TE_CHECK(optimizer_quantize_supported(slot, q, cached), "optimizer_quantize_step: the parameter of "
                                                              << shape_str(slot.master.shape())
                                                              << " and its copies have no fused path (check "
                                                                 "optimizer_quantize_supported)");
  TE_CHECK(step.update && step.scalars && step.kind == OptimizerKind::adamw,
           "optimizer_quantize_step: an AdamW step that updates, with its scalars");
#if TE_WITH_CUDA
  detail::optimizer_quantize_cuda(slot, step, q.cast_target(cached), stream);
#else
  (void)stream;
#endif
}

}  // namespace te
