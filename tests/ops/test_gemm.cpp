// GEMM: every role × dtype / format against a float64 reference computed here (CPU), and the CUDA path against
// the CPU path (GPU cases skip without a GPU).
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

struct Dims {
  int64_t M, N, K;
};
std::string dims_name(const Dims& d) {
  return std::to_string(d.M) + "x" + std::to_string(d.N) + "x" + std::to_string(d.K);
}

// Logical shapes of a and b per role (gemm.h): fprop x[M,K], W[N,K]; dgrad dy[M,N], W[N,K]; wgrad dy[M,N], x[M,K].
std::pair<int64_t, int64_t> a_shape(GemmRole r, const Dims& d) {
  return r == GemmRole::fprop ? std::pair{d.M, d.K} : std::pair{d.M, d.N};
}
std::pair<int64_t, int64_t> b_shape(GemmRole r, const Dims& d) {
  return r == GemmRole::wgrad ? std::pair{d.M, d.K} : std::pair{d.N, d.K};
}
std::pair<int64_t, int64_t> out_shape(GemmRole r, const Dims& d) {
  switch (r) {
    case GemmRole::fprop: return {d.M, d.N};
    case GemmRole::dgrad: return {d.M, d.K};
    case GemmRole::wgrad: return {d.N, d.K};
  }
  return {0, 0};
}

// The float64 GEMM of a [.,.] and b [.,.] (row-major, logical orientation) for a role, + bias + c0.
std::vector<double> ref_gemm(const std::vector<float>& a, const std::vector<float>& b, GemmRole r, const Dims& d,
                             double alpha, const std::vector<float>& bias, const std::vector<float>& c0) {
  const auto [P, Q] = out_shape(r, d);
  std::vector<double> out(size_t(P * Q), 0.0);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t q = 0; q < Q; ++q) {
      double acc = 0;
      switch (r) {
        case GemmRole::fprop:  // sum_k x[p,k] W[q,k]
          for (int64_t k = 0; k < d.K; ++k) acc += double(a[p * d.K + k]) * b[q * d.K + k];
          break;
        case GemmRole::dgrad:  // sum_n dy[p,n] W[n,q]
          for (int64_t n = 0; n < d.N; ++n) acc += double(a[p * d.N + n]) * b[n * d.K + q];
          break;
        case GemmRole::wgrad:  // sum_m dy[m,p] x[m,q]
          for (int64_t m = 0; m < d.M; ++m) acc += double(a[m * d.N + p]) * b[m * d.K + q];
          break;
      }
      double v = alpha * acc;
      if (!bias.empty()) v += bias[size_t(q)];
      if (!c0.empty()) v += c0[size_t(p * Q + q)];
      out[size_t(p * Q + q)] = v;
    }
  return out;
}

constexpr GemmRole kRoles[] = {GemmRole::fprop, GemmRole::dgrad, GemmRole::wgrad};

// ---- high precision: role × dtype × shape × layout × epilogue × device ----------------------------------------
enum class Epi { none, bias, accumulate, bias_accumulate_alpha };
const char* epi_name(Epi e) {
  switch (e) {
    case Epi::none: return "plain";
    case Epi::bias: return "bias";
    case Epi::accumulate: return "acc";
    case Epi::bias_accumulate_alpha: return "bias_acc_alpha";
  }
  return "?";
}

using HpParam = std::tuple<bool /*cuda*/, GemmRole, DType, Dims, Layout, Epi>;

class GemmHighPrecision : public ::testing::TestWithParam<HpParam> {};

