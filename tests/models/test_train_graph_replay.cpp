// TrainGraph with cuda_graph: the training step replayed as one CUDA graph gives, step after step, exactly the bytes
// of the uncaptured step — losses, masters, optimizer state, gradients — with each step's own learning rate, across
// a non-finite loss after the capture (skipped on the device, as uncaptured), and with an eval in between. Through
// the Engine, run.cuda_graph trains alike. Refused on the CPU and for graphs of another kind.
#include <gtest/gtest.h>
#include <teengine/teengine.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/error.h"
#include "models/single_rank.h"
#include "models/train_graph.h"
#include "tests/common/gpu.h"

namespace te {
namespace {

ModelSpec replay_spec(const std::string& recipe) {
  return parse_spec(
      "name: train-replay\nmodel:\n  hidden: 128\n  layers: 2\n  dtype: bf16\n  block:\n"
      "    - [ {layernorm_mlp: {name: mlp, ffn: 256, activation: gelu}} ]\n"
      "parallel: {tp: 1}\nprecision: {recipe: " +
          recipe +
          "}\n"
          "run: {mode: train, tokens: 64, seed: 5, optimizer: {type: adamw, lr: 0.01, weight_decay: 0.1}}\n",
      "<train replay test>");
}

Tensor device_tensor(uint64_t seed, const RankContext& ctx, DType dtype = DType::bf16) {
  Tensor t = Tensor::empty({64, 128}, dtype, ctx.device, ctx.stream);
  t.fill_normal(seed, 0.f, 1.f, ctx.stream);
  return t;
}

std::vector<uint8_t> bytes_of(const std::vector<RankParam>& ps, const Stream& s, Tensor RankParam::*what) {
  std::vector<uint8_t> out;
  for (const RankParam& p : ps) {
    const Tensor h = (p.*what).to(Device::cpu(), s);
    const auto* b = static_cast<const uint8_t*>(h.data_ptr());
    out.insert(out.end(), b, b + h.nbytes());
  }
  return out;
}

class TrainGraphReplayGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainGraphReplayGpu, EveryStepEqualsTheUncapturedStep) {
  TE_REQUIRE_GPU();
  SingleRankModel plain_m(replay_spec(GetParam()), Device::cuda(0), true);
  SingleRankModel replay_m(replay_spec(GetParam()), Device::cuda(0), true);
  TrainGraph plain(*plain_m.model, 64, DType::bf16);
  TrainGraphOptions o;
  o.cuda_graph = true;
  TrainGraph replayed(*replay_m.model, 64, DType::bf16, o);
  TrainGraphOptions eo;
  eo.kind = TrainGraphOptions::Kind::eval;
  TrainGraph plain_eval(*plain_m.model, 64, DType::bf16, eo), replay_eval(*replay_m.model, 64, DType::bf16, eo);
  for (int64_t step = 1; step <= 9; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Tensor x = device_tensor(100 + static_cast<uint64_t>(step), plain_m.ctx);
    Tensor t = device_tensor(200 + static_cast<uint64_t>(step), plain_m.ctx);
    if (step == 7) t.fill(NAN, plain_m.ctx.stream);      // after the capture: skipped on the device
    const double lr = 0.01 / static_cast<double>(step);  // a new learning rate every step
    const float lp = plain.train_step(x, t, step, lr);
    const float lr_ = replayed.train_step(x, t, step, lr);
    EXPECT_EQ(replayed.captured(), step >= 4);
    EXPECT_EQ(std::isfinite(lp), step != 7);
    if (step != 7)
      EXPECT_EQ(std::memcmp(&lp, &lr_, sizeof lp), 0) << lp << " vs " << lr_;
    else
      EXPECT_FALSE(std::isfinite(lr_));
    const Stream& s = plain_m.ctx.stream;
    EXPECT_EQ(bytes_of(replay_m.model->params(), s, &RankParam::master),
              bytes_of(plain_m.model->params(), s, &RankParam::master));
    EXPECT_EQ(bytes_of(replay_m.model->params(), s, &RankParam::state2),
              bytes_of(plain_m.model->params(), s, &RankParam::state2));
    EXPECT_EQ(bytes_of(replay_m.model->params(), s, &RankParam::grad),
              bytes_of(plain_m.model->params(), s, &RankParam::grad));
    if (step == 5) {  // an eval between replays reads the replayed weights and leaves the state as it was
      const Tensor xe = device_tensor(300, plain_m.ctx), te = device_tensor(301, plain_m.ctx);
      const float ep = plain_eval.eval_loss(xe, te), er = replay_eval.eval_loss(xe, te);
      EXPECT_EQ(std::memcmp(&ep, &er, sizeof ep), 0) << ep << " vs " << er;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, TrainGraphReplayGpu,
                         ::testing::Values("none", "fp8_current", "fp8_delayed", "fp8_block", "mxfp8", "nvfp4"));

TEST(TrainGraphReplay, RefusedWhereItCannotWork) {
  SingleRankModel m(replay_spec("fp8_block"), Device::cpu(), true);
  TrainGraphOptions o;
  o.cuda_graph = true;
  try {
    TrainGraph g(*m.model, 64, DType::bf16, o);
    FAIL() << "a CPU step was captured";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA device"), std::string::npos) << e.what();
  }
  o.kind = TrainGraphOptions::Kind::eval;
  EXPECT_THROW(TrainGraph(*m.model, 64, DType::bf16, o), Error);
}

// The public API: run.cuda_graph in train mode gives the losses and weights of plain steps (steps 1–3 run, step 4
// is captured, the rest replayed), and an Engine::forward in between sees the replayed weights.
TEST(TrainGraphReplay, EngineTrainsAlikeWithCudaGraph) {
  TE_REQUIRE_GPU();
  const std::string yaml =
      "name: engine-train-replay\nmodel:\n  hidden: 128\n  layers: 2\n  dtype: bf16\n  block:\n"
      "    - [ {layernorm_mlp: {name: mlp, ffn: 256, activation: gelu}} ]\n"
      "parallel: {tp: 1}\nprecision: {recipe: fp8_block}\n"
      "run: {mode: train, device: cuda, tokens: 64, steps: 8, seed: 9, optimizer: {type: adamw, lr: 0.01}}\n";
  auto plain = teengine::Engine::from_yaml_string(yaml);
  auto replayed = teengine::Engine::from_yaml_string(yaml, {"run.cuda_graph=true"});
  auto host = [](uint64_t seed) {
    std::vector<float> v(64 * 128);
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<float>(seed * 7919 + i) * 0.01f);
    return teengine::HostTensor::from_floats({64, 128}, v);
  };
  for (uint64_t step = 1; step <= 8; ++step) {
    const float a = plain.train_step(host(step), host(100 + step)),
                b = replayed.train_step(host(step), host(100 + step));
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "step " << step << ": " << a << " vs " << b;
    if (step == 5) {
      EXPECT_EQ(plain.forward(host(50)).bytes, replayed.forward(host(50)).bytes);
    }
  }
}

}  // namespace
}  // namespace te
