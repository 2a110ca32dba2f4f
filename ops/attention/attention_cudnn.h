// Private (CUDA builds only): scaled-dot-product attention through cuDNN 9's fused flash attention, for the dispatch
// in attention.cpp. Same contract as te::cuda::attention_forward/backward (attention_impl.h), with the same lse: the
// statistics cuDNN writes are log Σ_j exp(scale · q_i · k_j) in natural log, the scale included.
#pragma once
#include <string>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/stream.h"
#include "ops/attention/attention.h"

namespace te::cudnn_attention {

// Each returns true when cuDNN ran the case; false when it launched nothing and wrote why to *why_not (cuDNN
// builds no plan for this shape on this device, or a buffer is not 16-byte aligned), so the caller can run its own
// kernels. A failure once cuDNN has a plan is a te::Error.
bool attention_forward(const AttentionLayout& l, bool causal, float scale, int64_t tokens, const void* qkv, DType t,
                       void* out, float* lse, Device device, const Stream& stream, std::string* why_not);
// `deterministic` false: dq accumulated with f32 atomics (attention.h, AttentionOptions).
bool attention_backward(const AttentionLayout& l, bool causal, float scale, bool deterministic, int64_t tokens,
                        const void* dout, const void* qkv, const void* out, const float* lse, DType t, void* dqkv,
                        Device device, const Stream& stream, std::string* why_not);

}  // namespace te::cudnn_attention
