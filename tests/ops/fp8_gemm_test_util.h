// Helpers shared by the fp8 GEMM kernel tests: operands quantized the way the recipes quantize them, a float64
// fprop of the dequantized copies with the GEMM epilogue, and the epilogue check every kernel runs.
#pragma once
#include <gtest/gtest.h>

#include <vector>

#include "engine/tensor.h"
#include "ops/elementwise/elementwise.h"
#include "ops/gemm/gemm.h"
#include "ops/ops_test_util.h"
#include "ops/quant/quantizer.h"

namespace te::test {

// `t` quantized on `dev` into format f with data dtype dt (power-of-two scales for the block formats).
inline QuantizedTensor quantize_on(const Tensor& t, QuantFormat f, DType dt, Device dev, Usage u = Usage::rowwise) {
  QuantizerConfig cfg;
  cfg.format = f;
  cfg.data_dtype = dt;
  cfg.pow2_scales = f != QuantFormat::fp8_per_tensor;
  return Quantizer(cfg).quantize(t.to(dev), u);
}

// alpha · x·Wᵀ + bias + c0 in float64 from the dequantized row-wise copies of x [P, D] and W [Q, D].
inline std::vector<double> fprop_reference(const QuantizedTensor& qx, const QuantizedTensor& qw, int64_t P, int64_t Q,
                                           int64_t D, double alpha, const std::vector<float>& bias,
                                           const std::vector<float>& c0) {
  const auto x = qx.dequantize(DType::f32).to_f32_vector(), w = qw.dequantize(DType::f32).to_f32_vector();
  std::vector<double> out(size_t(P * Q));
  for (int64_t r = 0; r < P; ++r)
    for (int64_t c = 0; c < Q; ++c) {
      double acc = 0;
      for (int64_t k = 0; k < D; ++k) acc += double(x[r * D + k]) * w[c * D + k];
      double v = alpha * acc;
      if (!bias.empty()) v += bias[size_t(c)];
      if (!c0.empty()) v += c0[size_t(r * Q + c)];
      out[size_t(r * Q + c)] = v;
    }
  return out;
}

inline std::vector<double> as_f64(const Tensor& t) {
  const auto v = t.to_f32_vector();
  return {v.begin(), v.end()};
}

// The epilogue on the kernel `epi` names: bf16 out (seeded c0) += 0.5 · x·Wᵀ + bias (seeded), against float64.
inline void expect_fprop_epilogue(const QuantizedTensor& qx, const QuantizedTensor& qw, int64_t P, int64_t Q, int64_t D,
                                  GemmOptions epi, GemmContext& ctx, uint64_t seed) {
  const Device dev = qx.device();
  const Tensor bias = random_2d(1, Q, DType::bf16, seed, Device::cpu(), Layout::contiguous).reshape({Q});
  const Tensor c0 = random_2d(P, Q, DType::bf16, seed + 1, Device::cpu(), Layout::contiguous);
  epi.out_dtype = DType::bf16;
  epi.alpha = 0.5f;
  epi.accumulate = true;
  epi.bias = bias.to(dev);
  Tensor out = c0.to(dev);
  gemm(qx, qw, GemmRole::fprop, out, epi, ctx);
  EXPECT_LE(
      rel_l2(fprop_reference(qx, qw, P, Q, D, 0.5, bias.to_f32_vector(), c0.to_f32_vector()), out.to_f32_vector()),
      kTolBF16);
}

// GemmOptions::residual gives the bytes of the plain GEMM (bf16 out, a bias) followed by add(residual, out): the
// output is rounded before the residual joins it.
inline void expect_residual_as_add(const GemmOperand& x, const GemmOperand& w, int64_t P, int64_t Q, GemmOptions o,
                                   GemmContext& ctx, uint64_t seed) {
  const Device dev = ctx.device();
  o.out_dtype = DType::bf16;
  o.bias = random_2d(1, Q, DType::bf16, seed, Device::cpu(), Layout::contiguous).reshape({Q}).to(dev);
  const Tensor residual = random_2d(P, Q, DType::bf16, seed + 1, Device::cpu(), Layout::contiguous).to(dev);
  const Tensor plain = gemm(x, w, GemmRole::fprop, o, ctx);
  o.residual = residual;
  const Tensor got = gemm(x, w, GemmRole::fprop, o, ctx);
  EXPECT_EQ(bytes_of(got), bytes_of(add(residual, plain)));
  EXPECT_NE(bytes_of(got), bytes_of(plain));
}

}  // namespace te::test
