// The CPU quantize the engine runs (quantize_cpu.cpp) against the reference it must equal byte for byte
// (quantize_ref.cpp): every FP8 format, both element formats, each usage, input dtypes and strides, images, special
// values, scaling options, and f32 inputs spread over every binade so that each rounding case of the fp8 casts is
// taken. NVFP4 is handed to the reference itself; one case checks that hand-over.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "ops/quant/quant_kernels.h"
#include "ops/quant/quant_layout.h"
#include "quant_test_util.h"

namespace te {
namespace {

struct Case {
  QuantFormat format;
  DType data_dtype;
  bool pow2 = false;
  float delayed_scale = 0.f;  // per tensor: this given scale (delayed scaling) instead of one from the amax
  float eps = 0.f;            // amax_epsilon
  float amax_start = 0.f;     // per tensor, current scaling: the amax the pass folds into (an earlier partial max)
};

std::string case_name(const Case& c) {
  std::string s = std::string(quant_format_name(c.format)) + "_" + std::string(dtype_name(c.data_dtype));
  if (c.pow2) s += "_pow2";
  if (c.delayed_scale == 1.f) s += "_scale1";
  if (c.delayed_scale > 1.f) s += "_scale3p5";
  if (c.eps > 0.f) s += "_eps";
  if (c.amax_start > 0.f) s += "_amax_start";
  return s;
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

// Every byte one kernel writes for one input: both copies' data and scales, the amax and the images.
struct Result {
  std::vector<uint8_t> row_data, row_scale, col_data, col_scale, row_image, col_image;
  float amax = 0.f;
};

using AmaxFn = void (*)(const QuantInput&, const QuantParams&, float*, float*, const Stream&);

size_t at_least_one(int64_t bytes) { return static_cast<size_t>(std::max<int64_t>(bytes, 1)); }

Result run(QuantCastFn cast, AmaxFn amax_fn, const Case& c, const QuantInput& in, Usage usages,
           const DType* image_dtype) {
  QuantParams p;
  p.format = c.format;
  p.data_dtype = c.data_dtype;
  p.rowwise = has_usage(usages, Usage::rowwise);
  p.columnwise = has_usage(usages, Usage::columnwise);
  p.pow2 = c.pow2;
  p.eps = c.eps;
  if (c.delayed_scale > 0.f) p.scale = &c.delayed_scale;
  Result r;
  r.amax = c.amax_start;
  if (c.format == QuantFormat::fp8_per_tensor && !p.scale) amax_fn(in, p, &r.amax, nullptr, Stream());
  QuantOutputs out;
  out.row_amax = &r.amax;
  const int64_t scale_bytes = dtype_storage_bytes(quant_format_info(c.format).scale_dtype, 1);
  auto make = [&](Usage u, std::vector<uint8_t>& data, std::vector<uint8_t>& scale, QuantCopyOut& o) {
    o.layout = copy_layout(c.format, u, in.M, in.K);
    // At least one byte each, as the quantizer's tensors have: an empty copy's pointers are still valid.
    data.assign(at_least_one(dtype_storage_bytes(c.data_dtype, shape_numel(copy_data_shape(o.layout)))),
                0xA5);  // unwritten bytes show
    scale.assign(at_least_one(shape_numel(copy_scale_shape(o.layout)) * scale_bytes), 0);
    o.data = data.data();
    o.scale_inv = scale.data();
  };
  if (p.rowwise) make(Usage::rowwise, r.row_data, r.row_scale, out.row);
  if (p.columnwise) make(Usage::columnwise, r.col_data, r.col_scale, out.col);
  if (image_dtype) {
    out.image = ImageSpec{*image_dtype, false};
    const size_t bytes = at_least_one(dtype_storage_bytes(*image_dtype, in.M * in.K));
    if (p.rowwise) r.row_image.assign(bytes, 0x5A), out.row_image = r.row_image.data();
    if (p.columnwise) r.col_image.assign(bytes, 0x5A), out.col_image = r.col_image.data();
  }
  cast(in, p, out, Stream());
  return r;
}

void expect_same(const Result& got, const Result& ref, const std::string& what) {
  EXPECT_EQ(got.row_data, ref.row_data) << what << ": row-wise data";
  EXPECT_EQ(got.row_scale, ref.row_scale) << what << ": row-wise scales";
  EXPECT_EQ(got.col_data, ref.col_data) << what << ": column-wise data";
  EXPECT_EQ(got.col_scale, ref.col_scale) << what << ": column-wise scales";
  EXPECT_EQ(got.row_image, ref.row_image) << what << ": row-wise image";
  EXPECT_EQ(got.col_image, ref.col_image) << what << ": column-wise image";
  EXPECT_EQ(std::memcmp(&got.amax, &ref.amax, sizeof(float)), 0) << what << ": amax " << got.amax << " / " << ref.amax;
}

QuantInput input_of(const Tensor& t) {
  QuantInput in;
  in.data = t.data_ptr();
  in.dtype = t.dtype();
  in.M = t.size(0);
  in.K = t.size(1);
  in.stride_m = t.stride(0);
  in.stride_k = t.stride(1);
  return in;
}

void expect_same_for(const Case& c, const Tensor& x, Usage u, const DType* image, const std::string& what) {
  const QuantInput in = input_of(x);
  expect_same(run(quantize_cpu, quant_amax_cpu, c, in, u, image), run(quantize_ref, quant_amax_ref, c, in, u, image),
              case_name(c) + " " + what + " " + std::string(usage_name(u)) +
                  (image ? " image " + std::string(dtype_name(*image)) : ""));
}

const DType kF32 = DType::f32, kBf16 = DType::bf16, kF16 = DType::f16;
const DType* const kImages[] = {nullptr, &kF32, &kBf16, &kF16};
const Usage kUsages[] = {Usage::rowwise, Usage::columnwise, Usage::both};

class QuantizeCpu : public ::testing::TestWithParam<Case> {};

// Shapes with partial blocks and tiles, several panels, and empty ones; values with and without specials (an Inf
// sets a per-tensor amax to Inf, so finite inputs give current scaling a scale other than 1).
TEST_P(QuantizeCpu, EqualsTheReference) {
  const Case c = GetParam();
  const Shape shapes[] = {{1, 1}, {3, 130}, {129, 257}, {300, 128}, {0, 128}, {128, 0}};
  uint64_t seed = 1;
  for (const Shape& shape : shapes)
    for (DType dt : {DType::bf16, DType::f16, DType::f32})
      for (bool specials : {true, false}) {
        const Tensor x = qtest::make_input(shape, dt, seed++, specials);
        for (Usage u : kUsages)
          for (const DType* image : kImages)
            expect_same_for(c, x, u, image,
                            shape_str(shape) + " " + std::string(dtype_name(dt)) + (specials ? " specials" : ""));
      }
}

// Inputs that are not dense: a transposed view (each element read on its own) and a slice of columns (rows read
// as spans, at a row stride that is not the row length, from an offset).
TEST_P(QuantizeCpu, StridedInputEqualsTheReference) {
  const Case c = GetParam();
  for (DType dt : {DType::bf16, DType::f32}) {
    const Tensor base = qtest::make_input({200, 300}, dt, 77, false);
    const Tensor views[] = {base.transpose(0, 1), base.narrow(1, 5, 260), base.narrow(0, 3, 150).narrow(1, 40, 128)};
    const char* names[] = {"transposed", "column slice", "row and column slice"};
    for (int v = 0; v < 3; ++v)
      for (Usage u : kUsages)
        for (const DType* image : {static_cast<const DType*>(nullptr), &kF32})
          expect_same_for(c, views[v], u, image, std::string(names[v]) + " " + std::string(dtype_name(dt)));
  }
}

// f32 inputs whose bit patterns step through every binade (NaNs and infinities included), led by the exact ties
// and powers of two of both fp8 formats' subnormal ranges. With the per-tensor scale 1 the cast sees them as they
// are: every rounding case of both casts, normal and subnormal, saturating, ties included.
TEST_P(QuantizeCpu, EveryBinadeEqualsTheReference) {
  const Case c = GetParam();
  const int64_t M = 256, K = 1024;
  std::vector<float> v(static_cast<size_t>(M * K));
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits = static_cast<uint32_t>(i) * 16411u;  // odd: 2^18 distinct patterns over all 2^32
    // Exact ties of normal values: half of E4M3's last kept bit (bit 20), or of E5M2's (bit 21), that bit odd or even.
    if (i % 3 == 0) bits = (bits & 0xFF800000u) | 0x00080000u | ((bits >> 9) & 0x00100000u);
    if (i % 3 == 1) bits = (bits & 0xFF800000u) | 0x00100000u | ((bits >> 9) & 0x00200000u);
    std::memcpy(&v[i], &bits, sizeof(float));
  }
  // Subnormal ties ((k + 1/2) quanta: 2^-9 for E4M3, 2^-16 for E5M2), their neighbours, and powers of two.
  size_t at = 0;
  const auto put = [&](float f) {
    v[at++] = f;
    v[at++] = -f;
    v[at++] = std::nextafter(f, 0.f);
    v[at++] = std::nextafter(f, 1.f);
  };
  for (int k = 0; k < 8; ++k) put((k + 0.5f) * std::ldexp(1.f, -9));
  for (int k = 0; k < 4; ++k) put((k + 0.5f) * std::ldexp(1.f, -16));
  for (int e = -40; e <= 20; ++e) put(std::ldexp(1.f, e));
  const Tensor x = Tensor::from_f32(v, {M, K}, DType::f32);
  for (Usage u : {Usage::rowwise, Usage::both}) expect_same_for(c, x, u, &kF32, "every binade");
}

const Case kCases[] = {
    {QuantFormat::fp8_per_tensor, DType::fp8_e4m3},
    {QuantFormat::fp8_per_tensor, DType::fp8_e5m2, true},
    {QuantFormat::fp8_per_tensor, DType::fp8_e4m3, false, 0.f, 0.f, 0.25f},
    {QuantFormat::fp8_per_tensor, DType::fp8_e4m3, false, 1.f},
    {QuantFormat::fp8_per_tensor, DType::fp8_e5m2, false, 1.f},
    {QuantFormat::fp8_per_tensor, DType::fp8_e4m3, false, 3.5f},
    {QuantFormat::fp8_block_1d, DType::fp8_e4m3},
    {QuantFormat::fp8_block_1d, DType::fp8_e4m3, true},
    {QuantFormat::fp8_block_1d, DType::fp8_e4m3, true, 0.f, 1e-3f},
    {QuantFormat::fp8_block_1d, DType::fp8_e5m2},
    {QuantFormat::fp8_block_2d, DType::fp8_e4m3, true},
    {QuantFormat::fp8_block_2d, DType::fp8_e5m2},
    {QuantFormat::mxfp8, DType::fp8_e4m3},
    {QuantFormat::mxfp8, DType::fp8_e5m2},
    {QuantFormat::nvfp4_1d, DType::fp4_e2m1},
};
INSTANTIATE_TEST_SUITE_P(Formats, QuantizeCpu, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

}  // namespace
}  // namespace te
