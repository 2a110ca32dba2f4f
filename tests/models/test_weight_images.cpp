// run.weight_images: a quantized weight keeps the exact image a GEMM without a kernel for its format reads (f32 on
// the CPU for every format; bf16 on a GPU for MXFP8 and NVFP4), made when the weight is quantized instead of on every
// GEMM call. What must hold: the same bytes with and without it (inference outputs, training losses and weights, every
// quantized recipe, tp 1 and tp 2 + SP); the GEMMs read the images instead of dequantizing the weights; the images'
// bytes count among the weights.
#include <gtest/gtest.h>
#include <teengine/teengine.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "models/model_graph.h"
#include "models/rank_group.h"
#include "models/spec.h"
#include "tests/models/test_spec_yaml.h"

namespace te {
namespace {

constexpr int64_t kImgTokens = 64, kImgHidden = 128;
const char* const kQuantizedRecipes[] = {"fp8_current", "fp8_delayed", "fp8_block", "mxfp8", "nvfp4"};

std::string images_model(const std::string& recipe, const std::string& device, int tp, const std::string& mode) {
  return test::SmallSpec{.name = "images", .tp = tp, .recipe = recipe, .mode = mode, .device = device,
                         .tokens = kImgTokens, .steps = 3, .seed = 7, .optimizer = "{type: adamw, lr: 0.01}"}
      .yaml();
}

std::vector<std::string> images_off() { return {"run.weight_images=false"}; }

teengine::HostTensor seeded_input(uint64_t seed, int64_t hidden) {
  std::vector<float> v(static_cast<size_t>(kImgTokens * hidden));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(seed));
  return teengine::HostTensor::from_floats({kImgTokens, hidden}, v);
}

// Three forwards (inference) or three training steps and a forward (training), with and without the images.
void expect_same_bytes_with_and_without_images(const std::string& device) {
  for (const char* recipe : kQuantizedRecipes)
    for (int tp : {1, 2})
      for (const char* mode : {"infer", "train"}) {
        const std::string yaml = images_model(recipe, device, tp, mode);
        teengine::Engine with = teengine::Engine::from_yaml_string(yaml);
        teengine::Engine without = teengine::Engine::from_yaml_string(yaml, images_off());
        const std::string what = std::string(recipe) + " tp " + std::to_string(tp) + " " + mode;
        for (uint64_t s = 1; s <= 3; ++s) {
          const teengine::HostTensor x = seeded_input(s, kImgHidden), y = seeded_input(s + 10, kImgHidden);
          if (std::string(mode) == "train") {
            EXPECT_EQ(with.train_step(x, y), without.train_step(x, y)) << what << " step " << s;
          } else {
            EXPECT_EQ(with.forward(x).to_floats(), without.forward(x).to_floats()) << what << " forward " << s;
          }
        }
        if (std::string(mode) == "train") {
          const teengine::HostTensor x = seeded_input(9, kImgHidden);
          EXPECT_EQ(with.forward(x).to_floats(), without.forward(x).to_floats()) << what << " after training";
        }
      }
}

TEST(WeightImages, SameBytesWithAndWithoutThem) { expect_same_bytes_with_and_without_images("cpu"); }

TEST(WeightImagesGpu, SameBytesWithAndWithoutThem) {
  TE_REQUIRE_GPU();
  expect_same_bytes_with_and_without_images("cuda");
}

struct GraphRun {
  GemmContext::Stats stats;
  int64_t weight_bytes = 0;
  int64_t weight_elements = 0;  // of the GEMM weights
};

// Two inference forwards through the model graph at tp 1: the GEMM counters and the weights' bytes.
GraphRun two_forwards(const std::string& recipe, bool images) {
  ModelSpec spec = parse_spec(images_model(recipe, "cpu", 1, "infer"), "<test>");
  spec.run.weight_images = images;
  RankGroup g(spec, Device::cpu());
  ModelGraph graph(*g.models[0], kImgTokens);
  Tensor x = Tensor::empty({kImgTokens, kImgHidden}, DType::bf16);
  x.fill_normal(3);
  for (int i = 0; i < 2; ++i) (void)graph.forward(x);
  GraphRun r;
  r.stats = g.ctxs[0]->gemm->stats();
  r.weight_bytes = g.models[0]->memory().weights + g.models[0]->memory().weight_images;
  for (const RankParam& p : g.models[0]->params())
    if (p.spec->role == ParamRole::weight && p.spec->shape.size() == 2) r.weight_elements += p.spec->shape[0] * p.spec->shape[1];
  return r;
}

// The CPU GEMM reads every quantized weight from its image: of the two operands of each of the 8 GEMMs (4 linears,
// 2 forwards), only the activation is dequantized; without images both are. The f32 images add 4 bytes per weight.
TEST(WeightImages, GemmsReadTheImagesInsteadOfDequantizingTheWeights) {
  for (const char* recipe : kQuantizedRecipes) {
    const GraphRun with = two_forwards(recipe, true), without = two_forwards(recipe, false);
    EXPECT_EQ(with.stats.calls, 8) << recipe;
    EXPECT_EQ(with.stats.images_read, 8) << recipe;
    EXPECT_EQ(with.stats.operands_dequantized, 8) << recipe;
    EXPECT_EQ(without.stats.images_read, 0) << recipe;
    EXPECT_EQ(without.stats.operands_dequantized, 16) << recipe;
    EXPECT_EQ(with.weight_bytes - without.weight_bytes, 4 * with.weight_elements) << recipe;
  }
}

// --explain counts the images beside the weights they belong to, and only when there are some.
TEST(WeightImages, ExplainCountsThem) {
  const std::string yaml = images_model("mxfp8", "cpu", 1, "infer");
  const std::string with = teengine::Engine::from_yaml_string(yaml).explain();
  const std::string without = teengine::Engine::from_yaml_string(yaml, images_off()).explain();
  // 4 linears of 128 × 256 (or 256 × 128) weights, f32 images: 0.50 MiB.
  EXPECT_NE(with.find("their GEMM images 0.50 MiB"), std::string::npos) << with;
  EXPECT_EQ(without.find("GEMM images"), std::string::npos) << without;
}

}  // namespace
}  // namespace te
