// The training graph (models/train_graph.h): a step planned and run as one graph — forward, autograd backward from
// the model op kinds' rules, gradient all-reduces, optimizer — equals the layer-by-layer chaining of the same phases
// (tests/models/eager_reference.h) byte for byte (losses, fp32 masters and optimizer state after three steps), with
// its collectives on the comm stream and with every node in order on one stream (run.executor: eager), for every
// recipe and parallel layout, including local token counts that force the backward re-gather onto the fallback.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "comm/local_communicator.h"
#include "engine/error.h"
#include "models/rank_group.h"
#include "models/train_graph.h"
#include "tests/common/gpu.h"
#include "tests/models/eager_reference.h"
#include "tests/models/test_spec_yaml.h"
#include "training_util.h"

namespace te {
namespace {

struct TrainLayout {
  int tp;
  bool sp;
  int64_t tokens;
};

std::string train_graph_model(const std::string& recipe, const TrainLayout& l, const std::string& optimizer) {
  return test::SmallSpec{.name = "traingraph",
                         .layers = 2,
                         .tp = l.tp,
                         .sp = l.sp,
                         .recipe = recipe,
                         .recipe_options = recipe == "fp8_delayed" ? ", amax_history_len: 4" : "",
                         .mode = "train",
                         .tokens = l.tokens,
                         .seed = 11,
                         .optimizer = optimizer == "sgd" ? "{type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.01}"
                                                         : "{type: adamw, lr: 0.004, weight_decay: 0.01}"}
      .yaml();
}

struct TrainRanks : RankGroup {
  std::vector<std::unique_ptr<TrainGraph>> graphs;

  explicit TrainRanks(const std::string& yaml, Device device = Device::cpu())
      : RankGroup(parse_spec(yaml, "<train graph test>"), device) {
    graphs.resize(static_cast<size_t>(world()));
  }

  enum class Run { reference, graph, serial };  // layer by layer; the graph (2 streams); the graph on one stream

