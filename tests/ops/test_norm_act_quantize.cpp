// Norm and activation outputs quantized through a Quantizer (FP8 block 1D): the fused CUDA LayerNorm/RMSNorm +
// row-wise quantize kernel must produce exactly the bytes of "norm, then quantize"; the CPU paths must equal an
// FP8 block-1D quantization written here from docs/NUMERICS.md §2–§3.
#include <gtest/gtest.h>

#include <cfloat>

#include "engine/float_convert.h"
#include "ops/act/act_quantize.h"
#include "ops/norm/norm_quantize.h"
#include "ops/quant/scale_math.h"
#include "ops_test_util.h"

namespace te {
namespace {
using namespace test;

struct Block1D {
  std::vector<uint8_t> data;   // [R, C]
  std::vector<float> scale_inv;  // [ceil(C/128)][round4(R)], padding 0
};
// A [R, C] (values already rounded to the input dtype `in`) quantized in 1x128 blocks along C.
Block1D quantize_block_1d(const std::vector<float>& a, int64_t R, int64_t C, DType in, DType fp8, bool pow2) {
  const int64_t nb = (C + 127) / 128, ld = (R + 3) / 4 * 4;
  Block1D q{std::vector<uint8_t>(static_cast<size_t>(R * C)), std::vector<float>(static_cast<size_t>(nb * ld), 0.f)};
  const float vmax = in == DType::bf16 ? f32_from_bits(0x7F7F0000u) : (in == DType::f16 ? 65504.f : FLT_MAX);
  const float fmax = fp8 == DType::fp8_e5m2 ? 57344.f : 448.f;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      float amax = 0.f;
      for (int64_t c = b * 128; c < std::min(C, (b + 1) * 128); ++c) amax = amax_fold(amax, a[r * C + c]);
      const float s = compute_scale(amax, fmax, pow2, 0.f, vmax);
      q.scale_inv[b * ld + r] = 1.0f / s;
      for (int64_t c = b * 128; c < std::min(C, (b + 1) * 128); ++c) {
        const float v = a[r * C + c] * s;
        q.data[r * C + c] = fp8 == DType::fp8_e5m2 ? e5m2_from_f32(v) : e4m3_from_f32(v);
      }
    }
  return q;
}
std::vector<float> scales_of(const Tensor& t) { return t.to(Device::cpu()).to_f32_vector(); }

QuantizerConfig block_config(DType fp8, bool pow2) {
  QuantizerConfig c;
  c.format = QuantFormat::fp8_block_1d;
  c.data_dtype = fp8;
  c.pow2_scales = pow2;
  return c;
}

struct NqCase {
  NormKind kind;
  DType tx, tp, tout, fp8;
  bool pow2;
  int64_t M, H;
};
std::vector<NqCase> nq_cases() {
  std::vector<NqCase> v;
  for (NormKind k : {NormKind::layernorm, NormKind::rmsnorm})
    for (auto [tx, tp, to] : {std::tuple{DType::bf16, DType::bf16, DType::bf16}, std::tuple{DType::f32, DType::f32, DType::bf16},
                              std::tuple{DType::f16, DType::f32, DType::f16}, std::tuple{DType::f32, DType::f32, DType::f32}})
      for (auto [M, H] : {std::pair<int64_t, int64_t>{1, 128}, {37, 1000}, {130, 4096}, {6, 136}})
        v.push_back({k, tx, tp, to, DType::fp8_e4m3, true, M, H});
  // The staged plain forward (two rows per block, the fused kernel one): equal bits still, odd last row included.
  for (NormKind k : {NormKind::layernorm, NormKind::rmsnorm})
    for (auto [tx, tp, to] : {std::tuple{DType::bf16, DType::bf16, DType::bf16}, std::tuple{DType::f32, DType::f32, DType::bf16}})
      for (auto [M, H] : {std::pair<int64_t, int64_t>{3001, 4096}, {5000, 1000}})
        v.push_back({k, tx, tp, to, DType::fp8_e4m3, true, M, H});
  v.push_back({NormKind::layernorm, DType::bf16, DType::bf16, DType::bf16, DType::fp8_e5m2, false, 67, 776});
  v.push_back({NormKind::layernorm, DType::bf16, DType::bf16, DType::bf16, DType::fp8_e4m3, false, 67, 776});
  return v;
}
std::string nq_name(const ::testing::TestParamInfo<NqCase>& i) {
  const NqCase& c = i.param;
  return std::string(norm_kind_name(c.kind)) + "_" + std::string(dtype_name(c.tx)) + "_p" +
         std::string(dtype_name(c.tp)) + "_o" + std::string(dtype_name(c.tout)) + "_" +
         std::string(dtype_name(c.fp8)) + (c.pow2 ? "_pow2" : "") + "_" + std::to_string(c.M) + "x" +
         std::to_string(c.H);
}

class NormQuantizeTest : public ::testing::TestWithParam<NqCase> {
 protected:
  struct Inputs {
    Tensor x, gamma, beta;
  };
  Inputs make(Device dev) const {
    const NqCase& c = GetParam();
    Inputs in;
    in.x = random_2d(c.M, c.H, c.tx, 3 + c.H, dev, Layout::contiguous, 3.f, 0.2f);
    in.gamma = Tensor::empty({c.H}, c.tp, dev);
    in.gamma.fill_normal(4, 1.f, 0.5f);
    if (c.kind == NormKind::layernorm) {
      in.beta = Tensor::empty({c.H}, c.tp, dev);
      in.beta.fill_normal(5, 0.f, 0.3f);
    }
    return in;
  }
  // The row-wise bytes and scales must equal this file's block-1D quantization of the plain norm output.
  void expect_matches_plain(const NormQuantized& r, const Inputs& in) const {
    const NqCase& c = GetParam();
    NormForward f = norm_forward(c.kind, in.x, in.gamma, in.beta, 1e-5f, c.tout);
    const Block1D ref = quantize_block_1d(f.out.to_f32_vector(), c.M, c.H, c.tout, c.fp8, c.pow2);
    ASSERT_TRUE(r.out.has(Usage::rowwise));
    EXPECT_EQ(bytes_of(r.out.rowwise_data), ref.data);
    EXPECT_EQ(scales_of(r.out.rowwise_scale_inv), ref.scale_inv);
    EXPECT_EQ(bytes_of(r.rstd), bytes_of(f.rstd));
    if (c.kind == NormKind::layernorm) {
      EXPECT_EQ(bytes_of(r.mean), bytes_of(f.mean));
    }
    EXPECT_EQ(r.out.shape, in.x.shape());
    EXPECT_EQ(r.out.original_dtype, c.tout);
  }
};

TEST_P(NormQuantizeTest, FusedCudaKernelEqualsNormThenQuantize) {
  TE_REQUIRE_GPU();
  const NqCase& c = GetParam();
  const Inputs in = make(Device::cuda(0));
  Quantizer q(block_config(c.fp8, c.pow2));
  ASSERT_TRUE(norm_quantize_fusable(in.x, in.gamma, in.beta, c.tout, q, Usage::rowwise));
  const NormQuantized r = norm_forward_quantized(c.kind, in.x, in.gamma, in.beta, 1e-5f, c.tout, q, Usage::rowwise);
  EXPECT_TRUE(r.fused);
  expect_matches_plain(r, in);
}

// The same comparison through the quantization engineer's CUDA Quantizer (the unfused path as the graph runs it).
TEST_P(NormQuantizeTest, FusedCudaKernelEqualsUnfusedQuantizerPath) {
  TE_REQUIRE_GPU();
  const NqCase& c = GetParam();
  const Inputs in = make(Device::cuda(0));
  Quantizer q(block_config(c.fp8, c.pow2));
  const NormQuantized fused = norm_forward_quantized(c.kind, in.x, in.gamma, in.beta, 1e-5f, c.tout, q, Usage::rowwise);
  const NormQuantized plain =
      norm_forward_then_quantize(c.kind, in.x, in.gamma, in.beta, 1e-5f, c.tout, q, Usage::rowwise);
  EXPECT_FALSE(plain.fused);
  EXPECT_EQ(bytes_of(fused.out.rowwise_data), bytes_of(plain.out.rowwise_data));
  EXPECT_EQ(bytes_of(fused.out.rowwise_scale_inv), bytes_of(plain.out.rowwise_scale_inv));
}

TEST_P(NormQuantizeTest, CpuPathEqualsNormThenBlockQuantize) {
  const NqCase& c = GetParam();
  const Inputs in = make(Device::cpu());
  Quantizer q(block_config(c.fp8, c.pow2));
  const NormQuantized r = norm_forward_quantized(c.kind, in.x, in.gamma, in.beta, 1e-5f, c.tout, q, Usage::rowwise);
  EXPECT_FALSE(r.fused);
  expect_matches_plain(r, in);
}

INSTANTIATE_TEST_SUITE_P(Ops, NormQuantizeTest, ::testing::ValuesIn(nq_cases()), nq_name);

// Column-wise usage is never fused (its blocks run across rows): both copies come from the quantizer.
TEST(NormQuantize, BothUsagesFallBackAndMatch) {
  for (bool cuda : {false, true}) {
    if (cuda && cuda_device_count() == 0) continue;
    const Device dev = device_for(cuda);
    const int64_t M = 200, H = 264;
    const Tensor x = random_2d(M, H, DType::bf16, 8, dev, Layout::col_slice);
    Tensor g = Tensor::empty({H}, DType::bf16, dev);
    g.fill_normal(9, 1.f, 0.2f);
    Quantizer q(block_config(DType::fp8_e4m3, true));
    const NormQuantized r =
        norm_forward_quantized(NormKind::rmsnorm, x, g, Tensor(), 1e-5f, DType::bf16, q, Usage::both);
    EXPECT_FALSE(r.fused);
    const auto y = norm_forward(NormKind::rmsnorm, x, g, Tensor(), 1e-5f, DType::bf16).out.to_f32_vector();
    EXPECT_EQ(bytes_of(r.out.rowwise_data), quantize_block_1d(y, M, H, DType::bf16, DType::fp8_e4m3, true).data);
    std::vector<float> yt(y.size());
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < H; ++j) yt[j * M + i] = y[i * H + j];
    const Block1D col = quantize_block_1d(yt, H, M, DType::bf16, DType::fp8_e4m3, true);
    EXPECT_EQ(bytes_of(r.out.columnwise_data), col.data) << (cuda ? "cuda" : "cpu");
    EXPECT_EQ(scales_of(r.out.columnwise_scale_inv), col.scale_inv) << (cuda ? "cuda" : "cpu");
  }
}

