// Activations over the last dimension, forward and backward (CPU reference + CUDA).
//
//   gelu   : out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))        x [..., F]  → out [..., F]
//   swiglu : out = silu(x[..., :F]) * x[..., F:]  (TransformerEngine order) x [..., 2F] → out [..., F]
//   relu   : out = max(x, 0)                                               x [..., F]  → out [..., F]
//
// x: f32 | bf16 | f16, any strides (made contiguous). out/dx: contiguous, f32 | bf16 | f16 (may differ from x).
// fp32 math, one rounding per output element. Backward takes dy [..., F] (x's dtype) and the saved input x and
// returns dx with x's shape. bias_grad reduces dy's columns in fp32 in a fixed order (deterministic).
// Fused activation + quantize is in ops/act/act_quantize.h. The stream is the last argument.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

#include "engine/stream.h"
#include "engine/tensor.h"

namespace te {

enum class ActKind : uint8_t { gelu, swiglu, relu };
std::string_view act_kind_name(ActKind k);                        // "gelu" | "swiglu" | "relu"
std::optional<ActKind> act_kind_from_name(std::string_view name);
// Last dim of the output for an input whose last dim is `in_cols` (swiglu halves it; it must be even).
int64_t act_out_cols(ActKind k, int64_t in_cols);

void act_forward(ActKind kind, const Tensor& x, Tensor& out, const Stream& stream = Stream());
Tensor act_forward(ActKind kind, const Tensor& x, DType out_dtype, const Stream& stream = Stream());

// dx [..., F_in] = d act(x) / dx applied to dy [..., F].
// dx may be dy itself (in place) for GELU and ReLU, whose dx has dy's shape.
void act_backward(ActKind kind, const Tensor& dy, const Tensor& x, Tensor& dx, const Stream& stream = Stream());
Tensor act_backward(ActKind kind, const Tensor& dy, const Tensor& x, const Stream& stream = Stream());  // x's dtype

// dbias [F] = sum over rows of dy [..., F] (fp32 accumulation, rounded once to dbias's dtype).
void bias_grad(const Tensor& dy, Tensor& dbias, const Stream& stream = Stream());
Tensor bias_grad(const Tensor& dy, DType dtype, const Stream& stream = Stream());

}  // namespace te