  // One training step on the global (x, target) [T, H] (host bf16); the loss (rank 0's; every rank checks it is
  // the same).
  float step(const Tensor& x, const Tensor& target, int64_t step, Run run) {
    const int w = spec.parallel.tp;
    const bool sp = spec.parallel.sequence_parallel && w > 1;
    const int64_t n = sp ? x.size(0) / w : x.size(0);
    std::vector<float> loss(static_cast<size_t>(w));
    run_ranks(comms, [&](Communicator& c) {
      const int r = c.rank();
      RankModel& m = *models[static_cast<size_t>(r)];
      const Tensor xr = x.narrow(0, sp ? r * n : 0, n).contiguous().to(m.ctx().device, m.ctx().stream);
      const Tensor tr = target.narrow(0, sp ? r * n : 0, n).contiguous().to(m.ctx().device, m.ctx().stream);
      if (run == Run::reference) {
        loss[static_cast<size_t>(r)] = test::eager_train_step(m, xr, tr, step, 1e-2);
        return;
      }
      auto& g = graphs[static_cast<size_t>(r)];
      if (!g) g = std::make_unique<TrainGraph>(m, n, tr.dtype(), TrainGraphOptions{.overlap = run == Run::graph});
      loss[static_cast<size_t>(r)] = g->train_step(xr, tr, step, 1e-2);
    });
    for (float l : loss) EXPECT_EQ(std::memcmp(&l, &loss[0], sizeof l), 0) << "ranks disagree on the loss";
    return loss[0];
  }
};

Tensor train_graph_input(int64_t tokens, uint64_t seed) {
  Tensor x = Tensor::empty({tokens, 128}, DType::bf16);
  x.fill_normal(seed);
  return x;
}

// Every rank's shards of `what` (masters, optimizer state) as bytes, rank after rank, parameter after parameter.
std::vector<uint8_t> rank_bytes(RankGroup& g, const std::function<Tensor(const RankParam&)>& what) {
  std::vector<uint8_t> out;
  for (auto& m : g.models)
    for (const RankParam& p : m->params()) {
      const Tensor t = what(p).to(Device::cpu(), m->ctx().stream);
      const auto* b = static_cast<const uint8_t*>(t.data_ptr());
      out.insert(out.end(), b, b + t.nbytes());
    }
  return out;
}

void check_train_graph_equals_eager(const std::string& recipe, const TrainLayout& l, const std::string& optimizer,
                                    Device device = Device::cpu()) {
  SCOPED_TRACE(recipe + " tp " + std::to_string(l.tp) + (l.sp ? " sp" : "") + " T " + std::to_string(l.tokens) + " " +
               optimizer);
  TrainRanks graph(train_graph_model(recipe, l, optimizer), device),
      eager(train_graph_model(recipe, l, optimizer), device), serial(train_graph_model(recipe, l, optimizer), device);
  for (int64_t s = 1; s <= 3; ++s) {
    const Tensor x = train_graph_input(l.tokens, 10 + static_cast<uint64_t>(s));
    const Tensor target = train_graph_input(l.tokens, 20 + static_cast<uint64_t>(s));
    const float lg = graph.step(x, target, s, TrainRanks::Run::graph);
    const float le = eager.step(x, target, s, TrainRanks::Run::reference);
    const float ls = serial.step(x, target, s, TrainRanks::Run::serial);
    EXPECT_TRUE(std::isfinite(le));
    EXPECT_EQ(std::memcmp(&lg, &le, sizeof lg), 0) << "step " << s << ": graph loss " << lg << ", reference " << le;
    EXPECT_EQ(std::memcmp(&ls, &le, sizeof ls), 0)
        << "step " << s << ": one-stream loss " << ls << ", reference " << le;
  }
  EXPECT_TRUE(rank_bytes(serial, [](const RankParam& p) { return p.master; }) ==
              rank_bytes(eager, [](const RankParam& p) { return p.master; }))
      << "the one-stream plan's fp32 masters differ after three steps";
  EXPECT_TRUE(rank_bytes(graph, [](const RankParam& p) { return p.master; }) ==
              rank_bytes(eager, [](const RankParam& p) { return p.master; }))
      << "the fp32 masters differ after three steps";
  EXPECT_TRUE(rank_bytes(graph, [](const RankParam& p) { return p.grad; }) ==
              rank_bytes(eager, [](const RankParam& p) { return p.grad; }))
      << "the last step's gradients differ";
  EXPECT_TRUE(rank_bytes(graph, [](const RankParam& p) { return p.state1; }) ==
              rank_bytes(eager, [](const RankParam& p) { return p.state1; }))
      << "the optimizer state differs";
  // The masters moved: a step that did nothing would also compare equal.
  TrainRanks fresh(train_graph_model(recipe, l, optimizer), device);
  EXPECT_FALSE(rank_bytes(graph, [](const RankParam& p) { return p.master; }) ==
               rank_bytes(fresh, [](const RankParam& p) { return p.master; }));
}

// tp 2 at 64 tokens: local M 32 (block recipes' column-wise re-gather falls back); tp 2 at 256: local 128
// (quantized); tp 4 at 136: local 34 (fallback); tp 2 without SP (all-reduces).
const TrainLayout kTrainLayouts[] = {{1, false, 64}, {2, true, 64}, {2, true, 256}, {4, true, 136}, {2, false, 64}};

class TrainGraphCpu : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainGraphCpu, EqualsEagerStepByteForByte) {
  for (const TrainLayout& l : kTrainLayouts) check_train_graph_equals_eager(GetParam(), l, "adamw");
}

INSTANTIATE_TEST_SUITE_P(Recipes, TrainGraphCpu,
                         ::testing::Values("none", "fp8_delayed", "fp8_current", "fp8_block", "mxfp8", "nvfp4"));

// On a GPU the graph's comm nodes run on their own stream, ordered by the planned events.
class TrainGraphGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainGraphGpu, EqualsEagerStepByteForByte) {
  TE_REQUIRE_GPU();
  for (const TrainLayout& l : kTrainLayouts) check_train_graph_equals_eager(GetParam(), l, "adamw", Device::cuda(0));
}

INSTANTIATE_TEST_SUITE_P(Recipes, TrainGraphGpu,
                         ::testing::Values("none", "fp8_delayed", "fp8_current", "fp8_block", "mxfp8", "nvfp4"));

TEST(TrainGraph, SgdMomentumEqualsEager) {
  for (const char* recipe : {"none", "fp8_block"}) check_train_graph_equals_eager(recipe, {2, true, 64}, "sgd");
}