TEST_P(GemmHighPrecision, MatchesFloat64Reference) {
  const auto [cuda, role, dt, d, layout, epi] = GetParam();
  if (cuda) TE_REQUIRE_GPU();
  const Device dev = test::device_for(cuda);
  const auto [ar, ac] = a_shape(role, d);
  const auto [br, bc] = b_shape(role, d);
  const auto [P, Q] = out_shape(role, d);
  Tensor a = test::random_2d(ar, ac, dt, 11, dev, layout);
  Tensor b = test::random_2d(br, bc, dt, 12, dev, layout == Layout::transposed ? Layout::col_slice : layout);
  const bool bias_on = epi == Epi::bias || epi == Epi::bias_accumulate_alpha;
  const bool acc_on = epi == Epi::accumulate || epi == Epi::bias_accumulate_alpha;
  GemmOptions opts;
  opts.alpha = epi == Epi::bias_accumulate_alpha ? 0.75f : 1.f;
  std::vector<float> bias, c0;
  if (bias_on) {
    opts.bias = test::random_2d(1, Q, dt, 13, dev, Layout::contiguous).reshape({Q});
    bias = opts.bias.to_f32_vector();
  }
  Tensor out;
  if (acc_on) {
    // A strided output (a column slice) also checks that the result is written through the view.
    out = test::random_2d(P, Q, dt, 14, dev, Layout::col_slice);
    c0 = out.to_f32_vector();
    opts.accumulate = true;
  }
  GemmContext ctx(dev);
  gemm(a, b, role, out, opts, ctx);
  ASSERT_EQ(out.shape(), (Shape{P, Q}));
  const auto ref = ref_gemm(a.to_f32_vector(), b.to_f32_vector(), role, d, opts.alpha, bias, c0);
  EXPECT_LE(test::rel_l2(ref, out.to_f32_vector()), test::tol_for(dt))
      << gemm_role_name(role) << " " << dtype_name(dt) << " " << dims_name(d);
}

std::string hp_name(const ::testing::TestParamInfo<HpParam>& info) {
  const auto& [cuda, role, dt, d, layout, epi] = info.param;
  return std::string(cuda ? "cuda_" : "cpu_") + std::string(gemm_role_name(role)) + "_" +
         std::string(dtype_name(dt)) + "_" + dims_name(d) + "_" + test::layout_name(layout) + "_" + epi_name(epi);
}

INSTANTIATE_TEST_SUITE_P(
    Sweep, GemmHighPrecision,
    ::testing::Combine(::testing::Bool(), ::testing::ValuesIn(kRoles),
                       ::testing::Values(DType::f32, DType::bf16, DType::f16),
                       ::testing::Values(Dims{1, 1, 1}, Dims{7, 13, 9}, Dims{33, 17, 130}, Dims{64, 48, 32}),
                       ::testing::Values(Layout::contiguous, Layout::col_slice, Layout::transposed),
                       ::testing::Values(Epi::none, Epi::bias, Epi::accumulate, Epi::bias_accumulate_alpha)),
    hp_name);

TEST(Gemm, LeadingDimsAndF32OutputFromBf16) {
  for (bool cuda : {false, true}) {
    if (cuda && cuda_device_count() == 0) continue;
    const Device dev = test::device_for(cuda);
    Tensor x = Tensor::empty({2, 5, 24}, DType::bf16, dev);  // [B, T, K]
    x.fill_normal(3);
    Tensor w = Tensor::empty({40, 24}, DType::bf16, dev);  // [N, K]
    w.fill_normal(4);
    GemmContext ctx(dev);
    GemmOptions opts;
    opts.out_dtype = DType::f32;
    Tensor y = gemm(x, w, GemmRole::fprop, opts, ctx);
    EXPECT_EQ(y.shape(), (Shape{2, 5, 40}));
    EXPECT_EQ(y.dtype(), DType::f32);
    const auto ref = ref_gemm(x.to_f32_vector(), w.to_f32_vector(), GemmRole::fprop, {10, 40, 24}, 1.0, {}, {});
    // bf16 inputs multiplied exactly and accumulated in f32: f32 tolerance holds.
    EXPECT_LE(test::rel_l2(ref, y.to_f32_vector()), test::kTolF32) << dev.str();
  }
}

TEST(Gemm, RejectsMismatchedShapes) {
  GemmContext ctx;
  Tensor x = Tensor::zeros({4, 8}, DType::f32), w = Tensor::zeros({6, 9}, DType::f32);
  EXPECT_THROW(gemm(x, w, GemmRole::fprop, {}, ctx), Error);
  Tensor out = Tensor::zeros({4, 5}, DType::f32);
  Tensor w2 = Tensor::zeros({6, 8}, DType::f32);
  EXPECT_THROW(gemm(x, w2, GemmRole::fprop, out, {}, ctx), Error);
  GemmOptions opts;
  opts.accumulate = true;  // nothing to accumulate into
  EXPECT_THROW(gemm(x, w2, GemmRole::fprop, opts, ctx), Error);
  GemmOptions res;
  res.residual = Tensor::zeros({4, 5}, DType::f32);  // out is [4, 6]
  EXPECT_THROW(gemm(x, w2, GemmRole::fprop, res, ctx), Error);
  Tensor acc = Tensor::zeros({4, 6}, DType::f32);
  res.residual = Tensor::zeros({4, 6}, DType::f32);
  res.accumulate = true;
  EXPECT_THROW(gemm(x, w2, GemmRole::fprop, acc, res, ctx), Error);
}

