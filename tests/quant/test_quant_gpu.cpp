// CUDA quantize/dequantize against the CPU reference, bit for bit (NUMERICS.md §7): every format × usage ×
// input dtype × shape, with special values, strided inputs, and the delayed-scaling state on the device.
#include <gtest/gtest.h>

#include <tuple>

#include "common/gpu.h"
#include "quant_test_util.h"

namespace te {
namespace {

void expect_same(const QuantizedTensor& cpu, const QuantizedTensor& gpu, const std::string& what) {
  EXPECT_EQ(qtest::bytes(gpu.rowwise_data), qtest::bytes(cpu.rowwise_data)) << what << " row-wise data";
  EXPECT_EQ(qtest::bytes(gpu.rowwise_scale_inv), qtest::bytes(cpu.rowwise_scale_inv)) << what << " row-wise scales";
  EXPECT_EQ(qtest::bytes(gpu.columnwise_data), qtest::bytes(cpu.columnwise_data)) << what << " column-wise data";
  EXPECT_EQ(qtest::bytes(gpu.columnwise_scale_inv), qtest::bytes(cpu.columnwise_scale_inv)) << what << " col scales";
  EXPECT_EQ(qtest::bytes(gpu.rowwise_amax), qtest::bytes(cpu.rowwise_amax)) << what << " row amax";
  EXPECT_EQ(qtest::bytes(gpu.columnwise_amax), qtest::bytes(cpu.columnwise_amax)) << what << " col amax";
  for (Usage u : {Usage::rowwise, Usage::columnwise}) {
    if (!cpu.has(u)) continue;
    EXPECT_EQ(qtest::bytes(gpu.dequantize_usage(u)), qtest::bytes(cpu.dequantize_usage(u)))
        << what << " dequantize from " << usage_name(u);
  }
}

using Param = std::tuple<int, Shape, DType, Usage>;
class QuantGpu : public ::testing::TestWithParam<Param> {};

TEST_P(QuantGpu, CudaEqualsCpuReference) {
  TE_REQUIRE_GPU();
  const auto& [fi, shape, dtype, usages] = GetParam();
  const qtest::FormatCase fc = qtest::format_cases()[fi];
  Tensor x = qtest::make_input(shape, dtype, 11 + fi, /*specials=*/true);
  Quantizer qc(fc.cfg), qg(fc.cfg);
  const QuantizedTensor cpu = qc.quantize(x, usages);
  const QuantizedTensor gpu = qg.quantize(x.to(Device::cuda()), usages);
  expect_same(cpu, gpu, fc.name);
}

std::string gpu_case_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& [fi, shape, dtype, usages] = info.param;
  std::string s = std::string(qtest::format_cases()[fi].name) + "_";
  for (int64_t d : shape) s += std::to_string(d) + "x";
  return s + std::string(dtype_name(dtype)) + "_" + std::string(usage_name(usages));
}

const auto kFormats = ::testing::Range(0, static_cast<int>(qtest::format_cases().size()));
const auto kDtypes = ::testing::Values(DType::bf16, DType::f16, DType::f32);
INSTANTIATE_TEST_SUITE_P(Small, QuantGpu,
                         ::testing::Combine(kFormats, ::testing::Values(Shape{1, 16}, Shape{100, 4096},
                                                                        Shape{257, 384}, Shape{130, 200}, Shape{3, 70, 33}),
                                            kDtypes, ::testing::Values(Usage::rowwise, Usage::columnwise, Usage::both)),
                         gpu_case_name);
INSTANTIATE_TEST_SUITE_P(Large, QuantGpu,
                         ::testing::Combine(kFormats, ::testing::Values(Shape{8192, 4096}), ::testing::Values(DType::bf16),
                                            ::testing::Values(Usage::rowwise, Usage::both)),
                         gpu_case_name);

TEST(QuantGpuMisc, StridedInputsMatchCpu) {
  TE_REQUIRE_GPU();
  for (const auto& fc : qtest::format_cases()) {
    Quantizer q(fc.cfg);
    for (DType dt : {DType::bf16, DType::f32}) {
      Tensor base = qtest::make_input({300, 264}, dt, 3, true).to(Device::cuda());
      Tensor b3 = qtest::make_input({6, 40, 136}, dt, 4, true).to(Device::cuda());
      for (const Tensor& view : {base.transpose(0, 1), base.slice(1, 0, 264, 2), b3.transpose(0, 1), base.narrow(0, 1, 257)}) {
        const QuantizedTensor gpu = q.quantize(view, Usage::both);
        const QuantizedTensor cpu = q.quantize(view.to(Device::cpu()), Usage::both);
        expect_same(cpu, gpu, std::string(fc.name) + " " + view.str());
      }
    }
  }
}

TEST(QuantGpuMisc, DelayedScalingOnDevice) {
  TE_REQUIRE_GPU();
  QuantizerConfig c = qtest::cfg_of(QuantFormat::fp8_per_tensor);
  c.scaling = ScalingKind::delayed;
  c.amax_history_len = 3;
  Quantizer qc(c), qg(c);
  for (int step = 0; step < 5; ++step) {
    Tensor x = qtest::make_input({64, 48}, DType::bf16, 100 + step, false);
    expect_same(qc.quantize(x, Usage::both), qg.quantize(x.to(Device::cuda()), Usage::both),
                "step " + std::to_string(step));
    qc.update_scale_after_step();
    qg.update_scale_after_step();
    EXPECT_EQ(qtest::bytes(qg.delayed().scale), qtest::bytes(qc.delayed().scale));
    EXPECT_EQ(qtest::bytes(qg.delayed().amax_history), qtest::bytes(qc.delayed().amax_history));
  }
}

// The e2m1 casts at their decision points: every midpoint between two e2m1 magnitudes, the bf16 values either side
// of it and the magnitudes themselves, in blocks whose factor is exactly 1 (the tensor amax 2688 = 448 · 6 makes
// S_enc 1, and a ±6 in every row block and every 16-token column block makes each block scale 1). The GPU's casts
// round in the f32 adder where the CPU counts midpoints, so the two must agree here above all.
constexpr int64_t kProbeM = 256, kProbeK = 256;
Tensor e2m1_probe_input() {
  std::vector<float> probes;
  for (float m : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f}) {
    const uint32_t b = f32_bits(m);
    for (float v : {m, f32_from_bits(b - 0x10000u), f32_from_bits(b + 0x10000u)}) {  // bf16 neighbours
      probes.push_back(v);
      probes.push_back(-v);
    }
  }
  for (float g : {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, 7.0f}) {
    probes.push_back(g);
    probes.push_back(-g);
  }
  std::vector<float> v(static_cast<size_t>(kProbeM * kProbeK));
  size_t next = 0;
  for (int64_t m = 0; m < kProbeM; ++m)
    for (int64_t k = 0; k < kProbeK; ++k)
      v[static_cast<size_t>(m * kProbeK + k)] =
          (m % 16 == 0 || k % 16 == 0) ? ((m + k) % 2 ? -6.0f : 6.0f) : probes[next++ % probes.size()];
  v[0] = 2688.0f;
  return Tensor::from_f32(v, {kProbeM, kProbeK}, DType::bf16);
}

