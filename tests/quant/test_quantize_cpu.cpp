// The CPU quantize the engine runs (quantize_cpu.cpp) against the reference it must equal byte for byte
// (quantize_ref.cpp): every format, both element formats, each usage, input dtypes and strides, images, special
// values, and f32 inputs spread over every binade so that each rounding case of the fp8 casts is taken.
#include <gtest/gtest.h>

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
  bool pow2;
  bool delayed;  // per tensor: the given scale 1 (the cast sees x itself) instead of one from the amax
};

std::string case_name(const Case& c) {
  return std::string(quant_format_name(c.format)) + "_" + std::string(dtype_name(c.data_dtype)) +
         (c.pow2 ? "_pow2" : "") + (c.delayed ? "_delayed" : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

// Every byte one kernel writes for one input: both copies' data and scales, the amax and the images.
struct Result {
  std::vector<uint8_t> row_data, row_scale, col_data, col_scale, row_image, col_image;
  float amax = 0.f;
};

using AmaxFn = void (*)(const QuantInput&, const QuantParams&, float*, float*, const Stream&);

Result run(QuantCastFn cast, AmaxFn amax_fn, const Case& c, const QuantInput& in, Usage usages,
           const DType* image_dtype) {
  QuantParams p;
  p.format = c.format;
  p.data_dtype = c.data_dtype;
  p.rowwise = has_usage(usages, Usage::rowwise);
  p.columnwise = has_usage(usages, Usage::columnwise);
  p.pow2 = c.pow2;
  const float delayed_scale = 1.0f;
  if (c.delayed) p.scale = &delayed_scale;
  Result r;
  if (c.format == QuantFormat::fp8_per_tensor && !c.delayed) amax_fn(in, p, &r.amax, nullptr, Stream());
  QuantOutputs out;
  out.row_amax = &r.amax;
  const int scale_bytes = dtype_storage_bytes(quant_format_info(c.format).scale_dtype, 1);
  auto make = [&](Usage u, std::vector<uint8_t>& data, std::vector<uint8_t>& scale, QuantCopyOut& o) {
    o.layout = copy_layout(c.format, u, in.M, in.K);
    data.assign(static_cast<size_t>(shape_numel(copy_data_shape(o.layout))), 0xA5);  // unwritten bytes show
    scale.assign(static_cast<size_t>(shape_numel(copy_scale_shape(o.layout)) * scale_bytes), 0);
    o.data = data.data();
    o.scale_inv = scale.data();
  };
  if (p.rowwise) make(Usage::rowwise, r.row_data, r.row_scale, out.row);
  if (p.columnwise) make(Usage::columnwise, r.col_data, r.col_scale, out.col);
  if (image_dtype) {
    out.image = ImageSpec{*image_dtype, false};
    const size_t bytes = static_cast<size_t>(in.M * in.K * dtype_storage_bytes(*image_dtype, 1));
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

class QuantizeCpu : public ::testing::TestWithParam<Case> {};

TEST_P(QuantizeCpu, EqualsTheReference) {
  const Case c = GetParam();
  const DType f32 = DType::f32, bf16 = DType::bf16;
  const Shape shapes[] = {{1, 1}, {3, 130}, {129, 257}, {256, 128}, {0, 128}, {128, 0}};
  uint64_t seed = 1;
  for (const Shape& shape : shapes)
    for (DType dt : {DType::bf16, DType::f16, DType::f32})
      for (Usage u : {Usage::rowwise, Usage::columnwise, Usage::both})
        for (const DType* image : {static_cast<const DType*>(nullptr), &f32, &bf16}) {
          const Tensor x = qtest::make_input(shape, dt, seed++, true);
          const QuantInput in = input_of(x);
          const std::string what = case_name(c) + " " + shape_str(shape) + " " + std::string(dtype_name(dt)) + " " +
                                   std::string(usage_name(u)) +
                                   (image ? " image " + std::string(dtype_name(*image)) : "");
          expect_same(run(quantize_cpu, quant_amax_cpu, c, in, u, image),
                      run(quantize_ref, quant_amax_ref, c, in, u, image), what);
        }
}

// Rows and columns that are not contiguous (a transposed view): the path that widens element by element.
TEST_P(QuantizeCpu, StridedInputEqualsTheReference) {
  const Case c = GetParam();
  const Tensor base = qtest::make_input({200, 136}, DType::bf16, 77, true);
  const Tensor xt = base.transpose(0, 1);  // [136, 200], stride_k = 136
  for (Usage u : {Usage::rowwise, Usage::both})
    expect_same(run(quantize_cpu, quant_amax_cpu, c, input_of(xt), u, nullptr),
                run(quantize_ref, quant_amax_ref, c, input_of(xt), u, nullptr), case_name(c) + " transposed view");
}

// f32 inputs whose bit patterns step through every binade (NaNs and infinities included). With the per-tensor scale 1
// the cast sees them as they are: every rounding case of both casts, normal and subnormal, saturating, ties included.
TEST_P(QuantizeCpu, EveryBinadeEqualsTheReference) {
  const Case c = GetParam();
  const int64_t M = 256, K = 1024;
  std::vector<float> v(static_cast<size_t>(M * K));
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits = static_cast<uint32_t>(i) * 16411u;  // odd: 2^18 distinct patterns over all 2^32
    // Exact ties: half of E4M3's last kept bit (bit 20), or of E5M2's (bit 21), with that bit odd or even.
    if (i % 3 == 0) bits = (bits & 0xFF800000u) | 0x00080000u | ((bits >> 9) & 0x00100000u);
    if (i % 3 == 1) bits = (bits & 0xFF800000u) | 0x00100000u | ((bits >> 9) & 0x00200000u);
    float f;
    std::memcpy(&f, &bits, sizeof f);
    v[i] = f;
  }
  const Tensor x = Tensor::from_f32(v, {M, K}, DType::f32);
  for (Usage u : {Usage::rowwise, Usage::both})
    expect_same(run(quantize_cpu, quant_amax_cpu, c, input_of(x), u, nullptr),
                run(quantize_ref, quant_amax_ref, c, input_of(x), u, nullptr), case_name(c) + " every binade");
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizeCpu,
                         ::testing::Values(Case{QuantFormat::fp8_per_tensor, DType::fp8_e4m3, false, false},
                                           Case{QuantFormat::fp8_per_tensor, DType::fp8_e5m2, true, false},
                                           Case{QuantFormat::fp8_per_tensor, DType::fp8_e4m3, false, true},
                                           Case{QuantFormat::fp8_per_tensor, DType::fp8_e5m2, false, true},
                                           Case{QuantFormat::fp8_block_1d, DType::fp8_e4m3, false, false},
                                           Case{QuantFormat::fp8_block_1d, DType::fp8_e4m3, true, false},
                                           Case{QuantFormat::fp8_block_1d, DType::fp8_e5m2, false, false},
                                           Case{QuantFormat::fp8_block_2d, DType::fp8_e4m3, true, false},
                                           Case{QuantFormat::fp8_block_2d, DType::fp8_e5m2, false, false},
                                           Case{QuantFormat::mxfp8, DType::fp8_e4m3, false, false},
                                           Case{QuantFormat::mxfp8, DType::fp8_e5m2, false, false},
                                           Case{QuantFormat::nvfp4_1d, DType::fp4_e2m1, false, false}),
                         [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

}  // namespace
}  // namespace te
