// Gradients over training steps without a zero fill (models/param_grad.h): a step's gradients hold that step alone
// (two consecutive steps give the second step's gradients bit for bit as a fresh model's single step, at tp 1 and
// tp 2 with sequence parallelism), a step without backward leaves them 0, and the helpers write on the first
// contribution and add on later ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "comm/local_communicator.h"
#include "engine/error.h"
#include "models/param_grad.h"
#include "models/rank_group.h"
#include "models/spec.h"
#include "models/train_graph.h"
#include "tests/models/test_spec_yaml.h"

namespace te {
namespace {

std::string grad_model(const std::string& recipe, int tp) {
  return test::SmallSpec{.name = "grads", .layers = 2, .tp = tp, .recipe = recipe, .mode = "train", .device = "cpu",
                         .tokens = 128, .steps = 1, .seed = 3}
      .yaml();
}

Tensor seeded(uint64_t seed, int64_t T, int64_t H) {
  Tensor t = Tensor::empty({T, H}, DType::bf16);
  t.fill_normal(seed);
  return t;
}

// One forward and backward per rank on its share of the tokens (the training graph without its update); returns
// the loss (the same on every rank).
float step(RankGroup& g, const Tensor& x, const Tensor& target) {
  std::vector<float> loss(static_cast<size_t>(g.world()));
  run_ranks(g.comms, [&](Communicator& c) {
    const int r = c.rank();
    const int64_t n = x.size(0) / g.world();
    TrainGraph step(*g.models[static_cast<size_t>(r)], n, target.dtype(), {TrainGraphOptions::Kind::gradient});
    loss[static_cast<size_t>(r)] =
        step.train_step(x.narrow(0, r * n, n).contiguous(), target.narrow(0, r * n, n).contiguous(), 1, 0.0);
  });
  return loss[0];
}

std::vector<uint8_t> bytes(const Tensor& t) {
  const Tensor c = t.to(Device::cpu());
  std::vector<uint8_t> b(static_cast<size_t>(c.nbytes()));
  std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

struct GradStepCase {
  const char* recipe;
  int tp;
};
void PrintTo(const GradStepCase& c, std::ostream* os) { *os << c.recipe << " tp " << c.tp; }
class GradStep : public ::testing::TestWithParam<GradStepCase> {};

TEST_P(GradStep, SecondStepEqualsAFreshModelsStep) {
  const GradStepCase c = GetParam();
  const ModelSpec spec = parse_spec(grad_model(c.recipe, c.tp), "<test>");
  const Tensor x1 = seeded(1, 128, 128), t1 = seeded(2, 128, 128), x2 = seeded(3, 128, 128), t2 = seeded(4, 128, 128);
  RankGroup twice(spec, Device::cpu()), once(spec, Device::cpu());
  step(twice, x1, t1);
  const float loss_twice = step(twice, x2, t2);
  const float loss_once = step(once, x2, t2);
  EXPECT_EQ(loss_twice, loss_once);
  for (int r = 0; r < c.tp; ++r) {
    const auto& a = twice.models[static_cast<size_t>(r)]->params();
    const auto& b = once.models[static_cast<size_t>(r)]->params();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(bytes(a[i].grad), bytes(b[i].grad)) << "rank " << r << " " << a[i].spec->name;
      EXPECT_FALSE(a[i].grad_stale);
    }
  }
}

// A non-finite loss skips the backward: no parameter receives a contribution, and every gradient ends the step 0
// (not the previous step's values).
TEST_P(GradStep, StepWithoutBackwardLeavesZeroGradients) {
  const GradStepCase c = GetParam();
  const ModelSpec spec = parse_spec(grad_model(c.recipe, c.tp), "<test>");
  RankGroup g(spec, Device::cpu());
  step(g, seeded(1, 128, 128), seeded(2, 128, 128));
  bool any_nonzero = false;
  for (const RankParam& p : g.models[0]->params())
    for (float v : p.grad.to_f32_vector()) any_nonzero = any_nonzero || v != 0.f;
  ASSERT_TRUE(any_nonzero) << "the first step produced no gradient";

  std::vector<float> t = seeded(4, 128, 128).to_f32_vector();
  t[7] = NAN;  // rank 0's tokens: the all-reduced loss is NaN on every rank
  EXPECT_TRUE(std::isnan(step(g, seeded(3, 128, 128), Tensor::from_f32(t, {128, 128}, DType::bf16))));
  for (int r = 0; r < c.tp; ++r)
    for (const RankParam& p : g.models[static_cast<size_t>(r)]->params()) {
      const std::vector<uint8_t> b = bytes(p.grad);
      EXPECT_EQ(b, std::vector<uint8_t>(b.size(), 0)) << "rank " << r << " " << p.spec->name;  // +0, every bit
    }
}

INSTANTIATE_TEST_SUITE_P(Recipes, GradStep,
                         ::testing::Values(GradStepCase{"none", 1}, GradStepCase{"none", 2},
                                           GradStepCase{"fp8_block", 1}, GradStepCase{"fp8_block", 2}),
                         [](const auto& info) {
                           return std::string(info.param.recipe) + "_tp" + std::to_string(info.param.tp);
                         });

RankParam param_with_grad(const std::vector<float>& stale) {
  RankParam p;
  p.grad = Tensor::from_f32(stale, {2, 2}, DType::f32);
  return p;
}

// The helpers themselves: the first contribution writes (the stale values, NaN included, never show through), later
// ones add, and a gradient without any contribution is zeroed by finish_grad_step.
TEST(ParamGrad, FirstContributionWritesLaterOnesAdd) {
  const Tensor g = Tensor::from_f32({1.f, -2.f, 3.5f, 0.25f}, {2, 2}, DType::f32);
  std::vector<RankParam> params;
  params.push_back(param_with_grad({NAN, 9.f, 9.f, 9.f}));  // bias-like: add_to_grad twice
  params.push_back(param_with_grad({NAN, 9.f, 9.f, 9.f}));  // weight-like: wgrad GEMM twice
  params.push_back(param_with_grad({NAN, 9.f, 9.f, 9.f}));  // no contribution
  begin_grad_step(params);

  add_to_grad(params[0], g, Stream());
  EXPECT_EQ(params[0].grad.to_f32_vector(), (std::vector<float>{1.f, -2.f, 3.5f, 0.25f}));
  add_to_grad(params[0], g, Stream());
  EXPECT_EQ(params[0].grad.to_f32_vector(), (std::vector<float>{2.f, -4.f, 7.f, 0.5f}));

  // dW [N=2, K=2] = dy [M=1, N=2]ᵀ · x [M=1, K=2]
  GemmContext gemm_ctx(Device::cpu());
  const Tensor dy = Tensor::from_f32({1.f, 2.f}, {1, 2}, DType::f32);
  const Tensor x = Tensor::from_f32({3.f, -1.f}, {1, 2}, DType::f32);
  wgrad_into_grad(params[1], dy, x, gemm_ctx, Stream());
  EXPECT_EQ(params[1].grad.to_f32_vector(), (std::vector<float>{3.f, -1.f, 6.f, -2.f}));
  wgrad_into_grad(params[1], dy, x, gemm_ctx, Stream());
  EXPECT_EQ(params[1].grad.to_f32_vector(), (std::vector<float>{6.f, -2.f, 12.f, -4.f}));

  EXPECT_TRUE(params[2].grad_stale);
  finish_grad_step(params, Stream());
  EXPECT_EQ(params[2].grad.to_f32_vector(), (std::vector<float>{0.f, 0.f, 0.f, 0.f}));
  EXPECT_EQ(params[0].grad.to_f32_vector(), (std::vector<float>{2.f, -4.f, 7.f, 0.5f}));  // written ones untouched
  for (const RankParam& p : params) EXPECT_FALSE(p.grad_stale);
}

TEST(ParamGrad, InferenceParameterIsAClearError) {
  std::vector<RankParam> params(1);  // no grad tensor
  begin_grad_step(params);
  EXPECT_THROW(add_to_grad(params[0], Tensor::zeros({2}, DType::f32), Stream()), Error);
}

}  // namespace
}  // namespace te