TEST(QuantGpuMisc, E2m1ProbeInputHitsTheMidpoints) {  // the input above does what it says (CPU)
  Quantizer q(qtest::cfg_of(QuantFormat::nvfp4_1d));
  const std::vector<uint8_t> d = qtest::bytes(q.quantize(e2m1_probe_input(), Usage::rowwise).rowwise_data);
  // Row 1, k = 1..15: ±0.25, ±(0.25 - ulp), ±(0.25 + ulp), ±0.75, ±(0.75 - ulp), ±(0.75 + ulp), ±1.25, 1.25 - ulp.
  const uint8_t want[15] = {0, 8, 0, 8, 1, 9, 2, 10, 1, 9, 2, 10, 2, 10, 2};
  for (int64_t k = 1; k < 16; ++k) {
    const uint8_t byte = d[static_cast<size_t>((kProbeK + k) / 2)];
    EXPECT_EQ(k % 2 ? byte >> 4 : byte & 0xF, want[k - 1]) << "k = " << k;
  }
}

TEST(QuantGpuMisc, Nvfp4CastsAtTheirDecisionPointsMatchCpu) {
  TE_REQUIRE_GPU();
  const Tensor x = e2m1_probe_input();
  for (bool sr : {false, true}) {
    QuantizerConfig c = qtest::cfg_of(QuantFormat::nvfp4_1d);
    c.stochastic_rounding = sr;
    c.seed = 77;
    Quantizer qc(c), qg(c);
    const ImageSpec spec{DType::bf16, false};
    const QuantizedTensor cpu = qc.quantize(x, Usage::both, Stream(), {}, spec);
    const QuantizedTensor gpu = qg.quantize(x.to(Device::cuda()), Usage::both, Stream(), {}, spec);
    expect_same(cpu, gpu, sr ? "stochastic" : "nearest");
    EXPECT_EQ(qtest::bytes(gpu.rowwise_image), qtest::bytes(cpu.rowwise_image)) << sr;
    EXPECT_EQ(qtest::bytes(gpu.columnwise_image), qtest::bytes(cpu.columnwise_image)) << sr;
  }
}

TEST(QuantGpuMisc, EmptyTensor) {
  TE_REQUIRE_GPU();
  for (const auto& fc : qtest::format_cases()) {
    Quantizer q(fc.cfg);
    Tensor x = Tensor::zeros({0, 48}, DType::bf16);
    expect_same(q.quantize(x, Usage::both), q.quantize(x.to(Device::cuda()), Usage::both), fc.name);
  }
}

}  // namespace
}  // namespace te
