// The model graph (models/model_graph.h): the planned, two-stream inference forward equals the eager RankModel
// forward bit for bit, and moves the same bytes through the same gather paths, for every recipe and parallel
// layout (tp 1, tp 2 and 4 with sequence parallelism — including local shards that are not block multiples —, tp 2
// without it); its plan shows the gathers with their reasons on the comm stream; misuse is refused by name.
#include <gtest/gtest.h>

#include "comm/local_communicator.h"
#include "engine/error.h"
#include "models/model_graph.h"
#include "models/rank_group.h"
#include "tests/common/gpu.h"
#include "tests/models/eager_reference.h"
#include "tests/models/test_spec_yaml.h"

namespace te {
namespace {

struct Layout {
  int tp;
  bool sp;
  int64_t tokens;
};

std::string graph_model(const std::string& recipe, const Layout& l, const std::string& mode = "infer") {
  return test::SmallSpec{.name = "graph", .layers = 2, .tp = l.tp, .sp = l.sp, .recipe = recipe, .mode = mode,
                         .tokens = l.tokens, .seed = 11}
      .yaml();
}

struct Ranks : RankGroup {
  std::vector<std::unique_ptr<ModelGraph>> graphs;

  Ranks(const std::string& yaml, Device device) : RankGroup(parse_spec(yaml, "<graph test>"), device) {
    graphs.resize(static_cast<size_t>(world()));
  }

  // One forward of the global input x [T, H] (host bf16) on every rank; the concatenated (SP) or rank-0 output.
  std::vector<uint16_t> forward(const Tensor& x, bool graph) {
    const int w = spec.parallel.tp;
    const bool sp = spec.parallel.sequence_parallel && w > 1;
    const int64_t n = sp ? x.size(0) / w : x.size(0);
    std::vector<std::vector<uint16_t>> outs(w);
    run_ranks(comms, [&](Communicator& c) {
      const int r = c.rank();
      RankContext& ctx = *ctxs[r];
      Tensor xr = x.narrow(0, sp ? r * n : 0, n).contiguous().to(ctx.device, ctx.stream);
      Tensor y;
      if (graph) {
        if (!graphs[r]) graphs[r] = std::make_unique<ModelGraph>(*models[r], n);
        y = graphs[r]->forward(xr);
      } else {
        y = test::eager_forward(*models[r], xr);
      }
      Tensor h = y.to(Device::cpu(), ctx.stream);
      ctx.stream.synchronize();
      outs[r].assign(h.data<uint16_t>(), h.data<uint16_t>() + h.numel());
    });
    std::vector<uint16_t> all;
    for (int r = 0; r < (sp ? w : 1); ++r) all.insert(all.end(), outs[r].begin(), outs[r].end());
    return all;
  }
};

Tensor input(int64_t tokens, uint64_t seed) {
  Tensor x = Tensor::empty({tokens, 128}, DType::bf16);
  x.fill_normal(seed);
  return x;
}

void expect_same_paths(const CommMetrics& a, const CommMetrics& b) {
  for (auto [pa, pb] : {std::pair{&a.gather_quantized, &b.gather_quantized},
                        std::pair{&a.gather_fallback, &b.gather_fallback}, std::pair{&a.gather_hp, &b.gather_hp},
                        std::pair{&a.reduce_scatter, &b.reduce_scatter}, std::pair{&a.all_reduce, &b.all_reduce}}) {
    EXPECT_EQ(pa->calls, pb->calls);
    EXPECT_EQ(pa->bytes, pb->bytes);
  }
}

// Two forwards each (delayed scaling updates its scales in between), graph and eager on separate, identical models.
void check_graph_equals_eager(const std::string& recipe, const Layout& l, Device device) {
  SCOPED_TRACE(recipe + " tp " + std::to_string(l.tp) + (l.sp ? " sp" : "") + " T " + std::to_string(l.tokens));
  Ranks graph(graph_model(recipe, l), device), eager(graph_model(recipe, l), device);
  for (uint64_t seed : {1, 2}) {
    const Tensor x = input(l.tokens, seed);
    const std::vector<uint16_t> g = graph.forward(x, true);
    const std::vector<uint16_t> e = eager.forward(x, false);
    ASSERT_EQ(g.size(), e.size());
    EXPECT_TRUE(g == e) << "graph and eager forwards differ (step " << seed << ")";
  }
  expect_same_paths(graph.comms[0]->metrics(), eager.comms[0]->metrics());
}

// 16 tokens at tp 1: on a GPU the fp8 GEMMs run the weight-streaming kernel, which adds the residual in its
// epilogue.
const Layout kLayouts[] = {{1, false, 64}, {1, false, 16}, {2, true, 64}, {2, false, 64}, {4, true, 1000}};

class ModelGraphCpu : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelGraphCpu, EqualsEagerForwardBitForBit) {
  for (const Layout& l : kLayouts) check_graph_equals_eager(GetParam(), l, Device::cpu());
}

INSTANTIATE_TEST_SUITE_P(Recipes, ModelGraphCpu,
                         ::testing::Values("none", "fp8_delayed", "fp8_current", "fp8_block", "mxfp8", "nvfp4"));

class ModelGraphGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelGraphGpu, EqualsEagerForwardBitForBit) {
  TE_REQUIRE_GPU();
  for (const Layout& l : kLayouts) check_graph_equals_eager(GetParam(), l, Device::cuda(0));
}

