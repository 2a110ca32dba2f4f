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