TEST(ActQuantize, RowAndColumnwiseEqualActThenBlockQuantize) {
  for (bool cuda : {false, true}) {
    if (cuda && cuda_device_count() == 0) continue;
    const Device dev = device_for(cuda);
    for (ActKind k : {ActKind::gelu, ActKind::swiglu, ActKind::relu}) {
      const int64_t M = 131, F = 200, in = k == ActKind::swiglu ? 2 * F : F;
      const Tensor x = random_2d(M, in, DType::bf16, 10, dev, Layout::contiguous, 2.f);
      Quantizer q(block_config(DType::fp8_e4m3, true));
      const QuantizedTensor r = act_forward_quantized(k, x, DType::bf16, q, Usage::both);
      const auto y = act_forward(k, x, DType::bf16).to_f32_vector();
      const Block1D row = quantize_block_1d(y, M, F, DType::bf16, DType::fp8_e4m3, true);
      EXPECT_EQ(bytes_of(r.rowwise_data), row.data) << act_kind_name(k);
      EXPECT_EQ(scales_of(r.rowwise_scale_inv), row.scale_inv) << act_kind_name(k);
      std::vector<float> yt(y.size());
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < F; ++j) yt[j * M + i] = y[i * F + j];
      const Block1D col = quantize_block_1d(yt, F, M, DType::bf16, DType::fp8_e4m3, true);
      EXPECT_EQ(bytes_of(r.columnwise_data), col.data) << act_kind_name(k);
      EXPECT_EQ(scales_of(r.columnwise_scale_inv), col.scale_inv) << act_kind_name(k);
    }
  }
}

