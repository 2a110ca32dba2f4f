// A quantized tensor: one bundle of the row-wise and/or column-wise copies, their scale_inv and (where the
// format has one) the amax. Layouts are exactly docs/NUMERICS.md §3; every padding byte is zero.
// M = product of the leading dims of `shape`, K = last dim.
#pragma once
#include "engine/tensor.h"
#include "ops/quant/format.h"

namespace te {

struct QuantizedTensor {
  QuantFormat format = QuantFormat::fp8_per_tensor;
  Shape shape;                         // logical shape of the high-precision tensor
  DType original_dtype = DType::bf16;  // what dequantize() returns by default, and what a fallback gather moves
  DType data_dtype = DType::fp8_e4m3;  // fp8_e4m3 | fp8_e5m2 | fp4_e2m1

  // Row-wise copy: data [M, K] (fp4: packed, [M, ceil(K/2)] bytes viewed as fp4 [M, 2*ceil(K/2)]; for odd K the
  // last nibble of each row is a zero pad, likewise odd M in the column-wise copy),
  // scale_inv per §3. Undefined tensors when the usage is absent.
  Tensor rowwise_data, rowwise_scale_inv;
  // Column-wise copy: data [K, M] (MXFP8: [M, K]), scale_inv per §3.
  Tensor columnwise_data, columnwise_scale_inv;
  // fp32 [1]: per-tensor amax (fp8 per-tensor) or the NVFP4 global amax of each copy (the column-wise copy's amax
  // is taken after the Hadamard transform when RHT is on). Undefined where the format has none.
  Tensor rowwise_amax, columnwise_amax;
  // NVFP4: the column-wise copy holds RHT(xᵀ) (full groups of 16 tokens; a trailing partial group is untransformed).
  bool columnwise_rht = false;
  // Optional exact image of each copy, [M, K] in x's order (ImageSpec: its dtype, NVFP4's factor in or out): what a
  // GEMM with no kernel for the format multiplies, written by the pass that quantized (Quantizer::quantize with
  // images; ops/gemm: gemm_image_spec says which form). A Hadamard-transformed copy's image holds the values
  // as stored, which is what a GEMM whose transforms cancel reads. Not part of nbytes(): a gather never moves it.
  Tensor rowwise_image, columnwise_image;

  int64_t rows() const;  // M
  int64_t cols() const;  // K
  Usage usages() const;
  bool has(Usage u) const { return has_usage(usages(), u); }
  Device device() const;
  // Bytes of data + scales (+ amax) of the usages present: what a gather of this tensor writes.
  int64_t nbytes() const;
  // Exact dequantization to `dtype` (default: the original dtype) from the row-wise copy when present, else
  // from the column-wise copy (returned in [M, K] orientation; RHT undone).
  Tensor dequantize(std::optional<DType> dtype = std::nullopt, const Stream& stream = Stream()) const;
  Tensor dequantize_usage(Usage from, std::optional<DType> dtype = std::nullopt, const Stream& stream = Stream()) const;
};

}  // namespace te
