// The block-scaled warpgroup fp8 GEMM (ops/gemm/gemm_wgmma.h) against a float64 GEMM of the dequantized copies and
// against cuBLASLt on the same bytes: 1x128 × 128x128 and 1x128 × 1x128 scales, row and column tails inside a
// 128 × 128 tile and inside a cluster, more tiles than SMs (the persistent loop), every role, the epilogue, and the
// refusals. GPU only (skips without one or on a GPU that is not a Hopper).
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "common/gpu.h"
#include "engine/device.h"
#include "engine/error.h"
#include "ops/fp8_gemm_test_util.h"
#include "ops/gemm/gemm.h"
#include "ops/ops_test_util.h"
#include "ops/quant/quantizer.h"

namespace te {
namespace {

// Names below carry "wgmma": the sanitizer builds compile the ops tests as one unity file.
using test::Layout;

#define TE_REQUIRE_HOPPER()                                                                                \
  do {                                                                                                     \
    TE_REQUIRE_GPU();                                                                                      \
    set_current_device(Device::cuda(0));                                                                   \
    if (current_cc_major() != 9) GTEST_SKIP() << "the warpgroup kernel is built for sm_90a (Hopper) only"; \
  } while (0)

struct WgmmaFormats {
  const char* name;
  QuantFormat fx, fw;
  DType dx, dw;
};
const WgmmaFormats kWgmmaFormats[] = {
    {"blk_1d_2d", QuantFormat::fp8_block_1d, QuantFormat::fp8_block_2d, DType::fp8_e4m3, DType::fp8_e4m3},
    {"blk_1d_1d", QuantFormat::fp8_block_1d, QuantFormat::fp8_block_1d, DType::fp8_e4m3, DType::fp8_e4m3},
};

struct WgmmaProblem {
  int64_t P, Q, D;  // out [P, Q] = x [P, D] · W [Q, D]ᵀ
};

GemmOptions wgmma_opts(GemmKernel k, DType out) {
  GemmOptions o;
  o.out_dtype = out;
  o.kernel = k;
  return o;
}

// Against float64: Hopper's fp8 tensor cores add the products of one 128-wide K block with fewer than f32's bits
// (measured 1.2–1.3e-4 relative, about 2^-13), which the per-block promotion into f32 bounds; cuBLASLt's
// block-scaled kernels do the same, so against cuBLASLt the bytes must be equal.
constexpr double kTolFp8Mma = 5e-4;

using WgmmaParam = std::tuple<WgmmaFormats, WgmmaProblem>;
class GemmWgmma : public ::testing::TestWithParam<WgmmaParam> {};

TEST_P(GemmWgmma, MatchesFloat64AndCublasLt) {
  TE_REQUIRE_HOPPER();
  const auto& [f, p] = GetParam();
  const Device gpu = Device::cuda(0);
  const Tensor x = test::random_2d(p.P, p.D, DType::bf16, 61, Device::cpu(), Layout::contiguous);
  const Tensor w = test::random_2d(p.Q, p.D, DType::bf16, 62, Device::cpu(), Layout::contiguous, 0.05f);
  const QuantizedTensor qx = test::quantize_on(x, f.fx, f.dx, gpu), qw = test::quantize_on(w, f.fw, f.dw, gpu);
  GemmContext ctx(gpu);
  const Tensor got = gemm(qx, qw, GemmRole::fprop, wgmma_opts(GemmKernel::wgmma, DType::f32), ctx);
  EXPECT_EQ(ctx.stats().wgmma_calls, 1);
  const std::vector<float> g = got.to_f32_vector();
  EXPECT_LE(test::rel_l2(test::fprop_reference(qx, qw, p.P, p.Q, p.D, 1.0, {}, {}), g), kTolFp8Mma);
  const Tensor again = gemm(qx, qw, GemmRole::fprop, wgmma_opts(GemmKernel::wgmma, DType::f32), ctx);
  EXPECT_EQ(test::bytes_of(got), test::bytes_of(again));  // no atomics, no split K: deterministic
  const Tensor lt = gemm(qx, qw, GemmRole::fprop, wgmma_opts(GemmKernel::cublaslt, DType::f32), ctx);
  EXPECT_EQ(test::bytes_of(got), test::bytes_of(lt)) << "rel_l2 " << test::rel_l2(test::as_f64(lt), g);

  // Epilogue: bf16 out += 0.5 · x·Wᵀ + bias.
  test::expect_fprop_epilogue(qx, qw, p.P, p.Q, p.D, wgmma_opts(GemmKernel::wgmma, DType::bf16), ctx, 63);
}

std::string wgmma_case_name(const ::testing::TestParamInfo<WgmmaParam>& info) {
  const auto& [f, p] = info.param;
  return std::string(f.name) + "_" + std::to_string(p.P) + "x" + std::to_string(p.Q) + "x" + std::to_string(p.D);
}

// One tile; row and column tails (300 = 2 · 128 + 44, 520 = 4 · 128 + 8, an odd column count); a single row. 128-column
// tiles run Q = 128, 203, 131 and 1024; 192-column tiles run 520 (tiles starting on and half-way into a weight-scale
// block), 1152 and 832, whose last tile's second and third 64-column store boxes lie wholly past the matrix. Both
// widths also run more tiles than an H100 or H200 has SMs (18 · 8 = 144, 32 · 5 = 160), so CTAs take several tiles
// through the same ring.
INSTANTIATE_TEST_SUITE_P(Sweep, GemmWgmma,
                         ::testing::Combine(::testing::ValuesIn(kWgmmaFormats),
                                            ::testing::Values(WgmmaProblem{128, 128, 128}, WgmmaProblem{300, 520, 640},
                                                              WgmmaProblem{1, 203, 256}, WgmmaProblem{129, 131, 384},
                                                              WgmmaProblem{2048, 1152, 256},
                                                              WgmmaProblem{2304, 1024, 256},
                                                              WgmmaProblem{4096, 832, 256})),
                         wgmma_case_name);

// dgrad (W's column-wise 128x128 copy) and wgrad (both column-wise 1x128 copies) against cuBLASLt.
TEST(GemmWgmmaRoles, DgradAndWgradMatchCublasLt) {
  TE_REQUIRE_HOPPER();
  const Device gpu = Device::cuda(0);
  const int64_t M = 384, N = 256, K = 768;  // outputs of 768 columns: 192-column tiles
  const Tensor dy = test::random_2d(M, N, DType::bf16, 71, Device::cpu(), Layout::contiguous);
  const Tensor x = test::random_2d(M, K, DType::bf16, 72, Device::cpu(), Layout::contiguous);
  const Tensor w = test::random_2d(N, K, DType::bf16, 73, Device::cpu(), Layout::contiguous, 0.05f);
  const QuantizedTensor qdy = test::quantize_on(dy, QuantFormat::fp8_block_1d, DType::fp8_e4m3, gpu, Usage::both);
  const QuantizedTensor qx = test::quantize_on(x, QuantFormat::fp8_block_1d, DType::fp8_e4m3, gpu, Usage::both);
  const QuantizedTensor qw = test::quantize_on(w, QuantFormat::fp8_block_2d, DType::fp8_e4m3, gpu, Usage::both);
  GemmContext ctx(gpu);
  for (const auto& [role, a, b] : {std::tuple{GemmRole::dgrad, qdy, qw}, std::tuple{GemmRole::wgrad, qdy, qx}}) {
    const Tensor got = gemm(a, b, role, wgmma_opts(GemmKernel::wgmma, DType::f32), ctx);
    const Tensor want = gemm(a, b, role, wgmma_opts(GemmKernel::cublaslt, DType::f32), ctx);
    EXPECT_EQ(test::bytes_of(got), test::bytes_of(want))
        << gemm_role_name(role) << ": rel_l2 " << test::rel_l2(test::as_f64(want), got.to_f32_vector());
  }
  EXPECT_EQ(ctx.stats().wgmma_calls, 2);
}

TEST(GemmWgmmaRoles, ClearRefusals) {
  TE_REQUIRE_HOPPER();
  const Device gpu = Device::cuda(0);
  GemmContext ctx(gpu);
  const GemmOptions opts = wgmma_opts(GemmKernel::wgmma, DType::bf16);
  const auto expect_refusal = [&](const GemmOperand& a, const GemmOperand& b, const std::string& why) {
    try {
      gemm(a, b, GemmRole::fprop, opts, ctx);
      FAIL() << "accepted: " << a.str() << " × " << b.str();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  const Tensor x200 = test::random_2d(8, 200, DType::bf16, 81, Device::cpu(), Layout::contiguous);
  const Tensor w200 = test::random_2d(128, 200, DType::bf16, 82, Device::cpu(), Layout::contiguous, 0.05f);
  expect_refusal(test::quantize_on(x200, QuantFormat::fp8_block_1d, DType::fp8_e4m3, gpu),
                 test::quantize_on(w200, QuantFormat::fp8_block_2d, DType::fp8_e4m3, gpu), "multiple of 128");
  const Tensor x = test::random_2d(8, 256, DType::bf16, 83, Device::cpu(), Layout::contiguous);
  const Tensor w = test::random_2d(128, 256, DType::bf16, 84, Device::cpu(), Layout::contiguous, 0.05f);
  expect_refusal(test::quantize_on(x, QuantFormat::fp8_per_tensor, DType::fp8_e4m3, gpu),
                 test::quantize_on(w, QuantFormat::fp8_per_tensor, DType::fp8_e4m3, gpu), "1x128 blocks");
  expect_refusal(test::quantize_on(x, QuantFormat::fp8_block_1d, DType::fp8_e5m2, gpu),
                 test::quantize_on(w, QuantFormat::fp8_block_2d, DType::fp8_e4m3, gpu), "E5M2");
  expect_refusal(x.to(gpu), w.to(gpu), "fp8 block-scaled operands only");
  EXPECT_EQ(ctx.stats().wgmma_calls, 0);
}

}  // namespace
}  // namespace te
