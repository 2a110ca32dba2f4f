// Scaled-dot-product attention over a fused QKV projection, forward and backward: the CPU reference (any float
// dtype) and, for bf16/f16 with head_dim ≤ 128, on the GPU either cuDNN 9's fused flash attention
// (attention_cudnn.cpp; head_dim a multiple of 8) or the engine's own CUDA kernels of attention.cu (flash-attention
// style tiles on the tensor cores; its numerics are described there). Rotary embedding: ops/attention/rope.h.
//
// Tokens are batch-major: token t is position t % seq of sequence t / seq, so T = batch × seq. The QKV row of a
// token is TransformerEngine's interleaved layout (MultiheadAttention's default, which a tensor-parallel rank can
// slice by contiguous rows): for each key/value group g of `kv_heads`, the r = heads / kv_heads query heads of the
// group, then the group's key, then its value, each `head_dim` wide:
//
//   qkv [T, kv_heads · (r + 2) · head_dim]   query head h reads group h / r
//   out [T, heads · head_dim]                head h at columns [h · head_dim, (h + 1) · head_dim)
//   lse [batch, heads, seq] f32              log Σ_j exp(score_ij): the softmax statistics the backward reads
//
// `kinds_apart` is the same row with its heads sorted by kind: every query head, then every key, then every value.
// The model stores its grouped-query QKV weight that way on each rank (models/parameters.cpp), so that each kind's
// heads are one stride apart, which is what cuDNN's fused attention reads in place; checkpoints keep the interleaved
// order.
//
// Scores are scale · q_i · k_j (f32), masked to j ≤ i when causal; the softmax subtracts the row's maximum and
// divides by the row's sum; out is Σ_j softmax_ij v_j (f32) rounded once to out's dtype. The backward recomputes
// the probabilities from lse (flash-attention style) and accumulates dq, dk, dv in f32 (a group's key/value
// gradients summed over blocks of query rows, then over its query heads, in order), rounded once into dqkv. Every
// product is an f32 GEMM whose elements are single fused-multiply-add chains in a fixed order (ops/gemm/row_gemm.h):
// deterministic, independent of the thread count, and the same bytes for a head whichever tensor-parallel rank
// computes it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "engine/stream.h"
#include "engine/tensor.h"

namespace te {

struct AttentionLayout {
  int64_t heads = 1;     // query heads
  int64_t kv_heads = 1;  // key/value heads (grouped-query attention when fewer); divides heads
  int64_t head_dim = 1;
  int64_t seq = 1;       // tokens per sequence
  bool kinds_apart = false;  // query heads, then keys, then values (rather than interleaved per group)
  int64_t qkv_cols() const { return kv_heads * (heads / kv_heads + 2) * head_dim; }
  int64_t out_cols() const { return heads * head_dim; }
  // Column of query head h's first element in a QKV row; of group g's key and value.
  int64_t q_col(int64_t h) const {
    return kinds_apart ? h * head_dim : ((h / group()) * (group() + 2) + h % group()) * head_dim;
  }
  int64_t k_col(int64_t g) const {
    return kinds_apart ? (heads + g) * head_dim : (g * (group() + 2) + group()) * head_dim;
  }
  int64_t v_col(int64_t g) const { return kinds_apart ? (heads + kv_heads + g) * head_dim : k_col(g) + head_dim; }
  int64_t group() const { return heads / kv_heads; }
  // Several key/value groups of several query heads each: the layouts whose interleaved query heads are not one
  // stride apart.
  bool grouped_query() const { return kv_heads > 1 && kv_heads < heads; }
};

struct AttentionOptions {
  bool causal = true;
  float scale = 0.0f;  // softmax scale; 0: 1 / sqrt(head_dim)
  // false lets cuDNN's backward accumulate dq across blocks of keys with f32 atomics: faster, a workspace of
  // T · heads · head_dim f32 instead of heads · seq² per sequence, but dq's last bits may change from run to run.
  // The CPU reference and the own kernels are deterministic either way.
  bool deterministic = true;
};

// Head dims the CUDA kernels take (tiles of 32, 64 or 128, zero-padded above head_dim).
constexpr int64_t kCudaAttentionMaxHeadDim = 128;
// Whether the CUDA attention runs this dtype and head_dim; the CPU reference runs every f32/bf16/f16 layout.
inline bool cuda_attention_supports(DType t, int64_t head_dim) {
  return (t == DType::bf16 || t == DType::f16) && head_dim >= 1 && head_dim <= kCudaAttentionMaxHeadDim;
}
// Whether it takes the register-resident kernels (head_dim 64 or 128; buffers 16-byte aligned besides) rather than
// the shared-memory ones.
inline bool cuda_attention_register_resident(DType t, int64_t head_dim) {
  return cuda_attention_supports(t, head_dim) && (head_dim == 64 || head_dim == 128);
}

// Whether cuDNN's fused attention takes this dtype and head_dim (bf16/f16, a multiple of 8 up to 128, the range its
// Hopper backward covers); it may still build no plan for a shape, and the own kernels then run it.
inline bool cudnn_attention_supports(DType t, int64_t head_dim) {
  return cuda_attention_supports(t, head_dim) && head_dim % 8 == 0;
}

// The GPU kernels behind attention: cuDNN's fused flash attention, or the engine's own (attention.cu).
enum class AttentionKernels { cudnn, own };
const char* attention_kernels_name(AttentionKernels k);
// TEENGINE_ATTENTION_KERNELS=cudnn|own forces one (read at every call, so one process can time both); unset or
// empty: cuDNN where it supports the case and builds a plan, else the own kernels. Forcing cudnn where cuDNN cannot
// run the case is a te::Error saying why.
std::optional<AttentionKernels> forced_attention_kernels();
// The kernels the last CUDA attention_forward (backward: attention_backward) of this thread ran; own before any.
AttentionKernels last_attention_kernels(bool backward);

// The kernels that run attention for this device, dtype and head_dim, in words (what --explain prints). On a GPU,
// head_dim 64 and 128 take the register-resident own kernels when every buffer is 16-byte aligned (the engine's are).
std::string attention_kernels(Device device, DType t, int64_t head_dim);

// The largest workspace one attention backward over `tokens` takes on this device: cuDNN's (its calls over whole
// sequences, ops/attention/cudnn_calls.h) where cuDNN may run the case, 0 on the CPU and for the own kernels.
int64_t attention_backward_workspace_bytes(Device device, const AttentionLayout& l, int64_t tokens, DType t,
                                           bool deterministic);

// Checks a layout against a QKV tensor of `tokens` rows (a te::Error naming what disagrees).
void check_attention_layout(const AttentionLayout& l, int64_t tokens, int64_t qkv_cols);

// out [T, heads·head_dim] (qkv's dtype) and lse [T/seq, heads, seq] f32, both contiguous and preallocated.
void attention_forward(const AttentionLayout& l, const AttentionOptions& o, const Tensor& qkv, Tensor& out,
                       Tensor& lse, const Stream& stream = Stream());
// dqkv [T, qkv_cols] (qkv's dtype) from dout (out's shape and dtype) and the forward's qkv, out and lse.
void attention_backward(const AttentionLayout& l, const AttentionOptions& o, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& lse, Tensor& dqkv, const Stream& stream = Stream());

}  // namespace te
