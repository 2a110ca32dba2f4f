// The sequence-parallel collectives along dim 0 (docs/NUMERICS.md §4–§5).
//
// gather_along_first_dim returns on every rank exactly the bytes of quantizing concat(x_0 … x_{W−1}) on one rank,
// for any format, usages, world size, local M (equal on all ranks), K and strides. Per usage it takes
//  - the quantized path when the local shard is gatherable for that usage (Quantizer::can_gather_quantized):
//    quantize locally (per-tensor current scaling and NVFP4 all-reduce their amax first, through the AmaxReducer
//    hook, so every rank uses one scale; delayed scaling uses its shared stored scale), gather data and scales in
//    one grouped launch together with a MAX all-reduce of the per-tensor amax, then fix the rank interleaving of
//    the transposed data and of the scales whose columns run along M (swap_first_dims), dropping per-rank padding;
//  - the fallback otherwise: gather in the tensor's original dtype from a contiguous buffer (bf16 stays bf16),
//    then quantize the gathered tensor once. An already-quantized input is dequantized to its original dtype
//    first (logged once per call site).
// Mixed requests (row-wise gatherable, column-wise not): a high-precision input takes ONE high-precision gather
// and quantizes both usages from it (2 B/element for bf16, instead of 1 + 2 for a quantized row-wise gather plus
// a high-precision column-wise one; both are exact). An already-quantized input keeps its row-wise copy on the
// quantized path (no dequantize → requantize rounding) and gathers only the column-wise part in high precision.
// NVFP4 with stochastic rounding always falls back: its random draws depend on the element's global index.
#pragma once
#include <memory>
#include <string>
#include <variant>

#include "comm/communicator.h"
#include "comm/gather_plan.h"
#include "engine/call_site.h"
#include "ops/quant/quantizer.h"

namespace te {

// §4 applied to a local shard: which path each requested usage takes. `quantizer` may be null (plain gather);
// `input_usages` are the copies an already-quantized input carries (Usage::none for a high-precision input).
GatherPlan plan_gather(const Shape& local_shape, const Quantizer* quantizer, Usage usages, int world,
                       Usage input_usages = Usage::none);

using GatherInput = std::variant<Tensor, QuantizedTensor>;

struct GatherOutput {
  bool quantized = false;
  Tensor tensor;       // the gathered high-precision tensor (no quantizer)
  QuantizedTensor qt;  // the gathered quantized tensor
};

struct GatherResult {
  std::shared_ptr<GatherOutput> output = std::make_shared<GatherOutput>();
  Work work;  // async: wait() before reading `output` (it runs the interleave fix / the fallback's quantize)
  GatherPlan plan;
  int64_t quantized_bytes = 0;  // bytes this rank's quantized gather wrote (data + scales)
  int64_t fallback_bytes = 0;   // bytes this rank's high-precision gather wrote

  const QuantizedTensor& quantized() const;  // throws unless the output is quantized and the work was waited
  const Tensor& tensor() const;              // throws unless the output is a tensor and the work was waited
};

// input [M_l, …] on comm.device(); quantizer may be null (plain gather of a Tensor); usages: the copies to produce
// (Usage::none for an already-quantized input: the copies it carries). The quantizer is left unchanged. With
// async_op = false the result is complete on return (ordered on `stream`). With `images`, the copies this call
// quantizes itself (the fallback's, or every copy in a group of one) carry their GEMM images (Quantizer::quantize);
// copies gathered quantized carry none. `site` keys the once-per-call-site fallback log line.
GatherResult gather_along_first_dim(const GatherInput& input, Communicator& comm, Quantizer* quantizer, Usage usages,
                                    bool async_op, const Stream& stream = Stream(),
                                    std::optional<ImageSpec> images = std::nullopt, CallSite site = CallSite::here());

// input [W·n, …] f32/bf16/f16 → [n, …] sum over ranks (always high precision). Throws te::Error when dim 0 does
// not divide by the world size. World size 1 returns the input.
struct ReduceScatterResult {
  Tensor output;
  Work work;
};
ReduceScatterResult reduce_scatter_along_first_dim(const Tensor& input, Communicator& comm, bool async_op,
                                                   const Stream& stream = Stream());

// In-place all-reduce of a tensor (any strides: a non-contiguous tensor is reduced through a contiguous copy).
Work all_reduce(const Tensor& tensor, Communicator& comm, ReduceOp op, bool async_op, const Stream& stream = Stream());

// The AmaxReducer (ops/quant) that all-reduces an amax with MAX over `comm`.
AmaxReducer amax_reducer(Communicator& comm);

}  // namespace te
