// ModelGraph with cuda_graph: the inference forward replayed as one CUDA graph computes exactly the bytes of the
// layer-by-layer reference (tests/models/eager_reference.h), reads its own input buffer (or copies the caller's
// input into it), and is refused (with the reason) where it cannot work: the CPU, training, tp > 1. Through the
// Engine (run.cuda_graph) the same replay serves every token count.
#include <gtest/gtest.h>
#include <teengine/teengine.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "models/model_graph.h"
#include "models/single_rank.h"
#include "tests/common/gpu.h"
#include "tests/models/eager_reference.h"

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

class ModelGraphReplayGpu : public ::testing::TestWithParam<std::string> {};

ModelGraphOptions replayed(bool overlap) {
  ModelGraphOptions o;
  o.overlap = overlap;
  o.cuda_graph = true;
  return o;
}

// The one-stream plan (run.executor: eager) captured.
TEST_P(ModelGraphReplayGpu, EqualsEagerAndReadsItsInputBuffer) {
  TE_REQUIRE_GPU();
  ReplayModel m(GetParam(), Device::cuda(0));
  const Tensor x1 = m.input(1);
  const std::vector<uint16_t> eager1 = bits(test::eager_forward(*m.model, x1), m.ctx.stream);
  ModelGraph graph(*m.model, 64, replayed(false));
  Tensor in = graph.replay_input();
  in.copy_from(x1, m.ctx.stream);
  EXPECT_EQ(bits(graph.forward(in), m.ctx.stream), eager1);
  EXPECT_GT(graph.replay_pool_bytes(), 0);
  // New tokens written into the input buffer: the replay sees them.
  in.copy_from(m.input(2), m.ctx.stream);
  const std::vector<uint16_t> replayed2 = bits(graph.forward(in), m.ctx.stream);
  EXPECT_NE(replayed2, eager1);
  EXPECT_EQ(replayed2, bits(test::eager_forward(*m.model, in), m.ctx.stream));
  // Work outside the replay allocates from the shared cache, never from the replay's buffers.
  for (int i = 0; i < 3; ++i) (void)test::eager_forward(*m.model, m.input(10 + i));
  EXPECT_EQ(bits(graph.forward(in), m.ctx.stream), replayed2);
  // Another tensor is copied into the buffer, and left as it was.
  const Tensor x3 = m.input(3);
  const std::vector<uint16_t> x3_bits = bits(x3, m.ctx.stream);
  EXPECT_EQ(bits(graph.forward(x3), m.ctx.stream), bits(test::eager_forward(*m.model, x3), m.ctx.stream));
  EXPECT_EQ(bits(x3, m.ctx.stream), x3_bits);
  EXPECT_THROW((void)graph.forward(Tensor::empty({32, 128}, DType::bf16, m.ctx.device, m.ctx.stream)), Error);
}

// The graph executor's forward (two streams, planned arena) captured the same way: still the eager bytes.
TEST_P(ModelGraphReplayGpu, TwoStreamReplayEqualsEager) {
  TE_REQUIRE_GPU();
  ReplayModel m(GetParam(), Device::cuda(0));
  const Tensor x1 = m.input(1), x2 = m.input(2);
  ModelGraph graph(*m.model, 64, replayed(true));
  EXPECT_EQ(bits(graph.forward(x1), m.ctx.stream), bits(test::eager_forward(*m.model, x1), m.ctx.stream));
  EXPECT_EQ(bits(graph.forward(x2), m.ctx.stream), bits(test::eager_forward(*m.model, x2), m.ctx.stream));
}

// run.cuda_graph through the public Engine: every token count's forward is captured once and replayed; the outputs
// are the bytes of the graph executor without replay, across changes of token count and back, and across a weights
// reload (the captures of the old model go with it).
std::string engine_yaml(const std::string& recipe, const std::string& device) {
  return "name: replay\nmodel:\n  hidden: 128\n  layers: 2\n  dtype: bf16\n  block:\n"
         "    - [ {layernorm_mlp: {name: mlp, ffn: 256, activation: gelu}} ]\n"
         "parallel: {tp: 1}\nprecision: {recipe: " + recipe + "}\nrun: {mode: infer, device: " + device +
         ", tokens: 64, seed: 3}\n";
}