// A residual joins the output after its rounding, on every path (the CPU and cuBLASLt add it after the GEMM).
TEST(Gemm, ResidualIsTheOutputFollowedByAdd) {
  for (bool cuda : {false, true}) {
    if (cuda && cuda_device_count() == 0) continue;
    const Device dev = test::device_for(cuda);
    GemmContext ctx(dev);
    const Tensor x = test::random_2d(24, 64, DType::bf16, 25, Device::cpu(), Layout::contiguous).to(dev);
    const Tensor w = test::random_2d(40, 64, DType::bf16, 26, Device::cpu(), Layout::contiguous).to(dev);
    test::expect_residual_as_add(x, w, 24, 40, GemmOptions{}, ctx, 27);
  }
}

// ---- quantized operands ---------------------------------------------------------------------------------------
struct FormatPair {
  const char* name;
  QuantFormat fa, fb;
  DType da, db;
};
const FormatPair kPairs[] = {
    {"pt_e4m3_e4m3", QuantFormat::fp8_per_tensor, QuantFormat::fp8_per_tensor, DType::fp8_e4m3, DType::fp8_e4m3},
    {"pt_e5m2_e4m3", QuantFormat::fp8_per_tensor, QuantFormat::fp8_per_tensor, DType::fp8_e5m2, DType::fp8_e4m3},
    {"pt_e4m3_e5m2", QuantFormat::fp8_per_tensor, QuantFormat::fp8_per_tensor, DType::fp8_e4m3, DType::fp8_e5m2},
    {"blk_1d_2d", QuantFormat::fp8_block_1d, QuantFormat::fp8_block_2d, DType::fp8_e4m3, DType::fp8_e4m3},
    {"blk_1d_1d", QuantFormat::fp8_block_1d, QuantFormat::fp8_block_1d, DType::fp8_e4m3, DType::fp8_e4m3},
    {"blk_2d_1d", QuantFormat::fp8_block_2d, QuantFormat::fp8_block_1d, DType::fp8_e4m3, DType::fp8_e4m3},
    {"mxfp8", QuantFormat::mxfp8, QuantFormat::mxfp8, DType::fp8_e4m3, DType::fp8_e4m3},
    {"nvfp4_1d_2d", QuantFormat::nvfp4_1d, QuantFormat::nvfp4_2d, DType::fp4_e2m1, DType::fp4_e2m1},
    {"pt_x_blk_mixed", QuantFormat::fp8_per_tensor, QuantFormat::fp8_block_1d, DType::fp8_e4m3, DType::fp8_e4m3},
};

bool is_fp8_format(QuantFormat f) {
  return f == QuantFormat::fp8_per_tensor || f == QuantFormat::fp8_block_1d || f == QuantFormat::fp8_block_2d;
}

QuantizedTensor quantize(const Tensor& x, QuantFormat f, DType dt, std::optional<ImageSpec> images = std::nullopt) {
  QuantizerConfig cfg;
  cfg.format = f;
  cfg.data_dtype = dt;
  cfg.pow2_scales = f == QuantFormat::fp8_block_1d || f == QuantFormat::fp8_block_2d;
  Quantizer q(cfg);
  return q.quantize(x, Usage::both, Stream(), {}, images);
}

QuantizedTensor to_device(QuantizedTensor q, Device dev) {
  for (Tensor* t : {&q.rowwise_data, &q.rowwise_scale_inv, &q.columnwise_data, &q.columnwise_scale_inv,
                    &q.rowwise_amax, &q.columnwise_amax})
    if (t->defined()) *t = t->to(dev);
  return q;
}

using QParam = std::tuple<GemmRole, FormatPair, Dims>;
class GemmQuantized : public ::testing::TestWithParam<QParam> {
 protected:
  void SetUp() override {
    const auto& [role, pair, d] = GetParam();
    const bool aligned = d.M % 32 == 0 && d.N % 32 == 0 && d.K % 32 == 0;
    if (!aligned && !(is_fp8_format(pair.fa) && is_fp8_format(pair.fb)))
      GTEST_SKIP() << "MXFP8 / NVFP4 rows here use 32-aligned shapes";
    const auto [ar, ac] = a_shape(role, d);
    const auto [br, bc] = b_shape(role, d);
    a_hp = test::random_2d(ar, ac, DType::bf16, 21, Device::cpu(), Layout::contiguous);
    b_hp = test::random_2d(br, bc, DType::bf16, 22, Device::cpu(), Layout::contiguous, 0.05f);
    qa = quantize(a_hp, pair.fa, pair.da);
    qb = quantize(b_hp, pair.fb, pair.db);
  }
  Tensor a_hp, b_hp;
  QuantizedTensor qa, qb;
};

