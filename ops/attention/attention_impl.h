// Private: the CPU reference behind ops/attention/attention.h and rope.h. Contiguous buffers, shapes checked.
#pragma once
#include "engine/dtype.h"
#include "ops/attention/attention.h"

namespace te::cpu {
void attention_forward(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* qkv, DType t,
                       void* out, float* lse);
void attention_backward(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* dout,
                        const void* qkv, const void* out, const float* lse, DType t, void* dqkv);
void rope_apply(const AttentionLayout& l, float base, bool inverse, int64_t tokens, const void* qkv, DType t,
                void* out);
}  // namespace te::cpu
