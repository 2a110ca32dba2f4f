// Public entry points of attention and rotary embedding: checks, contiguous inputs, then the CPU reference or, on
// the GPU, cuDNN's fused attention or the engine's own CUDA kernels.
#include "ops/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "engine/error.h"
#include "ops/attention/attention_impl.h"
#include "ops/attention/cudnn_calls.h"
#include "ops/attention/rope.h"
#include "te_config.h"
#if TE_WITH_CUDA
#include "ops/attention/attention_cudnn.h"
#endif

namespace te {
namespace {

std::string attention_desc(const Tensor& t) { return t.defined() ? t.str() : std::string("undefined"); }

// A tensor the caller allocated for a result: contiguous, of the shape and dtype expected, on x's device.
void check_attention_result(const Tensor& t, const Shape& shape, DType dtype, const Tensor& like, const char* op,
                  const char* what) {
  TE_CHECK_HINT(t.defined() && t.shape() == shape && t.dtype() == dtype && t.is_contiguous() &&
                    t.device() == like.device(),
                op << ": " << what << " must be a contiguous " << shape_str(shape) << " " << dtype_name(dtype)
                   << " tensor on " << like.device().str() << "; got " << attention_desc(t),
                "allocate it with Tensor::empty");
}

void check_attention_qkv(const AttentionLayout& l, const Tensor& qkv, const char* op) {
  TE_CHECK_HINT(qkv.defined() && qkv.dim() == 2 && is_high_precision(qkv.dtype()),
                op << ": qkv must be a 2-D f32/bf16/f16 tensor; got " << attention_desc(qkv),
                "cast it with te::cast first");
  check_attention_layout(l, qkv.size(0), qkv.size(1));
#if !TE_WITH_CUDA
  TE_CHECK_HINT(qkv.device().is_cpu(), op << ": this build has no CUDA; got " << qkv.str(),
                "rebuild with -Dcuda=enabled or run the model on the CPU (run.device: cpu)");
#endif
}

// The CUDA kernels' limits, for the attention itself (rope takes every dtype on both devices).
void check_cuda_attention(const AttentionLayout& l, const Tensor& qkv, const char* op) {
  TE_CHECK_HINT(!qkv.device().is_cuda() || cuda_attention_supports(qkv.dtype(), l.head_dim),
                op << ": the CUDA attention takes bf16/f16 with head_dim ≤ " << kCudaAttentionMaxHeadDim << "; got "
                   << dtype_name(qkv.dtype()) << ", head_dim " << l.head_dim,
                "use model dtype bf16 or f16 (and a head_dim of at most " << kCudaAttentionMaxHeadDim
                                                                          << "), or run on the CPU");
}

float attention_scale(const AttentionLayout& l, const AttentionOptions& o) {
  return o.scale > 0.f ? o.scale : 1.0f / std::sqrt(static_cast<float>(l.head_dim));
}

thread_local AttentionKernels last_forward_kernels = AttentionKernels::own;
thread_local AttentionKernels last_backward_kernels = AttentionKernels::own;

#if TE_WITH_CUDA
// Whether to try cuDNN for this case; forcing it where it cannot apply is an error.
bool try_cudnn(DType t, int64_t head_dim, const char* op) {
  const std::optional<AttentionKernels> forced = forced_attention_kernels();
  if (forced == AttentionKernels::own) return false;
  const bool supported = cudnn_attention_supports(t, head_dim);
  TE_CHECK_HINT(supported || forced != AttentionKernels::cudnn,
                op << ": TEENGINE_ATTENTION_KERNELS=cudnn, but cuDNN's fused attention takes bf16/f16 with a head_dim "
                      "that is a multiple of 8 up to "
                   << kCudaAttentionMaxHeadDim << "; got " << dtype_name(t) << ", head_dim " << head_dim,
                "unset TEENGINE_ATTENTION_KERNELS to run the engine's own kernels here");
  return supported;
}

// After cuDNN declined a case: fine unless it was forced.
void check_cudnn_not_forced(const std::string& why_not, const char* op) {
  TE_CHECK_HINT(forced_attention_kernels() != AttentionKernels::cudnn,
                op << ": TEENGINE_ATTENTION_KERNELS=cudnn, but cuDNN cannot run this case: " << why_not,
                "unset TEENGINE_ATTENTION_KERNELS to run the engine's own kernels here");
}
#endif

}  // namespace

const char* attention_kernels_name(AttentionKernels k) { return k == AttentionKernels::cudnn ? "cudnn" : "own"; }

std::optional<AttentionKernels> forced_attention_kernels() {
  const char* v = std::getenv("TEENGINE_ATTENTION_KERNELS");
  if (v == nullptr || *v == '\0') return std::nullopt;
  const std::string s(v);
  if (s == "cudnn") return AttentionKernels::cudnn;
  if (s == "own") return AttentionKernels::own;
  TE_THROW("TEENGINE_ATTENTION_KERNELS='" << s << "' names no attention kernels",
           "use cudnn or own, or unset it (cuDNN where it supports the case)");
}

int64_t attention_backward_workspace_bytes(Device device, const AttentionLayout& l, int64_t tokens, DType t,
                                           bool deterministic) {
  if (device.is_cpu() || !cudnn_attention_supports(t, l.head_dim) ||
      forced_attention_kernels() == AttentionKernels::own)
    return 0;
  const int64_t esize = dtype_info(t).bits / 8;
  const int64_t per_call = std::min(tokens / l.seq, cudnn_attention::sequences_per_call(l, esize, true, deterministic));
  return per_call * cudnn_attention::backward_workspace_per_sequence(l, esize, deterministic);
}

AttentionKernels last_attention_kernels(bool backward) {
  return backward ? last_backward_kernels : last_forward_kernels;
}

std::string attention_kernels(Device device, DType t, int64_t head_dim) {
  if (device.is_cpu()) return "CPU reference (row-independent f32 GEMMs over blocks of 64 query rows)";
  if (!cuda_attention_supports(t, head_dim))
    return "none: the CUDA kernels take bf16/f16 with head_dim <= " + std::to_string(kCudaAttentionMaxHeadDim);
  const std::string own = cuda_attention_register_resident(t, head_dim)
                              ? "CUDA, register-resident tensor-core tiles (mma.m16n8k16, flash-attention style, "
                                "deterministic)"
                              : "CUDA, shared-memory tensor-core tiles (WMMA, flash-attention style, deterministic)";
  const std::optional<AttentionKernels> forced = forced_attention_kernels();
  if (!cudnn_attention_supports(t, head_dim) || forced == AttentionKernels::own) return own;
  const std::string cudnn =
      "cuDNN fused flash attention (backend graph API; backward deterministic unless attention.deterministic is "
      "false)";
  if (forced == AttentionKernels::cudnn) return cudnn;
  return cudnn + "; where cuDNN builds no plan: " + own;
}

void check_attention_layout(const AttentionLayout& l, int64_t tokens, int64_t qkv_cols) {
  TE_CHECK(l.heads >= 1 && l.kv_heads >= 1 && l.head_dim >= 1 && l.seq >= 1 && l.heads % l.kv_heads == 0,
           "attention: heads " << l.heads << ", kv_heads " << l.kv_heads << ", head_dim " << l.head_dim << ", seq "
                               << l.seq << " (all positive, kv_heads dividing heads)");
  TE_CHECK_HINT(qkv_cols == l.qkv_cols(),
                "attention: a QKV row of " << qkv_cols << " columns, but " << l.heads << " query and " << l.kv_heads
                                           << " key/value heads of " << l.head_dim << " need " << l.qkv_cols(),
                "the QKV projection's out must be (heads + 2 · kv_heads) · head_dim");
  TE_CHECK_HINT(tokens % l.seq == 0,
                "attention: " << tokens << " tokens are not whole sequences of " << l.seq,
                "give a token count that is a multiple of the sequence length");
}

void attention_forward(const AttentionLayout& l, const AttentionOptions& o, const Tensor& qkv, Tensor& out,
                       Tensor& lse, const Stream& stream) {
  check_attention_qkv(l, qkv, "attention_forward");
  check_cuda_attention(l, qkv, "attention_forward");
  const int64_t T = qkv.size(0);
  check_attention_result(out, {T, l.out_cols()}, qkv.dtype(), qkv, "attention_forward", "out");
  check_attention_result(lse, {T / l.seq, l.heads, l.seq}, DType::f32, qkv, "attention_forward", "lse");
  if (T == 0) return;
  const Tensor x = qkv.contiguous(stream);
  auto* stats = static_cast<float*>(lse.data_ptr());
  if (x.device().is_cuda()) {
#if TE_WITH_CUDA
    const float scale = attention_scale(l, o);
    std::string why_not;
    if (try_cudnn(x.dtype(), l.head_dim, "attention_forward")) {
      if (cudnn_attention::attention_forward(l, o.causal, scale, T, x.data_ptr(), x.dtype(), out.data_ptr(), stats,
                                             x.device(), stream, &why_not)) {
        last_forward_kernels = AttentionKernels::cudnn;
        return;
      }
      check_cudnn_not_forced(why_not, "attention_forward");
    }
    cuda::attention_forward(l, o.causal, scale, T, x.data_ptr(), x.dtype(), out.data_ptr(), stats, stream);
    last_forward_kernels = AttentionKernels::own;
#endif
    return;
  }
  cpu::attention_forward(l, o.causal, attention_scale(l, o), T, x.data_ptr(), x.dtype(), out.data_ptr(), stats);
}

void attention_backward(const AttentionLayout& l, const AttentionOptions& o, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& lse, Tensor& dqkv, const Stream& stream) {
  check_attention_qkv(l, qkv, "attention_backward");
  check_cuda_attention(l, qkv, "attention_backward");
  const int64_t T = qkv.size(0);
  const Shape oshape{T, l.out_cols()};
  for (const auto& [t, what] : {std::pair<const Tensor*, const char*>{&dout, "dout"}, {&out, "out"}})
    TE_CHECK_HINT(t->defined() && t->shape() == oshape && t->dtype() == qkv.dtype() && t->device() == qkv.device(),
                  "attention_backward: " << what << " must be " << shape_str(oshape) << " "
                                         << dtype_name(qkv.dtype()) << " on " << qkv.device().str() << "; got "
                                         << attention_desc(*t),
                  "pass the forward's output and its gradient in the model dtype");
  TE_CHECK(lse.defined() && lse.shape() == Shape({T / l.seq, l.heads, l.seq}) && lse.dtype() == DType::f32,
           "attention_backward: lse must be the forward's [" << T / l.seq << ", " << l.heads << ", " << l.seq
                                                             << "] f32 statistics; got " << attention_desc(lse));
  check_attention_result(dqkv, qkv.shape(), qkv.dtype(), qkv, "attention_backward", "dqkv");
  if (T == 0) return;
  const Tensor x = qkv.contiguous(stream), dy = dout.contiguous(stream), y = out.contiguous(stream),
               s = lse.contiguous(stream);
  if (x.device().is_cuda()) {
#if TE_WITH_CUDA
    const float scale = attention_scale(l, o);
    const auto* stats = static_cast<const float*>(s.data_ptr());
    std::string why_not;
    if (try_cudnn(x.dtype(), l.head_dim, "attention_backward")) {
      if (cudnn_attention::attention_backward(l, o.causal, scale, o.deterministic, T, dy.data_ptr(), x.data_ptr(),
                                              y.data_ptr(), stats, x.dtype(), dqkv.data_ptr(), x.device(), stream,
                                              &why_not)) {
        last_backward_kernels = AttentionKernels::cudnn;
        return;
      }
      check_cudnn_not_forced(why_not, "attention_backward");
    }
    Tensor delta = Tensor::empty(lse.shape(), DType::f32, x.device(), stream);  // Σ dO · O per row and head
    cuda::attention_backward(l, o.causal, scale, T, dy.data_ptr(), x.data_ptr(), y.data_ptr(), stats, x.dtype(),
                             dqkv.data_ptr(), static_cast<float*>(delta.data_ptr()), stream);
    last_backward_kernels = AttentionKernels::own;
#endif
    return;
  }
  cpu::attention_backward(l, o.causal, attention_scale(l, o), T, dy.data_ptr(), x.data_ptr(), y.data_ptr(),
                          static_cast<const float*>(s.data_ptr()), x.dtype(), dqkv.data_ptr());
}

void rope_apply(const AttentionLayout& l, double base, bool inverse, const Tensor& qkv, Tensor& out,
                const Stream& stream) {
  check_attention_qkv(l, qkv, "rope_apply");
  TE_CHECK_HINT(l.head_dim % 2 == 0 && base > 1.0,
                "rope_apply: rotary embedding needs an even head_dim and a base above 1; got head_dim "
                    << l.head_dim << ", base " << base,
                "use an even head_dim (e.g. 64 or 128) and the usual base 10000");
  check_attention_result(out, qkv.shape(), qkv.dtype(), qkv, "rope_apply", "out");
  if (qkv.size(0) == 0) return;
  const Tensor x = qkv.contiguous(stream);
  if (x.device().is_cuda()) {
#if TE_WITH_CUDA
    cuda::rope_apply(l, static_cast<float>(base), inverse, qkv.size(0), x.data_ptr(), x.dtype(), out.data_ptr(),
                     stream);
#endif
    return;
  }
  cpu::rope_apply(l, static_cast<float>(base), inverse, qkv.size(0), x.data_ptr(), x.dtype(), out.data_ptr());
}

}  // namespace te
