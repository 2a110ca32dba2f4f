// Private: the CPU reference and the CUDA launchers behind ops/attention/attention.h and rope.h. Contiguous buffers,
// shapes checked by the callers.
#pragma once
#include "engine/dtype.h"
#include "engine/stream.h"
#include "ops/attention/attention.h"

namespace te::cpu {
void attention_forward(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* qkv, DType t,
                       void* out, float* lse);
void attention_backward(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* dout,
                        const void* qkv, const void* out, const float* lse, DType t, void* dqkv);
void rope_apply(const AttentionLayout& l, float base, bool inverse, int64_t tokens, const void* qkv, DType t,
                void* out);
}  // namespace te::cpu

namespace te::cuda {
// bf16/f16 only, head_dim ≤ kCudaAttentionMaxHeadDim. delta: a [tokens / seq, heads, seq] f32 workspace.
void attention_forward(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* qkv, DType t,
                       void* out, float* lse, const Stream& stream);
void attention_backward(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* dout,
                        const void* qkv, const void* out, const float* lse, DType t, void* dqkv, float* delta,
                        const Stream& stream);
void rope_apply(const AttentionLayout& l, float base, bool inverse, int64_t tokens, const void* qkv, DType t,
                void* out, const Stream& stream);
}  // namespace te::cuda
