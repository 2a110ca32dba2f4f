// ForwardReplay: the inference forward replayed as one CUDA graph computes exactly the eager bytes, reads its input
// in place, and is refused (with the reason) where it cannot work: the CPU, training, tp > 1.
#include <gtest/gtest.h>

#include "engine/error.h"
#include "models/forward_replay.h"
#include "models/model_graph.h"
#include "models/single_rank.h"
#include "tests/common/gpu.h"

namespace te {
namespace {

struct ReplayModel : SingleRankModel {
  ReplayModel(const std::string& recipe, Device device, bool train = false)
      : SingleRankModel(parse_spec("name: replay\nmodel:\n  hidden: 128\n  layers: 2\n  dtype: bf16\n  block:\n"
                        "    - [ {layernorm_mlp: {name: mlp, ffn: 256, activation: gelu}} ]\n"
                        "parallel: {tp: 1}\nprecision: {recipe: " + recipe + "}\nrun: {mode: " +
                            (train ? "train" : "infer") + ", tokens: 64, seed: 3}\n",
                                   "<replay test>"),
                        device, train) {}
  Tensor input(uint64_t seed) {
    Tensor x = Tensor::empty({64, 128}, DType::bf16, ctx.device, ctx.stream);
    x.fill_normal(seed, 0.f, 1.f, ctx.stream);
    return x;
  }
};

std::vector<uint16_t> bits(const Tensor& t, const Stream& s) {
  const Tensor h = t.to(Device::cpu(), s);
  s.synchronize();
  const auto* p = h.data<uint16_t>();
  return {p, p + h.numel()};
}

class ForwardReplayGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(ForwardReplayGpu, EqualsEagerAndReadsInputInPlace) {
  TE_REQUIRE_GPU();
  ReplayModel m(GetParam(), Device::cuda(0));
  Tensor x = m.input(1);
  const std::vector<uint16_t> eager1 = bits(m.model->forward(x), m.ctx.stream);
  ForwardReplay replay(*m.model, x);
  EXPECT_EQ(bits(replay.replay(), m.ctx.stream), eager1);
  EXPECT_GT(replay.pool_bytes(), 0);
  // New tokens written into the same input tensor: the replay sees them.
  x.copy_from(m.input(2), m.ctx.stream);
  const std::vector<uint16_t> replayed2 = bits(replay.replay(), m.ctx.stream);
  EXPECT_NE(replayed2, eager1);
  EXPECT_EQ(replayed2, bits(m.model->forward(x), m.ctx.stream));
  // Eager work between replays allocates from the shared cache, never from the replay's buffers.
  for (int i = 0; i < 3; ++i) (void)m.model->forward(m.input(10 + i));
  EXPECT_EQ(bits(replay.replay(), m.ctx.stream), replayed2);
}

// The graph executor's forward (two streams, planned arena) captured the same way: still the eager bytes.
TEST_P(ForwardReplayGpu, ModelGraphReplayEqualsEager) {
  TE_REQUIRE_GPU();
  ReplayModel m(GetParam(), Device::cuda(0));
  Tensor x = m.input(1);
  const std::vector<uint16_t> eager1 = bits(m.model->forward(x), m.ctx.stream);
  ModelGraph graph(*m.model, 64);
  ForwardReplay replay(*m.model, x, [&] { return graph.forward(x); });
  EXPECT_EQ(bits(replay.replay(), m.ctx.stream), eager1);
  x.copy_from(m.input(2), m.ctx.stream);
  EXPECT_EQ(bits(replay.replay(), m.ctx.stream), bits(m.model->forward(x), m.ctx.stream));
}

INSTANTIATE_TEST_SUITE_P(Recipes, ForwardReplayGpu, ::testing::Values("none", "fp8_current", "fp8_block", "mxfp8"));

TEST(ForwardReplay, RefusedOnCpuWithTheReason) {
  ReplayModel m("none", Device::cpu());
  try {
    ForwardReplay replay(*m.model, m.input(1));
    FAIL() << "replay on the CPU was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a CUDA device"), std::string::npos) << e.what();
  }
}

TEST(ForwardReplay, RefusedForTraining) {
  TE_REQUIRE_GPU();
  ReplayModel m("none", Device::cuda(0), true);
  EXPECT_THROW(ForwardReplay(*m.model, m.input(1)), Error);
}

}  // namespace
}  // namespace te
