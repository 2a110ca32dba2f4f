// Inference under a quantized recipe keeps each GEMM weight once where the kernels run, in the quantized form they
// read; the model-dtype copy lives in host memory only for saving. What that must not change: the outputs (graph and
// eager), and the bytes save_weights writes (those of the file that was loaded).
#include <gtest/gtest.h>
#include <teengine/teengine.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "models/rank_group.h"
#include "models/spec.h"
#include "tests/models/test_spec_yaml.h"

namespace te {
namespace {

// Without the weights' GEMM images (models/test_gemm_images.cpp covers them), which add to the device's bytes.
std::string model_yaml(const std::string& recipe, const std::string& device, int tp) {
  return test::SmallSpec{.name = "held", .linear_branch = false, .tp = tp, .recipe = recipe, .device = device,
                         .tokens = 64, .steps = 1, .seed = 3}
             .yaml() +
         "  weight_images: false\n";
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

bool is_gemm_weight(const std::string& name) {
  return name.size() > 7 && name.compare(name.size() - 7, 7, "_weight") == 0 &&
         name.find("layer_norm") == std::string::npos;
}

void expect_weights_held_quantized_only(const std::string& device) {
  for (const char* recipe : {"fp8_block", "mxfp8", "nvfp4", "fp8_current"}) {
    RankGroup g(parse_spec(model_yaml(recipe, device, 2), "<test>"), device == "cpu" ? Device::cpu() : Device::cuda(0));
    for (const auto& m : g.models) {
      int64_t model_dtype_bytes = 0;
      for (const RankParam& p : m->params()) {
        if (!is_gemm_weight(p.spec->name)) continue;
        EXPECT_FALSE(p.value.defined()) << recipe << ": " << p.spec->name << " keeps its model-dtype copy";
        ASSERT_TRUE(p.host_value.defined()) << recipe << ": " << p.spec->name;
        EXPECT_TRUE(p.host_value.device().is_cpu());
        model_dtype_bytes += p.host_value.nbytes();
      }
      // FP8 is half of bf16 and FP4 a quarter, plus scales: the device's weights stay below the bf16 bytes.
      EXPECT_LT(m->memory().weights, model_dtype_bytes + 4 * 128 * 2) << recipe;
    }
  }
}

TEST(QuantizedInference, DeviceKeepsOnlyTheQuantizedWeights) { expect_weights_held_quantized_only("cpu"); }

TEST(QuantizedInferenceGpu, DeviceKeepsOnlyTheQuantizedWeights) {
  TE_REQUIRE_GPU();
  expect_weights_held_quantized_only("cuda");
}

// Unquantized inference and training keep the model-dtype copy on the device: the kernels read it.
TEST(QuantizedInference, NoneAndTrainingKeepTheModelDtypeCopy) {
  RankGroup none(parse_spec(model_yaml("none", "cpu", 1), "<test>"), Device::cpu());
  for (const RankParam& p : none.models[0]->params()) EXPECT_TRUE(p.value.defined()) << p.spec->name;
  ModelSpec train = parse_spec(model_yaml("fp8_block", "cpu", 1), "<test>");
  train.run.mode = RunMode::train;
  RankGroup t(train, Device::cpu());
  for (const RankParam& p : t.models[0]->params()) EXPECT_TRUE(p.value.defined()) << p.spec->name;
}

// Saving from a quantized inference engine writes the bytes it loaded, for every recipe, at tp 1 and 2.
TEST(QuantizedInference, SaveWritesTheLoadedBytes) {
  const std::string a = ::testing::TempDir() + "/te_held_a.safetensors";
  const std::string b = ::testing::TempDir() + "/te_held_b.safetensors";
  std::vector<float> xv(64 * 128);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.21f * static_cast<float>(i));
  const auto x = teengine::HostTensor::from_floats({64, 128}, xv);
  teengine::Engine::from_yaml_string(model_yaml("none", "cpu", 1)).save_weights(a);
  for (const char* recipe : {"fp8_delayed", "fp8_current", "fp8_block", "mxfp8", "nvfp4"})
    for (int tp : {1, 2}) {
      auto e = teengine::Engine::from_yaml_string(model_yaml(recipe, "cpu", tp), {"weights=" + a});
      const auto y = e.forward(x);
      e.save_weights(b);
      EXPECT_EQ(file_bytes(a), file_bytes(b)) << recipe << " tp " << tp;
      auto eager =
          teengine::Engine::from_yaml_string(model_yaml(recipe, "cpu", tp), {"weights=" + a, "run.executor=eager"});
      EXPECT_EQ(eager.forward(x).bytes, y.bytes) << recipe << " tp " << tp;
    }
  std::remove(a.c_str());
  std::remove(b.c_str());
}

}  // namespace
}  // namespace te