// x [M, F] of dtype dt, random, with ±Inf and NaN in its first row (when F allows).
Tensor activation_input(int64_t M, int64_t F, DType dt) {
  std::vector<float> v = random_2d(M, F, DType::f32, 21, Device::cpu(), Layout::contiguous, 3.f).to_f32_vector();
  const float special[] = {INFINITY, -INFINITY, NAN, -NAN};
  for (size_t i = 0; i < 4 && i < v.size(); ++i) v[i * 37 % v.size()] = special[i];
  return Tensor::from_f32(v, {M, F}, dt, Device::cuda());
}

// The fused CUDA pass (row-wise FP8 block 1D / MXFP8, GELU / ReLU, bf16 / f16 input) against act_forward then
// quantize on the GPU: same bytes, including blocks cut by the edge of the row and non-finite inputs; the
// activation it can keep for the backward has act_forward's bytes.
TEST(ActQuantize, FusedRowwiseEqualsActThenQuantizeOnGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << no_gpu_reason();
  for (QuantFormat f : {QuantFormat::fp8_block_1d, QuantFormat::mxfp8}) {
    QuantizerConfig cfg = block_config(DType::fp8_e4m3, true);
    cfg.format = f;
    for (DType dt : {DType::bf16, DType::f16})
      for (ActKind k : {ActKind::gelu, ActKind::relu}) {
        for (auto [M, F] : {std::pair<int64_t, int64_t>{131, 200}, {1024, 4096}}) {
          const Tensor x = activation_input(M, F, dt);
          Quantizer fused(cfg), plain(cfg);
          ASSERT_TRUE(fused.can_fuse_activation(x));
          Tensor kept;
          const QuantizedTensor a = act_forward_quantized(k, x, dt, fused, Usage::rowwise);
          const QuantizedTensor a_kept = act_forward_quantized(k, x, dt, fused, Usage::rowwise, Stream(), {}, &kept);
          const Tensor y = act_forward(k, x, dt);
          const QuantizedTensor b = plain.quantize(y, Usage::rowwise);
          const std::string what = std::string(quant_format_name(f)) + " " + std::string(act_kind_name(k)) + " " +
                                   std::string(dtype_name(dt)) + " " + std::to_string(M) + "x" + std::to_string(F);
          EXPECT_EQ(bytes_of(a.rowwise_data), bytes_of(b.rowwise_data)) << what;
          EXPECT_EQ(bytes_of(a.rowwise_scale_inv), bytes_of(b.rowwise_scale_inv)) << what;
          EXPECT_EQ(bytes_of(a_kept.rowwise_data), bytes_of(b.rowwise_data)) << what;
          ASSERT_TRUE(kept.defined()) << what;
          EXPECT_EQ(kept.shape(), y.shape()) << what;
          EXPECT_EQ(bytes_of(kept), bytes_of(y)) << what;
        }
      }
  }
}