// A non-finite loss: the graph step skips its backward and optimizer as the eager step does (gradients zeroed,
// weights and optimizer state those of the last good step), and the next good step matches again.
TEST(TrainGraph, NonFiniteLossSkipsTheUpdateAsEager) {
  const TrainLayout l{2, true, 64};
  TrainRanks graph(train_graph_model("fp8_current", l, "adamw")), eager(train_graph_model("fp8_current", l, "adamw"));
  std::vector<float> bad = train_graph_input(l.tokens, 7).to_f32_vector();
  bad[5] = std::nanf("");
  const Tensor bad_target = Tensor::from_f32(bad, {l.tokens, 128}, DType::bf16);
  int64_t step = 0;
  for (bool finite : {true, false, true}) {
    ++step;
    const Tensor x = train_graph_input(l.tokens, 30 + static_cast<uint64_t>(step));
    const Tensor t = finite ? train_graph_input(l.tokens, 40 + static_cast<uint64_t>(step)) : bad_target;
    const float lg = graph.step(x, t, step, TrainRanks::Run::graph);
    const float le = eager.step(x, t, step, TrainRanks::Run::reference);
    EXPECT_EQ(std::isfinite(lg), finite);
    EXPECT_EQ(std::isfinite(le), finite);
    if (finite) {
      EXPECT_EQ(std::memcmp(&lg, &le, sizeof lg), 0) << "step " << step;
    }
    EXPECT_TRUE(rank_bytes(graph, [](const RankParam& p) { return p.master; }) ==
                rank_bytes(eager, [](const RankParam& p) { return p.master; }))
        << "step " << step;
    EXPECT_TRUE(rank_bytes(graph, [](const RankParam& p) { return p.grad; }) ==
                rank_bytes(eager, [](const RankParam& p) { return p.grad; }))
        << "step " << step;
  }
}

// Through the public API: the default executor (collectives overlapped) and run.executor: eager (the same plan on one
// stream) train alike — losses and saved weights —, also across a change of token count (a new plan) and an eval
// in between.
TEST(TrainGraph, EngineExecutorsTrainAlike) {
  using namespace training_test;
  for (const std::string recipe : {"fp8_block", "nvfp4"}) {
    SCOPED_TRACE(recipe);
    auto graph = teengine::Engine::from_yaml_string(spec_yaml(recipe, 2, "adamw"));
    auto eager = teengine::Engine::from_yaml_string(spec_yaml(recipe, 2, "adamw"), {"run.executor=eager"});
    const Batches d;
    const std::vector<float> lg = train_steps(graph, d, 1, 3, true), le = train_steps(eager, d, 1, 3, true);
    ASSERT_EQ(lg.size(), le.size());
    EXPECT_EQ(0, std::memcmp(lg.data(), le.data(), lg.size() * sizeof(float)));
    // 16 tokens: another plan for the graph engine.
    teengine::HostTensor x16 = d.x[0], y16 = d.y[0];
    x16.shape[0] = y16.shape[0] = 16;
    x16.bytes.resize(x16.bytes.size() / 2);
    y16.bytes.resize(y16.bytes.size() / 2);
    const float g16 = graph.train_step(x16, y16), e16 = eager.train_step(x16, y16);
    EXPECT_EQ(0, std::memcmp(&g16, &e16, sizeof g16));
    const std::string wg = scratch_path("graph_" + recipe + ".st"), we = scratch_path("eager_" + recipe + ".st");
    graph.save_weights(wg);
    eager.save_weights(we);
    expect_same_tensors(wg, we);
    std::filesystem::remove(wg);
    std::filesystem::remove(we);
  }
}

