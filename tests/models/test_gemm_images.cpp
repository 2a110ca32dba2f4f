// GEMM images (run.weight_images, run.activation_images): where a GEMM has no kernel for a quantized operand's
// format (every format on the CPU, f32; MXFP8 and NVFP4 on a GPU, bf16), the pass that quantizes the operand also
// writes its exact image and the GEMM reads that instead of dequantizing it: the weights once per load or optimizer
// step, the activations and gradients as they are quantized. What must hold: the same bytes with and without either
// (inference outputs, training losses and weights, every quantized recipe, tp 1 and tp 2 + SP); the GEMMs read the
// images instead of dequantizing; the weights' images count among the weights.
#include <gtest/gtest.h>
#include <teengine/teengine.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "models/model_graph.h"
#include "models/train_graph.h"
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

std::vector<std::string> images_off() { return {"run.weight_images=false", "run.activation_images=false"}; }
// Each way of keeping images, against none.
const std::vector<std::vector<std::string>> kImageSettings = {
    {}, {"run.weight_images=false"}, {"run.activation_images=false"}};

teengine::HostTensor seeded_input(uint64_t seed, int64_t hidden) {
  std::vector<float> v(static_cast<size_t>(kImgTokens * hidden));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(seed));
  return teengine::HostTensor::from_floats({kImgTokens, hidden}, v);
}

// What one engine computes: three forwards (inference), or three training steps' losses and a forward after them.
std::vector<std::vector<float>> run_sequence(teengine::Engine& e, bool train) {
  std::vector<std::vector<float>> out;
  for (uint64_t s = 1; s <= 3; ++s) {
    const teengine::HostTensor x = seeded_input(s, kImgHidden), y = seeded_input(s + 10, kImgHidden);
    out.push_back(train ? std::vector<float>{e.train_step(x, y)} : e.forward(x).to_floats());
  }
  if (train) out.push_back(e.forward(seeded_input(9, kImgHidden)).to_floats());
  return out;
}

// Each image setting against the run without images (computed once per recipe, tp and mode).
void expect_same_bytes_with_and_without_images(const std::string& device) {
  for (const char* recipe : kQuantizedRecipes)
    for (int tp : {1, 2})
      for (const char* mode : {"infer", "train"}) {
        const std::string yaml = images_model(recipe, device, tp, mode);
        const bool train = std::string(mode) == "train";
        teengine::Engine without = teengine::Engine::from_yaml_string(yaml, images_off());
        const std::vector<std::vector<float>> expected = run_sequence(without, train);
        for (const std::vector<std::string>& setting : kImageSettings) {
          teengine::Engine with = teengine::Engine::from_yaml_string(yaml, setting);
          const std::vector<std::vector<float>> got = run_sequence(with, train);
          const std::string what = std::string(recipe) + " tp " + std::to_string(tp) + " " + mode + " " +
                                   (setting.empty() ? "all images" : setting[0]);
          ASSERT_EQ(got.size(), expected.size()) << what;
          for (size_t i = 0; i < got.size(); ++i)
            EXPECT_EQ(got[i], expected[i]) << what << (train && i < 3 ? " loss of step " : " output ") << i + 1;
        }
      }
}

TEST(GemmImages, SameBytesWithAndWithoutThem) { expect_same_bytes_with_and_without_images("cpu"); }

TEST(GemmImagesGpu, SameBytesWithAndWithoutThem) {
  TE_REQUIRE_GPU();
  expect_same_bytes_with_and_without_images("cuda");
}

struct GraphRun {
  GemmContext::Stats stats;
  int64_t weight_bytes = 0;
  int64_t weight_elements = 0;  // of the GEMM weights
};

ModelSpec images_spec(const std::string& recipe, const std::string& mode, bool weight_images, bool activation_images) {
  ModelSpec spec = parse_spec(images_model(recipe, "cpu", 1, mode), "<test>");
  spec.run.weight_images = weight_images;
  spec.run.activation_images = activation_images;
  return spec;
}

int64_t gemm_weight_elements(const RankModel& m) {
  int64_t n = 0;
  for (const RankParam& p : m.params())
    if (p.spec->role == ParamRole::weight && p.spec->shape.size() == 2) n += p.spec->shape[0] * p.spec->shape[1];
  return n;
}