INSTANTIATE_TEST_SUITE_P(Recipes, ModelGraphGpu,
                         ::testing::Values("none", "fp8_current", "fp8_block", "mxfp8", "nvfp4"));

TEST(ModelGraph, PlanPutsGathersAndReductionsOnTheCommStreamWithReasons) {
  Ranks m(graph_model("fp8_block", {4, true, 1000}), Device::cpu());
  ModelGraph g(*m.models[0], 250);
  const Plan& plan = g.plan();
  int gathers = 0, reductions = 0;
  for (const PlanStep& st : plan.steps) {
    const Node& n = g.graph().node(st.node);
    if (n.op->name == "sp_gather" || n.op->name == "reduce") {
      EXPECT_EQ(st.stream, StreamClass::comm) << n.name;
      (n.op->name == "sp_gather" ? gathers : reductions) += 1;
    } else {
      EXPECT_EQ(st.stream, StreamClass::compute) << n.name;
    }
  }
  EXPECT_EQ(gathers, 4);     // 2 layers x 2 column-parallel inputs
  EXPECT_EQ(reductions, 4);  // 2 layers x 2 row-parallel outputs
  EXPECT_GE(plan.events.size(), 8u);
  ASSERT_EQ(plan.gathers.size(), 4u);
  for (const auto& [node, d] : plan.gathers) {
    EXPECT_EQ(d.columnwise.path, GatherRoute::none);
    EXPECT_EQ(d.rowwise.path, GatherRoute::quantized);  // row-wise 1x128 blocks never cross a token: 250 is fine
    EXPECT_EQ(d.rowwise.reason, "row-wise blocks of 128 never cross a token");
  }
  EXPECT_GT(plan.arena_bytes, 0);
  EXPECT_LT(plan.arena_bytes, plan.naive_bytes);
  const std::string text = g.explain();
  EXPECT_NE(text.find("layers.0.qkv.gather"), std::string::npos) << text;
  EXPECT_NE(text.find("gather rowwise: quantized"), std::string::npos) << text;
  EXPECT_NE(text.find("held by the op binding"), std::string::npos) << text;
}

TEST(ModelGraph, RecipeNonePlansHighPrecisionGathers) {
  Ranks m(graph_model("none", {2, true, 64}), Device::cpu());
  ModelGraph g(*m.models[0], 32);
  ASSERT_FALSE(g.plan().gathers.empty());
  for (const auto& [node, d] : g.plan().gathers) EXPECT_EQ(d.tensor.path, GatherRoute::high_precision);
}

TEST(ModelGraph, RefusesATrainingModelAndAWrongInputByName) {
  Ranks train(graph_model("none", {1, false, 64}, "train"), Device::cpu());
  try {
    ModelGraph g(*train.models[0], 64);
    FAIL() << "a training model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("run.mode: infer"), std::string::npos) << e.what();
  }
  Ranks infer(graph_model("none", {1, false, 64}), Device::cpu());
  ModelGraph g(*infer.models[0], 64);
  try {
    (void)g.forward(input(32, 1));
    FAIL() << "a 32-token input was accepted by a 64-token plan";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace te