// Both copies from one fused pass (what a training forward saves for FC2's wgrad) against act_forward then quantize
// on the GPU: same bytes for each copy, tiles cut by both edges, non-finite inputs.
TEST(ActQuantize, FusedBothCopiesEqualActThenQuantizeOnGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << no_gpu_reason();
  for (QuantFormat f : {QuantFormat::fp8_block_1d, QuantFormat::mxfp8}) {
    QuantizerConfig cfg = block_config(DType::fp8_e4m3, true);
    cfg.format = f;
    for (DType dt : {DType::bf16, DType::f16})
      for (ActKind k : {ActKind::gelu, ActKind::relu})
        for (auto [M, F] : {std::pair<int64_t, int64_t>{131, 200}, {1024, 4096}, {8, 136}}) {
          const Tensor x = activation_input(M, F, dt);
          Quantizer fused(cfg), plain(cfg);
          ASSERT_TRUE(fused.can_fuse_activation(x, Usage::both));
          const QuantizedTensor a = act_forward_quantized(k, x, dt, fused, Usage::both);
          const QuantizedTensor c = act_forward_quantized(k, x, dt, fused, Usage::columnwise);
          const QuantizedTensor b = plain.quantize(act_forward(k, x, dt), Usage::both);
          const std::string what = std::string(quant_format_name(f)) + " " + std::string(act_kind_name(k)) + " " +
                                   std::string(dtype_name(dt)) + " " + std::to_string(M) + "x" + std::to_string(F);
          EXPECT_EQ(bytes_of(a.rowwise_data), bytes_of(b.rowwise_data)) << what;
          EXPECT_EQ(bytes_of(a.rowwise_scale_inv), bytes_of(b.rowwise_scale_inv)) << what;
          EXPECT_EQ(bytes_of(a.columnwise_data), bytes_of(b.columnwise_data)) << what;
          EXPECT_EQ(bytes_of(a.columnwise_scale_inv), bytes_of(b.columnwise_scale_inv)) << what;
          EXPECT_FALSE(c.rowwise_data.defined()) << what;
          EXPECT_EQ(bytes_of(c.columnwise_data), bytes_of(b.columnwise_data)) << what;
          EXPECT_EQ(bytes_of(c.columnwise_scale_inv), bytes_of(b.columnwise_scale_inv)) << what;
        }
  }
}