// CPU: the result is the f64 GEMM of the dequantized copies the role reads, within f32 tolerance.
TEST_P(GemmQuantized, CpuEqualsGemmOfDequantizedOperands) {
  const auto& [role, pair, d] = GetParam();
  GemmContext ctx;
  GemmOptions opts;
  opts.out_dtype = DType::f32;
  Tensor out = gemm(qa, qb, role, opts, ctx);
  const Usage ua = role == GemmRole::wgrad ? Usage::columnwise : Usage::rowwise;
  const Usage ub = role == GemmRole::fprop ? Usage::rowwise : Usage::columnwise;
  const auto ref = ref_gemm(qa.dequantize_usage(ua, DType::f32).to_f32_vector(),
                            qb.dequantize_usage(ub, DType::f32).to_f32_vector(), role, d, 1.0, {}, {});
  EXPECT_LE(test::rel_l2(ref, out.to_f32_vector()), test::kTolF32);
  // And the quantized GEMM is close to the high-precision one (a sanity bound, NUMERICS.md §7).
  const auto hp = ref_gemm(a_hp.to_f32_vector(), b_hp.to_f32_vector(), role, d, 1.0, {}, {});
  EXPECT_LE(test::rel_l2(hp, out.to_f32_vector()), pair.fa == QuantFormat::nvfp4_1d ? 0.2 : 0.1);
}

// CUDA vs the CPU path on the same quantized bytes, bf16 output, with a bias.
TEST_P(GemmQuantized, CudaMatchesCpu) {
  TE_REQUIRE_GPU();
  const auto& [role, pair, d] = GetParam();
  const Device gpu = Device::cuda(0);
  GemmOptions opts;
  opts.out_dtype = DType::bf16;
  const int64_t Q = out_shape(role, d).second;
  opts.bias = test::random_2d(1, Q, DType::bf16, 23, Device::cpu(), Layout::contiguous).reshape({Q});
  GemmContext cpu_ctx;
  const Tensor want = gemm(qa, qb, role, opts, cpu_ctx);
  GemmOptions gopts = opts;
  gopts.bias = opts.bias.to(gpu);
  GemmContext ctx(gpu);
  const Tensor got = gemm(to_device(qa, gpu), to_device(qb, gpu), role, gopts, ctx);
  const auto w = want.to_f32_vector();
  EXPECT_LE(test::rel_l2(std::vector<double>(w.begin(), w.end()), got.to_f32_vector()), test::kTolBF16);
  // Second call: served from the plan cache (cuBLASLt's; few-row fp8 problems run the streaming kernel instead).
  gemm(to_device(qa, gpu), to_device(qb, gpu), role, gopts, ctx);
  EXPECT_GE(ctx.stats().plan_cache_hits + ctx.stats().streaming_calls, 1);
}

// CUDA accumulate (wgrad-style out += result, f32 out) vs the CPU path.
TEST_P(GemmQuantized, CudaAccumulateMatchesCpu) {
  TE_REQUIRE_GPU();
  const auto& [role, pair, d] = GetParam();
  const Device gpu = Device::cuda(0);
  const auto [P, Q] = out_shape(role, d);
  const Tensor init = test::random_2d(P, Q, DType::f32, 24, Device::cpu(), Layout::contiguous);
  GemmOptions opts;
  opts.accumulate = true;
  opts.alpha = 0.5f;
  Tensor want = init.clone();
  GemmContext cpu_ctx;
  gemm(qa, qb, role, want, opts, cpu_ctx);
  Tensor got = init.to(gpu);
  GemmContext ctx(gpu);
  gemm(to_device(qa, gpu), to_device(qb, gpu), role, got, opts, ctx);
  const auto w = want.to_f32_vector();
  EXPECT_LE(test::rel_l2(std::vector<double>(w.begin(), w.end()), got.to_f32_vector()), test::kTolBF16);
}