teengine::HostTensor host_input(int64_t tokens, float phase) {
  std::vector<float> v(static_cast<size_t>(tokens) * 128);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i) + phase);
  return teengine::HostTensor::from_floats({tokens, 128}, v);
}

TEST_P(ModelGraphReplayGpu, EngineCudaGraphEqualsGraphExecutor) {
  TE_REQUIRE_GPU();
  auto replayed = teengine::Engine::from_yaml_string(engine_yaml(GetParam(), "cuda"), {"run.cuda_graph=true"});
  auto plain = teengine::Engine::from_yaml_string(engine_yaml(GetParam(), "cuda"));
  for (int64_t tokens : {64, 16, 64, 16, 48})
    for (float phase : {0.f, 1.f}) {
      const auto x = host_input(tokens, phase + static_cast<float>(tokens));
      EXPECT_EQ(replayed.forward(x).bytes, plain.forward(x).bytes) << GetParam() << ", " << tokens << " tokens";
    }
  const std::string path = ::testing::TempDir() + "/te_replay_weights.safetensors";
  teengine::Engine::from_yaml_string(engine_yaml("none", "cuda"), {"run.seed=11"}).save_weights(path);
  replayed.load_weights(path);
  plain.load_weights(path);
  const auto x = host_input(64, 5.f);
  EXPECT_EQ(replayed.forward(x).bytes, plain.forward(x).bytes) << GetParam() << " after a reload";
  std::remove(path.c_str());
}

// On the CPU the option is ignored with a warning (a spec written for a GPU still runs); what replay cannot cover
// is a spec error naming the field.
TEST(ModelGraphReplay, EngineCudaGraphOnTheCpuRunsWithoutReplay) {
  auto replayed = teengine::Engine::from_yaml_string(engine_yaml("fp8_block", "cpu"), {"run.cuda_graph=true"});
  auto plain = teengine::Engine::from_yaml_string(engine_yaml("fp8_block", "cpu"));
  const auto x = host_input(64, 0.f);
  EXPECT_EQ(replayed.forward(x).bytes, plain.forward(x).bytes);
  for (const auto& [set, want] : std::vector<std::pair<std::string, std::string>>{
           {"parallel.tp=2", "needs tp 1"}, {"precision.recipe=fp8_delayed", "amax history"}}) {
    try {
      teengine::Engine::from_yaml_string(engine_yaml("fp8_block", "cpu"), {"run.cuda_graph=true", set});
      FAIL() << set << " was accepted";
    } catch (const teengine::Error& e) {
      EXPECT_TRUE(e.is_input_error()) << e.what();
      EXPECT_NE(std::string(e.what()).find("run.cuda_graph"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  // Training steps are captured, fp8_delayed included: their warm-up steps are real steps.
  EXPECT_NO_THROW(teengine::Engine::from_yaml_string(
      engine_yaml("fp8_block", "cpu"), {"run.cuda_graph=true", "run.mode=train", "precision.recipe=fp8_delayed"}));
}

INSTANTIATE_TEST_SUITE_P(Recipes, ModelGraphReplayGpu,
                         ::testing::Values("none", "fp8_current", "fp8_block", "mxfp8", "nvfp4"));

TEST(ModelGraphReplay, RefusedOnCpuWithTheReason) {
  ReplayModel m("none", Device::cpu());
  try {
    ModelGraph graph(*m.model, 64, replayed(true));
    FAIL() << "replay on the CPU was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a CUDA device"), std::string::npos) << e.what();
  }
  // Without replay there is no input buffer to hand out.
  ModelGraph plain(*m.model, 64);
  EXPECT_THROW((void)plain.replay_input(), Error);
  EXPECT_EQ(plain.replay_pool_bytes(), 0);
}

TEST(ModelGraphReplay, RefusedForTraining) {
  ReplayModel m("none", Device::cpu(), true);
  EXPECT_THROW(ModelGraph(*m.model, 64, replayed(true)), Error);
}

}  // namespace
}  // namespace te