// The fused pass writes the copies' GEMM images as the unfused quantize does (bf16, as an emulated GEMM on the GPU
// reads them): same bytes for each copy's image and for the copies themselves.
TEST(ActQuantize, FusedImagesEqualActThenQuantizeOnGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << no_gpu_reason();
  const ImageSpec spec{DType::bf16, false};
  for (QuantFormat f : {QuantFormat::fp8_block_1d, QuantFormat::mxfp8}) {
    QuantizerConfig cfg = block_config(DType::fp8_e4m3, true);
    cfg.format = f;
    for (Usage u : {Usage::rowwise, Usage::both})
      for (auto [M, F] : {std::pair<int64_t, int64_t>{131, 200}, {1024, 4096}}) {
        const Tensor x = activation_input(M, F, DType::bf16);
        Quantizer fused(cfg), plain(cfg);
        ASSERT_TRUE(fused.can_fuse_activation(x, u));
        const QuantizedTensor a = act_forward_quantized(ActKind::gelu, x, DType::bf16, fused, u, Stream(), {}, nullptr, spec);
        const QuantizedTensor b =
            plain.quantize(act_forward(ActKind::gelu, x, DType::bf16), u, Stream(), {}, spec);
        const std::string what = std::string(quant_format_name(f)) + " " + std::string(usage_name(u)) + " " +
                                 std::to_string(M) + "x" + std::to_string(F);
        ASSERT_TRUE(a.rowwise_image.defined()) << what;
        EXPECT_EQ(bytes_of(a.rowwise_data), bytes_of(b.rowwise_data)) << what;
        EXPECT_EQ(bytes_of(a.rowwise_image), bytes_of(b.rowwise_image)) << what;
        EXPECT_EQ(bytes_of(a.rowwise_image), bytes_of(b.dequantize_usage(Usage::rowwise, DType::bf16))) << what;
        EXPECT_EQ(a.columnwise_image.defined(), u == Usage::both) << what;
        if (u != Usage::both) continue;
        EXPECT_EQ(bytes_of(a.columnwise_data), bytes_of(b.columnwise_data)) << what;
        EXPECT_EQ(bytes_of(a.columnwise_image), bytes_of(b.columnwise_image)) << what;
      }
  }
}

