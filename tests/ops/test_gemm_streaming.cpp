// The weight-streaming fp8 GEMM (few output rows, ops/gemm/gemm_streaming.h) against a float64 GEMM of the
// dequantized copies, across formats, row counts around its m16 tiles, column tails, split-K and the epilogue;
// plus the automatic choice and the refusals. GPU only (skips without one).
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "common/gpu.h"
#include "engine/error.h"
#include "ops/fp8_gemm_test_util.h"
#include "ops/gemm/gemm.h"
#include "ops/ops_test_util.h"
#include "ops/quant/quantizer.h"

namespace te {
namespace {

using test::Layout;

struct Formats {
  const char* name;
  QuantFormat fx, fw;
  DType dx, dw;
};
const Formats kFormats[] = {
    {"pt_e4m3", QuantFormat::fp8_per_tensor, QuantFormat::fp8_per_tensor, DType::fp8_e4m3, DType::fp8_e4m3},
    {"pt_e5m2_x", QuantFormat::fp8_per_tensor, QuantFormat::fp8_per_tensor, DType::fp8_e5m2, DType::fp8_e4m3},
    {"pt_e5m2_w", QuantFormat::fp8_per_tensor, QuantFormat::fp8_per_tensor, DType::fp8_e4m3, DType::fp8_e5m2},
    {"blk_1d_2d", QuantFormat::fp8_block_1d, QuantFormat::fp8_block_2d, DType::fp8_e4m3, DType::fp8_e4m3},
    {"blk_1d_1d", QuantFormat::fp8_block_1d, QuantFormat::fp8_block_1d, DType::fp8_e4m3, DType::fp8_e4m3},
};

struct Problem {
  int64_t P, Q, D;  // out [P, Q] = x [P, D] · W [Q, D]ᵀ
};

// f32 output through the streaming kernel, forced (a problem it cannot run throws).
GemmOptions forced_streaming() {
  GemmOptions o;
  o.out_dtype = DType::f32;
  o.kernel = GemmKernel::streaming;
  return o;
}

using Param = std::tuple<Formats, Problem>;
class GemmStreaming : public ::testing::TestWithParam<Param> {};

TEST_P(GemmStreaming, MatchesFloat64OfDequantizedOperands) {
  TE_REQUIRE_GPU();
  const auto& [f, p] = GetParam();
  const Device gpu = Device::cuda(0);
  const Tensor x = test::random_2d(p.P, p.D, DType::bf16, 31, Device::cpu(), Layout::contiguous);
  const Tensor w = test::random_2d(p.Q, p.D, DType::bf16, 32, Device::cpu(), Layout::contiguous, 0.05f);
  const QuantizedTensor qx = test::quantize_on(x, f.fx, f.dx, gpu), qw = test::quantize_on(w, f.fw, f.dw, gpu);
  GemmContext ctx(gpu);
  const GemmOptions opts = forced_streaming();
  const Tensor got = gemm(qx, qw, GemmRole::fprop, opts, ctx);
  EXPECT_EQ(ctx.stats().streaming_calls, 1);
  EXPECT_LE(test::rel_l2(test::fprop_reference(qx, qw, p.P, p.Q, p.D, 1.0, {}, {}), got.to_f32_vector()),
            test::kTolF32);

  // Deterministic: the split-K partials are added in a fixed order, and the counters are left ready.
  const Tensor again = gemm(qx, qw, GemmRole::fprop, opts, ctx);
  EXPECT_EQ(test::bytes_of(got), test::bytes_of(again));

  // Epilogue: bf16 out += 0.5 · x·Wᵀ + bias; and a residual added after the output's rounding.
  test::expect_fprop_epilogue(qx, qw, p.P, p.Q, p.D, opts, ctx, 33);
  const int64_t before = ctx.stats().streaming_calls;
  test::expect_residual_as_add(qx, qw, p.P, p.Q, opts, ctx, 35);
  EXPECT_EQ(ctx.stats().streaming_calls - before, 2);  // the residual in the streaming kernel's epilogue

  // And it agrees with cuBLASLt on the same bytes (bf16 outputs).
  GemmOptions lt = opts;
  lt.kernel = GemmKernel::cublaslt;
  const Tensor via_lt = gemm(qx, qw, GemmRole::fprop, lt, ctx);
  EXPECT_LE(test::rel_l2(test::as_f64(via_lt), got.to_f32_vector()), test::kTolBF16);
}

std::string name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [f, p] = info.param;
  return std::string(f.name) + "_" + std::to_string(p.P) + "x" + std::to_string(p.Q) + "x" + std::to_string(p.D);
}

// Rows around the m16 tiles (1, 7, 16, 17, 33, 64); columns with a tail past the last 128-tile (200) and a single
// 8-column group (8); depth from one 128-block to many split-K ranges (8192 over two column tiles).
INSTANTIATE_TEST_SUITE_P(Sweep, GemmStreaming,
                         ::testing::Combine(::testing::ValuesIn(kFormats),
                                            ::testing::Values(Problem{1, 200, 128}, Problem{7, 8, 256},
                                                              Problem{16, 384, 512}, Problem{17, 200, 384},
                                                              Problem{33, 136, 1024}, Problem{64, 256, 8192})),
                         name);

// dgrad reads W's column-wise copy: dx [M, K] = dy [M, N] · W [N, K] streams Wᵀ's rows.
TEST(GemmStreamingRoles, DgradMatchesCublasLt) {
  TE_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const Tensor dy = test::random_2d(12, 256, DType::bf16, 41, Device::cpu(), Layout::contiguous);
  const Tensor w = test::random_2d(256, 384, DType::bf16, 42, Device::cpu(), Layout::contiguous, 0.05f);
  QuantizerConfig cg, cw;
  cg.format = cw.format = QuantFormat::fp8_per_tensor;
  cg.data_dtype = DType::fp8_e5m2;
  const QuantizedTensor qdy = Quantizer(cg).quantize(dy.to(gpu), Usage::rowwise);
  const QuantizedTensor qw = Quantizer(cw).quantize(w.to(gpu), Usage::both);
  GemmContext ctx(gpu);
  GemmOptions opts = forced_streaming();
  const Tensor got = gemm(qdy, qw, GemmRole::dgrad, opts, ctx);
  EXPECT_EQ(ctx.stats().streaming_calls, 1);
  opts.kernel = GemmKernel::cublaslt;
  const Tensor want = gemm(qdy, qw, GemmRole::dgrad, opts, ctx);
  EXPECT_LE(test::rel_l2(test::as_f64(want), got.to_f32_vector()), 1e-3);
}

TEST(GemmStreamingRoles, ChosenAutomaticallyForFewRowsAndClearRefusals) {
  TE_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const Formats& f = kFormats[3];
  const auto operands = [&](int64_t P, int64_t D) {
    const Tensor x = test::random_2d(P, D, DType::bf16, 51, Device::cpu(), Layout::contiguous);
    const Tensor w = test::random_2d(128, D, DType::bf16, 52, Device::cpu(), Layout::contiguous, 0.05f);
    return std::pair{test::quantize_on(x, f.fx, f.dx, gpu), test::quantize_on(w, f.fw, f.dw, gpu)};
  };
  GemmContext ctx(gpu);
  GemmOptions opts;
  const auto [x65, w65] = operands(65, 256);
  const auto [x16, w16] = operands(kStreamingRows, 256);
  const auto [x17, w17] = operands(kStreamingRows + 1, 256);
  gemm(x16, w16, GemmRole::fprop, opts, ctx);  // automatic: streaming up to kStreamingRows, cuBLASLt past them
  EXPECT_EQ(ctx.stats().streaming_calls, 1);
  gemm(x17, w17, GemmRole::fprop, opts, ctx);
  EXPECT_EQ(ctx.stats().streaming_calls, 1);
  opts.kernel = GemmKernel::cublaslt;
  gemm(x16, w16, GemmRole::fprop, opts, ctx);
  EXPECT_EQ(ctx.stats().streaming_calls, 1);

  opts.kernel = GemmKernel::streaming;
  try {
    gemm(x65, w65, GemmRole::fprop, opts, ctx);
    FAIL() << "65 rows were accepted by the streaming kernel";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 64 output rows"), std::string::npos) << e.what();
  }
  const auto [x200, w200] = operands(8, 200);
  try {
    gemm(x200, w200, GemmRole::fprop, opts, ctx);
    FAIL() << "K = 200 was accepted by the streaming kernel";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 128"), std::string::npos) << e.what();
  }
  const Tensor xb = test::random_2d(8, 256, DType::bf16, 53, gpu, Layout::contiguous);
  const Tensor wb = test::random_2d(128, 256, DType::bf16, 54, gpu, Layout::contiguous);
  try {
    gemm(xb, wb, GemmRole::fprop, opts, ctx);
    FAIL() << "bf16 operands were accepted by the streaming kernel";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp8 per-tensor or block-scaled operands only"), std::string::npos)
        << e.what();
  }
  opts.kernel = GemmKernel::automatic;  // the same problems run on cuBLASLt (zero-padded)
  EXPECT_NO_THROW(gemm(x200, w200, GemmRole::fprop, opts, ctx));
  EXPECT_NO_THROW(gemm(xb, wb, GemmRole::fprop, opts, ctx));
  EXPECT_EQ(ctx.stats().streaming_calls, 1);
}

}  // namespace
}  // namespace te