// Two inference forwards through the model graph at tp 1: the GEMM counters and the weights' bytes.
GraphRun two_forwards(const std::string& recipe, bool weight_images, bool activation_images) {
  RankGroup g(images_spec(recipe, "infer", weight_images, activation_images), Device::cpu());
  ModelGraph graph(*g.models[0], kImgTokens);
  Tensor x = Tensor::empty({kImgTokens, kImgHidden}, DType::bf16);
  x.fill_normal(3);
  for (int i = 0; i < 2; ++i) (void)graph.forward(x);
  GraphRun r;
  r.stats = g.ctxs[0]->gemm->stats();
  r.weight_bytes = g.models[0]->memory().weights + g.models[0]->memory().weight_images;
  r.weight_elements = gemm_weight_elements(*g.models[0]);
  return r;
}

// The CPU GEMM reads every quantized operand it has an image for: of the two operands of each of the 8 GEMMs
// (4 linears, 2 forwards), the weights from their images (run.weight_images) and the activations from theirs
// (run.activation_images); whatever has none is dequantized. The weights' f32 images add 4 bytes per weight.
TEST(GemmImages, GemmsReadTheImagesInsteadOfDequantizing) {
  for (const char* recipe : kQuantizedRecipes)
    for (bool weights : {false, true})
      for (bool activations : {false, true}) {
        const GraphRun r = two_forwards(recipe, weights, activations);
        const std::string what = std::string(recipe) + " weight images " + (weights ? "on" : "off") +
                                 ", activation images " + (activations ? "on" : "off");
        const int64_t read = (weights ? 8 : 0) + (activations ? 8 : 0);
        EXPECT_EQ(r.stats.calls, 8) << what;
        EXPECT_EQ(r.stats.images_read, read) << what;
        EXPECT_EQ(r.stats.operands_dequantized, 16 - read) << what;
        if (weights) {
          EXPECT_EQ(r.weight_bytes - two_forwards(recipe, false, activations).weight_bytes, 4 * r.weight_elements)
              << what;
        }
      }
}

// A training step at tp 1: fprop, dgrad and wgrad read every quantized operand from its image (weights both copies,
// activations and gradients as quantized), so nothing is dequantized; without images every operand is.
TEST(GemmImages, ATrainingStepDequantizesNothing) {
  for (const char* recipe : kQuantizedRecipes)
    for (bool images : {false, true}) {
      RankGroup g(images_spec(recipe, "train", images, images), Device::cpu());
      TrainGraph step(*g.models[0], kImgTokens, DType::bf16, {});
      Tensor x = Tensor::empty({kImgTokens, kImgHidden}, DType::bf16), y = Tensor::empty({kImgTokens, kImgHidden}, DType::bf16);
      x.fill_normal(3);
      y.fill_normal(4);
      (void)step.train_step(x, y, 1, 1e-2);
      const GemmContext::Stats& s = g.ctxs[0]->gemm->stats();
      const std::string what = std::string(recipe) + (images ? " with images" : " without");
      EXPECT_GE(s.calls, 11) << what;  // 4 fprop, 4 wgrad, at least 3 dgrad
      EXPECT_EQ(s.images_read, images ? 2 * s.calls : 0) << what;
      EXPECT_EQ(s.operands_dequantized, images ? 0 : 2 * s.calls) << what;
    }
}

// --explain counts the images beside the weights they belong to, and only when there are some.
TEST(GemmImages, ExplainCountsTheWeights) {
  const std::string yaml = images_model("mxfp8", "cpu", 1, "infer");
  const std::string with = teengine::Engine::from_yaml_string(yaml).explain();
  const std::string without = teengine::Engine::from_yaml_string(yaml, images_off()).explain();
  // 4 linears of 128 × 256 (or 256 × 128) weights, f32 images: 0.50 MiB.
  EXPECT_NE(with.find("their GEMM images 0.50 MiB"), std::string::npos) << with;
  EXPECT_EQ(without.find("GEMM images"), std::string::npos) << without;
}

}  // namespace
}  // namespace te
