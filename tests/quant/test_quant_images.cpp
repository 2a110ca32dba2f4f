// A copy's exact image written by the quantizing pass itself (Quantizer::quantize with an ImageSpec) against the
// dequantization of that copy: the same bytes, for every format × usage × image form, on the CPU reference and on
// the CUDA kernels (the generic tile kernel and the fast row-wise / 128x128 paths); the copies themselves are the
// bytes of a quantize without images.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "common/gpu.h"
#include "engine/error.h"
#include "quant_test_util.h"

namespace te {
namespace {

// q's copy `u` dequantized in the image's form: NVFP4 without its per-tensor factor reads with the unit amax 448·6
// (S_enc = S_dec = 1); a Hadamard-transformed copy as stored (the transform not undone).
Tensor expected_image(QuantizedTensor q, Usage u, const ImageSpec& spec) {
  q.columnwise_rht = false;
  const bool fp4 = nvfp4_format(q.format);
  if (fp4 && !spec.tensor_factor) {
    const Tensor unit = Tensor::from_f32({448.0f * 6.0f}, {1}, DType::f32, q.device());
    q.rowwise_amax = q.columnwise_amax = unit;
  }
  return q.dequantize_usage(u, spec.dtype);
}

const Tensor& image_of(const QuantizedTensor& q, Usage u) {
  return u == Usage::rowwise ? q.rowwise_image : q.columnwise_image;
}

// `with` carries images of `spec`; `without` is the same quantize without them.
void expect_images(const QuantizedTensor& with, const QuantizedTensor& without, const ImageSpec& spec,
                   const std::string& what) {
  EXPECT_EQ(qtest::bytes(with.rowwise_data), qtest::bytes(without.rowwise_data)) << what;
  EXPECT_EQ(qtest::bytes(with.rowwise_scale_inv), qtest::bytes(without.rowwise_scale_inv)) << what;
  EXPECT_EQ(qtest::bytes(with.columnwise_data), qtest::bytes(without.columnwise_data)) << what;
  EXPECT_EQ(qtest::bytes(with.columnwise_scale_inv), qtest::bytes(without.columnwise_scale_inv)) << what;
  EXPECT_EQ(with.nbytes(), without.nbytes()) << what << ": images are not part of the quantized bytes";
  for (Usage u : {Usage::rowwise, Usage::columnwise}) {
    const Tensor& image = image_of(with, u);
    if (!with.has(u)) {
      EXPECT_FALSE(image.defined()) << what << " " << usage_name(u);
      continue;
    }
    ASSERT_TRUE(image.defined()) << what << " " << usage_name(u);
    EXPECT_EQ(image.shape(), (Shape{with.rows(), with.cols()})) << what;
    EXPECT_EQ(image.dtype(), spec.dtype) << what;
    EXPECT_EQ(image.device(), with.device()) << what;
    EXPECT_EQ(qtest::bytes(image), qtest::bytes(expected_image(with, u, spec))) << what << " " << usage_name(u);
  }
}

std::string spec_name(const ImageSpec& s) {
  return std::string(dtype_name(s.dtype)) + (s.tensor_factor ? "" : "_nofactor");
}
const ImageSpec kSpecs[] = {{DType::f32, true}, {DType::bf16, false}, {DType::bf16, true}, {DType::f16, true}};

using Param = std::tuple<int, Shape, Usage>;
class QuantImages : public ::testing::TestWithParam<Param> {};

TEST_P(QuantImages, CpuImageIsTheDequantizedCopy) {
  const auto& [fi, shape, usages] = GetParam();
  const qtest::FormatCase fc = qtest::format_cases()[fi];
  const Tensor x = qtest::make_input(shape, DType::bf16, 31 + fi, /*specials=*/true);
  for (const ImageSpec& spec : kSpecs) {
    Quantizer a(fc.cfg), b(fc.cfg);
    expect_images(a.quantize(x, usages, Stream(), {}, spec), b.quantize(x, usages), spec,
                  std::string(fc.name) + " " + spec_name(spec));
  }
}

TEST_P(QuantImages, CudaImageEqualsCpuImage) {
  TE_REQUIRE_GPU();
  const auto& [fi, shape, usages] = GetParam();
  const qtest::FormatCase fc = qtest::format_cases()[fi];
  const Tensor x = qtest::make_input(shape, DType::bf16, 31 + fi, /*specials=*/true);
  const Tensor xg = x.to(Device::cuda());
  for (const ImageSpec& spec : kSpecs) {
    Quantizer a(fc.cfg), b(fc.cfg), c(fc.cfg);
    const QuantizedTensor gpu = a.quantize(xg, usages, Stream(), {}, spec);
    const std::string what = std::string(fc.name) + " " + spec_name(spec) + " cuda";
    expect_images(gpu, b.quantize(xg, usages), spec, what);
    const QuantizedTensor cpu = c.quantize(x, usages, Stream(), {}, spec);
    EXPECT_EQ(qtest::bytes(gpu.rowwise_image), qtest::bytes(cpu.rowwise_image)) << what;
    EXPECT_EQ(qtest::bytes(gpu.columnwise_image), qtest::bytes(cpu.columnwise_image)) << what;
  }
}

std::string case_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [fi, shape, usages] = info.param;
  std::string s = std::string(qtest::format_cases()[fi].name) + "_";
  for (int64_t d : shape) s += std::to_string(d) + "x";
  return s + std::string(usage_name(usages));
}

// {1, 16}: one row; {130, 200}: blocks cut by both edges; {3, 70, 33}: odd K (the generic kernel); {256, 512}:
// the fast row-wise and 128x128 tile paths of the FP8 formats.
INSTANTIATE_TEST_SUITE_P(All, QuantImages,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(qtest::format_cases().size())),
                                            ::testing::Values(Shape{1, 16}, Shape{130, 200}, Shape{3, 70, 33},
                                                              Shape{256, 512}),
                                            ::testing::Values(Usage::rowwise, Usage::columnwise, Usage::both)),
                         case_name);

TEST(QuantImagesMisc, EmptyTensorHasEmptyImages) {
  for (const auto& fc : qtest::format_cases()) {
    Quantizer q(fc.cfg);
    const QuantizedTensor t = q.quantize(Tensor::zeros({0, 48}, DType::bf16), Usage::rowwise, Stream(), {},
                                         ImageSpec{DType::f32, true});
    ASSERT_TRUE(t.rowwise_image.defined()) << fc.name;
    EXPECT_EQ(t.rowwise_image.shape(), (Shape{0, 48})) << fc.name;
  }
}

TEST(QuantImagesMisc, AnImageIsHighPrecision) {
  Quantizer q(qtest::cfg_of(QuantFormat::mxfp8));
  EXPECT_THROW(q.quantize(Tensor::zeros({4, 32}, DType::bf16), Usage::rowwise, Stream(), {},
                          ImageSpec{DType::fp8_e4m3, true}),
               Error);
}

}  // namespace
}  // namespace te