// Kind::gradient: the step without the update — every gradient is the reference backward's, the weights and the
// optimizer state stay. Kind::eval: the training forward's loss, nothing changed (masters, optimizer state, and the
// delayed-scaling history the next step quantizes with: the next step equals a run without the eval).
TEST(TrainGraph, GradientAndEvalKinds) {
  for (const char* recipe : {"none", "fp8_delayed", "mxfp8"}) {
    SCOPED_TRACE(recipe);
    const TrainLayout l{1, false, 64};
    TrainRanks g(train_graph_model(recipe, l, "adamw")), ref(train_graph_model(recipe, l, "adamw"));
    const Tensor x = train_graph_input(l.tokens, 51), t = train_graph_input(l.tokens, 52);
    const auto masters = [](const RankParam& p) { return p.master; };
    const std::vector<uint8_t> before = rank_bytes(g, masters);
    TrainGraph grad(*g.models[0], l.tokens, t.dtype(), {TrainGraphOptions::Kind::gradient});
    const float lg = grad.train_step(x, t, 1, 1e-2);
    const float lr = test::eager_forward_backward(*ref.models[0], x, t);
    EXPECT_EQ(std::memcmp(&lg, &lr, sizeof lg), 0) << lg << " vs " << lr;
    EXPECT_TRUE(rank_bytes(g, [](const RankParam& p) { return p.grad; }) ==
                rank_bytes(ref, [](const RankParam& p) { return p.grad; }));
    EXPECT_TRUE(rank_bytes(g, masters) == before) << "a gradient step moved the weights";

    // Eval between steps: its loss is the training forward's, and the following step is unchanged by it.
    TrainRanks a(train_graph_model(recipe, l, "adamw")), b(train_graph_model(recipe, l, "adamw"));
    (void)a.step(x, t, 1, TrainRanks::Run::graph);
    (void)b.step(x, t, 1, TrainRanks::Run::graph);
    TrainGraph eval(*a.models[0], l.tokens, t.dtype(), {TrainGraphOptions::Kind::eval});
    const Tensor x2 = train_graph_input(l.tokens, 53), t2 = train_graph_input(l.tokens, 54);
    const float le = eval.eval_loss(x2, t2);
    EXPECT_TRUE(std::isfinite(le));
    EXPECT_THROW((void)eval.train_step(x2, t2, 2, 1e-2), Error);
    const float la = a.step(x2, t2, 2, TrainRanks::Run::graph), lb = b.step(x2, t2, 2, TrainRanks::Run::graph);
    EXPECT_EQ(std::memcmp(&la, &lb, sizeof la), 0) << "the eval changed the next step's loss";
    EXPECT_EQ(std::memcmp(&le, &la, sizeof le), 0) << "eval " << le << ", the step's own loss " << la;
    EXPECT_TRUE(rank_bytes(a, masters) == rank_bytes(b, masters));
  }
}

// Profiling times every plan step (node names, op kinds, forward and backward) and changes no byte of the step.
TEST(TrainGraph, ProfiledStepTimesEveryNodeAndChangesNothing) {
  const TrainLayout l{1, false, 64};
  TrainRanks plain(train_graph_model("fp8_block", l, "adamw")), timed(train_graph_model("fp8_block", l, "adamw"));
  const Tensor x = train_graph_input(l.tokens, 61), t = train_graph_input(l.tokens, 62);
  const float lp = plain.step(x, t, 1, TrainRanks::Run::graph);
  TrainGraph g(*timed.models[0], l.tokens, t.dtype(), TrainGraphOptions{.profile = true});
  const float lt = g.train_step(x, t, 1, 1e-2);
  EXPECT_EQ(std::memcmp(&lp, &lt, sizeof lp), 0);
  const auto masters = [](const RankParam& p) { return p.master; };
  EXPECT_TRUE(rank_bytes(plain, masters) == rank_bytes(timed, masters));
  const std::vector<NodeTime> times = g.node_times();
  ASSERT_EQ(times.size(), g.plan().steps.size());
  int backward = 0, gemms = 0;
  double total = 0;
  for (size_t s = 0; s < times.size(); ++s) {
    EXPECT_EQ(times[s].node, g.graph().node_label(g.plan().steps[s].node));
    EXPECT_GE(times[s].ms, 0.0) << times[s].node;
    backward += times[s].backward;
    gemms += times[s].op == "column_gemm" || times[s].op == "row_gemm";
    total += times[s].ms;
  }
  EXPECT_GT(backward, 0);
  EXPECT_EQ(gemms, 2 * 4);  // two layers, each qkv and fc1 column-parallel, proj and fc2 row-parallel
  EXPECT_GT(total, 0.0);

  TrainGraph unprofiled(*timed.models[0], l.tokens, t.dtype(), {});
  EXPECT_THROW((void)unprofiled.node_times(), Error) << "a graph built without profiling has no times";
}

}  // namespace
}  // namespace te