// NVFP4 1D fuses the activation row-wise only (the column-wise copy's Hadamard groups run along tokens), on 16-bit
// CUDA tensors whose rows are whole 1x16 blocks.
TEST(ActQuantize, Nvfp4FusesRowwiseOnWholeBlocksOnly) {
  QuantizerConfig cfg;
  cfg.format = QuantFormat::nvfp4_1d;
  const Quantizer q(cfg);
  EXPECT_TRUE(q.can_fuse_activation({1024, 4096}, DType::bf16, Device::cuda(), Usage::rowwise));
  EXPECT_TRUE(q.can_fuse_activation({3, 16}, DType::f16, Device::cuda(), Usage::rowwise));
  EXPECT_FALSE(q.can_fuse_activation({1024, 4096}, DType::bf16, Device::cuda(), Usage::both));
  EXPECT_FALSE(q.can_fuse_activation({1024, 4096}, DType::bf16, Device::cuda(), Usage::columnwise));
  EXPECT_FALSE(q.can_fuse_activation({131, 200}, DType::bf16, Device::cuda(), Usage::rowwise));
  EXPECT_FALSE(q.can_fuse_activation({1024, 4096}, DType::f32, Device::cuda(), Usage::rowwise));
  EXPECT_FALSE(q.can_fuse_activation({1024, 4096}, DType::bf16, Device::cpu(), Usage::rowwise));
  cfg.format = QuantFormat::nvfp4_2d;
  EXPECT_FALSE(Quantizer(cfg).can_fuse_activation({1024, 4096}, DType::bf16, Device::cuda(), Usage::rowwise));
}

// The fused NVFP4 path (an amax pass over act(x), then the row-wise kernel applying the activation as it loads)
// against act_forward then quantize on the GPU: the same codes, block scales, per-tensor amax, GEMM image and kept
// activation, with and without stochastic rounding, and with a group amax reduction (here one that raises the amax,
// as a rank holding larger values would) applied between the two passes.
TEST(ActQuantize, FusedNvfp4RowwiseEqualsActThenQuantizeOnGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << no_gpu_reason();
  const AmaxReducer raise = [](Tensor& amax, const Stream& s) {
    const float v = amax.to_f32_vector(s)[0];
    amax.copy_from(Tensor::from_f32({3.f * v}, {1}, DType::f32, amax.device()), s);
  };
  const ImageSpec spec{DType::bf16, false};
  for (bool sr : {false, true})
    for (bool reduce : {false, true})
      for (DType dt : {DType::bf16, DType::f16})
        for (ActKind k : {ActKind::gelu, ActKind::relu})
          for (auto [M, F] : {std::pair<int64_t, int64_t>{131, 208}, {1024, 4096}, {3, 16}}) {
            QuantizerConfig cfg;
            cfg.format = QuantFormat::nvfp4_1d;
            cfg.stochastic_rounding = sr;
            cfg.seed = 1234;
            const Tensor x = activation_input(M, F, dt);
            Quantizer fused(cfg), plain(cfg);
            ASSERT_TRUE(fused.can_fuse_activation(x));
            const AmaxReducer r = reduce ? raise : AmaxReducer();
            Tensor kept;
            const QuantizedTensor a = act_forward_quantized(k, x, dt, fused, Usage::rowwise, Stream(), r, &kept, spec);
            const Tensor y = act_forward(k, x, dt);
            const QuantizedTensor b = plain.quantize(y, Usage::rowwise, Stream(), r, spec);
            const std::string what = std::string(act_kind_name(k)) + " " + std::string(dtype_name(dt)) + " " +
                                     std::to_string(M) + "x" + std::to_string(F) + (sr ? " sr" : "") +
                                     (reduce ? " reduced" : "");
            EXPECT_EQ(bytes_of(a.rowwise_amax), bytes_of(b.rowwise_amax)) << what;
            EXPECT_EQ(bytes_of(a.rowwise_data), bytes_of(b.rowwise_data)) << what;
            EXPECT_EQ(bytes_of(a.rowwise_scale_inv), bytes_of(b.rowwise_scale_inv)) << what;
            ASSERT_TRUE(a.rowwise_image.defined()) << what;
            EXPECT_EQ(bytes_of(a.rowwise_image), bytes_of(b.rowwise_image)) << what;
            ASSERT_TRUE(kept.defined()) << what;
            EXPECT_EQ(bytes_of(kept), bytes_of(y)) << what;
          }
}

}  // namespace
}  // namespace te