// Operands quantized with the images a GEMM on their device reads (gemm_image_spec) give the same bytes as the same
// quantization without them, which the GEMM dequantizes itself, on the CPU and the GPU; and the GEMM reads the
// images instead of dequantizing.
TEST_P(GemmQuantized, CarriedImagesGiveTheSameBytes) {
  const auto& [role, pair, d] = GetParam();
  for (bool cuda : {false, true}) {
    if (cuda && cuda_device_count() == 0) continue;
    const Device dev = test::device_for(cuda);
    const Tensor xa = a_hp.to(dev), xb = b_hp.to(dev);
    const std::optional<ImageSpec> sa = gemm_image_spec(pair.fa, dev), sb = gemm_image_spec(pair.fb, dev);
    GemmOptions opts;
    opts.out_dtype = DType::bf16;
    GemmContext plain_ctx(dev), image_ctx(dev);
    const Tensor want = gemm(quantize(xa, pair.fa, pair.da), quantize(xb, pair.fb, pair.db), role, opts, plain_ctx);
    const Tensor got =
        gemm(quantize(xa, pair.fa, pair.da, sa), quantize(xb, pair.fb, pair.db, sb), role, opts, image_ctx);
    EXPECT_EQ(test::bytes_of(want), test::bytes_of(got)) << dev.str();
    const int64_t images = int64_t(sa.has_value()) + int64_t(sb.has_value());
    EXPECT_EQ(image_ctx.stats().images_read, images) << dev.str();
    EXPECT_EQ(image_ctx.stats().operands_dequantized + images, plain_ctx.stats().operands_dequantized) << dev.str();
    // The CPU dequantizes every quantized operand; a GPU only the formats it has no tensor-core path for.
    if (!cuda) {
      EXPECT_EQ(images, 2);
    } else if (is_fp8_format(pair.fa) && is_fp8_format(pair.fb)) {
      EXPECT_EQ(images, 0);
    }
  }
}

std::string q_name(const ::testing::TestParamInfo<QParam>& info) {
  const auto& [role, pair, d] = info.param;
  return std::string(gemm_role_name(role)) + "_" + pair.name + "_" + dims_name(d);
}

INSTANTIATE_TEST_SUITE_P(Sweep, GemmQuantized,
                         ::testing::Combine(::testing::ValuesIn(kRoles), ::testing::ValuesIn(kPairs),
                                            ::testing::Values(Dims{64, 96, 128}, Dims{136, 40, 272},
                                                              Dims{130, 24, 200})),
                         q_name);

TEST(Gemm, Block2dTimes2dIsRejectedWithAClearError) {
  Tensor x = test::random_2d(128, 256, DType::bf16, 1, Device::cpu(), Layout::contiguous);
  Tensor w = test::random_2d(128, 256, DType::bf16, 2, Device::cpu(), Layout::contiguous);
  const QuantizedTensor qx = quantize(x, QuantFormat::fp8_block_2d, DType::fp8_e4m3);
  const QuantizedTensor qw = quantize(w, QuantFormat::fp8_block_2d, DType::fp8_e4m3);
  for (bool cuda : {false, true}) {
    if (cuda && cuda_device_count() == 0) continue;
    const Device dev = test::device_for(cuda);
    GemmContext ctx(dev);
    try {
      gemm(to_device(qx, dev), to_device(qw, dev), GemmRole::fprop, {}, ctx);
      ADD_FAILURE() << "2D x 2D was accepted on " << dev.str();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("2D × 2D"), std::string::npos) << e.what();
      EXPECT_NE(e.hint().find("fp8_block_1d"), std::string::npos) << e.hint();
    }
  }
}

TEST(Gemm, MissingUsageIsAClearError) {
  Tensor x = test::random_2d(32, 64, DType::bf16, 1, Device::cpu(), Layout::contiguous);
  QuantizerConfig cfg;
  cfg.format = QuantFormat::fp8_per_tensor;
  QuantizedTensor rowwise_only = Quantizer(cfg).quantize(x, Usage::rowwise);
  Tensor dy = test::random_2d(32, 16, DType::bf16, 2, Device::cpu(), Layout::contiguous);
  QuantizedTensor qdy = Quantizer(cfg).quantize(dy, Usage::both);
  GemmContext ctx;
  try {
    gemm(qdy, rowwise_only, GemmRole::wgrad, {}, ctx);  // wgrad reads x column-wise
    ADD_FAILURE() << "accepted a missing column-wise copy";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("columnwise"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace te
