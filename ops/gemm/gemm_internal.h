// Shared between the GEMM front end (gemm.cpp), the CPU path (gemm_ref.cpp) and the CUDA path (gemm_cuda.cpp and
// the files of cublaslt_call.h). Not a public header.
#pragma once
#include "ops/gemm/gemm.h"
#include "te_config.h"

namespace te::detail {

// What a role needs from each operand: a = x/dy, b = W/x (see gemm.h).
struct RoleUsages {
  Usage a, b;
};
constexpr RoleUsages role_usages(GemmRole r) {
  switch (r) {
    case GemmRole::fprop: return {Usage::rowwise, Usage::rowwise};
    case GemmRole::dgrad: return {Usage::rowwise, Usage::columnwise};
    case GemmRole::wgrad: return {Usage::columnwise, Usage::columnwise};
  }
  return {Usage::rowwise, Usage::rowwise};
}

// wgrad of two tensors whose column-wise copies both carry NVFP4's random Hadamard transform along M: the
// transform is orthogonal and the same for both, so it cancels in dyᵀ·x and the GEMM reads the stored
// (transformed) values directly, as TE does; they are exact in bf16, the un-transformed ones are not.
inline bool rht_cancels(const GemmOperand& a, const GemmOperand& b, GemmRole role) {
  return role == GemmRole::wgrad && a.is_quantized() && b.is_quantized() && a.quantized().columnwise_rht &&
         b.quantized().columnwise_rht;
}

// The image of op's copy `u` a call can multiply in `dtype`, or null: a Hadamard-transformed copy's image holds the
// stored values, which only a call whose transforms cancel (keep_rht) reads.
inline const Tensor* usable_image(const GemmOperand& op, Usage u, bool keep_rht, DType dtype) {
  const Tensor& image = op.image(u);
  if (!image.defined() || image.dtype() != dtype || !image.is_contiguous()) return nullptr;
  if (u == Usage::columnwise && op.quantized().columnwise_rht && !keep_rht) return nullptr;
  return &image;
}

// The 2D view [rows, cols] of a tensor (leading dims flattened); copies only when strides forbid a view.
Tensor as_2d(const Tensor& t, const Stream& stream);

// Validated problem: out [P, Q] = alpha · A' · B' with A', B' given by the role (gemm.h).
struct GemmShape {
  int64_t M, N, K;  // model dims of the role (fprop/dgrad/wgrad naming)
  int64_t P, Q;     // output rows and cols
};
GemmShape gemm_shape(const GemmOperand& a, const GemmOperand& b, GemmRole role);

void gemm_cpu(const GemmOperand& a, const GemmOperand& b, GemmRole role, Tensor& out, const GemmOptions& opts,
              GemmContext& ctx);
#if TE_WITH_CUDA
// Returns whether the kernel added opts.residual itself (otherwise gemm() adds it after).
bool gemm_cuda(const GemmOperand& a, const GemmOperand& b, GemmRole role, Tensor& out, const GemmOptions& opts,
               GemmContext& ctx, const Stream& stream);
#endif

}  // namespace te::detail
