// Planner: order, events, gather decisions, and liveness-based arena reuse against hand-computed bounds.
#include <gtest/gtest.h>

#include "graph/planner.h"
#include "test_ops.h"

namespace te {
namespace {
using namespace test_ops;

// A LayerNormMLP-shaped sequence-parallel chain (TP = 2, local tokens T = 8, H = 16, F/N = 32, f32):
// x[8,16] → norm → gather[16,16] → fc1[16,32] → act[16,32] → fc2[16,16] → reduce-scatter[8,16] → + x → out.
struct MlpChain {
  Graph g;
  int x, w1, w2, ln, gathered, fc1, act, fc2, rs, out;
};
MlpChain mlp_chain(int64_t sleep_us = 0) {
  MlpChain c;
  GraphBuilder b(c.g);
  c.x = b.input("x", vt({8, 16}, DType::f32, Sharding::split(0)));
  c.w1 = b.param("fc1_weight", vt({16, 32}, DType::f32, Sharding::split(1)));
  c.w2 = b.param("fc2_weight", vt({32, 16}, DType::f32, Sharding::split(0)));
  c.ln = b.add1(op(Op::scale), {c.x}, {{"alpha", 0.5}}, "layernorm");
  c.gathered = b.add1(op(Op::gather), {c.ln}, {{"world", int64_t{2}}, {"sleep_us", sleep_us}}, "sp_gather");
  c.fc1 = b.add1(op(Op::matmul), {c.gathered, c.w1}, {}, "fc1");
  c.act = b.add1(op(Op::tanh), {c.fc1}, {}, "act");
  c.fc2 = b.add1(op(Op::matmul), {c.act, c.w2}, {}, "fc2");
  c.rs = b.add1(op(Op::reduce_scatter), {c.fc2}, {{"world", int64_t{2}}, {"sleep_us", sleep_us}}, "sp_reduce_scatter");
  ValueType xt = c.g.value(c.x).type;
  EXPECT_EQ(c.g.value(c.rs).type, xt);
  c.out = b.add1(op(Op::add), {c.rs, c.x}, {}, "residual");
  b.mark_output(c.out);
  return c;
}

TEST(Planner, LayerNormMlpPeakMeetsHandBound) {
  MlpChain c = mlp_chain();
  PlanOptions opt;
  opt.alignment = 256;
  Plan p = plan_graph(c.g, opt);
  // Sizes: ln 512, gathered 1024, fc1 2048, act 2048, fc2 1024, rs 512, out 512 → naive 7680.
  EXPECT_EQ(p.naive_bytes, 512 + 1024 + 2048 + 2048 + 1024 + 512 + 512);
  // Hand bound: the largest set of buffers live at once is {fc1, act} while act runs: 4096 bytes. No allocator
  // can do better, and greedy-by-size reaches it.
  EXPECT_LE(p.arena_bytes, p.naive_bytes);
  EXPECT_LE(p.arena_bytes, 4096);
  EXPECT_EQ(p.arena_bytes, 4096);
  // Values live at the same time never overlap in the arena (a chain: live = [first_step, last_step]).
  for (const auto& a : p.buffers)
    for (const auto& b : p.buffers) {
      if (a.offset < 0 || b.offset < 0 || a.value >= b.value) continue;
      const bool live_together = a.first_step <= b.last_step && b.first_step <= a.last_step;
      const bool overlap = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      EXPECT_FALSE(live_together && overlap) << c.g.value_label(a.value) << " vs " << c.g.value_label(b.value);
    }
  // Inputs and params are caller-bound, never in the arena.
  EXPECT_EQ(p.buffers[static_cast<size_t>(c.x)].offset, -1);
  EXPECT_EQ(p.buffers[static_cast<size_t>(c.w1)].offset, -1);
}

// Values the op binding keeps (in models/: what the collectives allocate) take no arena bytes and say so in explain().
TEST(Planner, ValuesHeldByTheBindingGetNoArenaSlot) {
  MlpChain c = mlp_chain();
  PlanOptions opt;
  opt.held_by_binding = [](const Graph& g, const Value& v) {
    return v.producer >= 0 && g.node(v.producer).op->stream == StreamClass::comm;
  };
  Plan p = plan_graph(c.g, opt);
  for (int v : {c.gathered, c.rs}) {
    const PlannedBuffer& b = p.buffers[static_cast<size_t>(v)];
    EXPECT_TRUE(b.held_by_binding) << c.g.value_label(v);
    EXPECT_EQ(b.offset, -1);
    EXPECT_EQ(b.bytes, 0);
  }
  EXPECT_FALSE(p.buffers[static_cast<size_t>(c.fc1)].held_by_binding);
  EXPECT_EQ(p.naive_bytes, 512 + 2048 + 2048 + 1024 + 512);  // the chain's sizes without gathered and rs
  EXPECT_LE(p.arena_bytes, 4096);
  const std::string text = explain(c.g, p);
  EXPECT_NE(text.find("'sp_gather' [16, 16] f32 cpu replicated  held by the op binding"), std::string::npos) << text;
}

TEST(Planner, NoReuseGivesNaiveLayout) {
  MlpChain c = mlp_chain();
  PlanOptions opt;
  opt.reuse_buffers = false;
  Plan p = plan_graph(c.g, opt);
  EXPECT_EQ(p.arena_bytes, p.naive_bytes);
}

// in_place = 0: the node's output takes its input's exact bytes when nothing reads the input later; with a later
// reader it gets bytes of its own, never a partial overlap.
TEST(Planner, InPlaceOutputTakesItsInputsBytesOnlyWhenNothingReadsItLater) {
  for (bool later_reader : {false, true}) {
    Graph g;
    GraphBuilder b(g);
    const int x = b.input("x", vt({64, 64}, DType::f32));
    const int a = b.add1(op(Op::scale), {x}, {{"alpha", 2.0}}, "a");
    const int y = b.add1(op(Op::scale), {a}, {{"alpha", 3.0}, {"in_place", int64_t{0}}}, "y");
    int out = y;
    if (later_reader) out = b.add1(op(Op::add), {y, a}, {}, "reads_a_after_y");
    b.mark_output(out);
    const Plan p = plan_graph(g);
    const PlannedBuffer& ba = p.buffers[static_cast<size_t>(a)];
    const PlannedBuffer& by = p.buffers[static_cast<size_t>(y)];
    if (!later_reader) {
      EXPECT_EQ(by.offset, ba.offset);
      EXPECT_EQ(p.arena_bytes, ba.bytes);
    } else {
      EXPECT_TRUE(by.offset + by.bytes <= ba.offset || ba.offset + ba.bytes <= by.offset)
          << "a is read after y is written: " << ba.offset << " vs " << by.offset;
    }
  }
}

TEST(Planner, StreamsAndCrossStreamEvents) {
  MlpChain c = mlp_chain();
  Plan p = plan_graph(c.g);
  ASSERT_EQ(p.steps.size(), 7u);
  int comm = 0;
  for (const auto& s : p.steps) comm += s.stream == StreamClass::comm;
  EXPECT_EQ(comm, 2);
  // Every edge between the streams has an event: layernorm→gather, gather→fc1, fc2→reduce-scatter, rs→residual.
  ASSERT_EQ(p.events.size(), 4u);
  std::vector<std::pair<int, int>> edges;
  for (const auto& e : p.events) {
    EXPECT_NE(e.record_on, e.wait_on);
    edges.emplace_back(e.producer, e.consumer);
  }
  EXPECT_EQ(edges, (std::vector<std::pair<int, int>>{{0, 1}, {1, 2}, {4, 5}, {5, 6}}));
  PlanOptions one;
  one.single_stream = true;
  EXPECT_TRUE(plan_graph(c.g, one).events.empty());
}

TEST(Planner, OneEventPerProducerAndWaitingStream) {
  Graph g;
  GraphBuilder b(g);
  int x = b.input("x", vt({4}));
  int c1 = b.add1(op(Op::slow_copy), {x}, {}, "copy");
  int a = b.add1(op(Op::scale), {c1}, {{"alpha", 2.0}}, "a");
  int a2 = b.add1(op(Op::add), {c1, a}, {}, "b");  // second compute reader of c1: ordered by the stream
  b.mark_output(a2);
  Plan p = plan_graph(g);
  ASSERT_EQ(p.events.size(), 1u);
  EXPECT_EQ(p.events[0].consumer, 1);
}

// A node that rewrites x in place on the side stream, ordered after x's reader by a control edge: no value connects
// them, yet the plan orders them and synchronises the two streams, and a cycle through a control edge is refused.
TEST(Planner, ControlEdgesOrderAndSynchroniseWithoutAValue) {
  Graph g;
  GraphBuilder b(g);
  int x = b.param("x", vt({4}), false);
  int y = b.add1(op(Op::scale), {x}, {{"alpha", 2.0}}, "reader");
  const int rewrite = g.num_nodes();
  b.add(op(Op::negate_in_place), {x}, {}, "rewrite");
  b.order_after(rewrite, 0);
  b.mark_output(y);
  Plan p = plan_graph(g);
  ASSERT_EQ(p.steps.size(), 2u);
  EXPECT_EQ(p.steps[0].node, 0);
  EXPECT_EQ(p.steps[1].node, rewrite);
  EXPECT_EQ(p.steps[1].stream, StreamClass::side);
  ASSERT_EQ(p.events.size(), 1u);
  EXPECT_EQ(p.events[0].value, -1);
  EXPECT_EQ(p.events[0].producer, 0);
  EXPECT_EQ(p.events[0].consumer, rewrite);
  EXPECT_EQ(p.events[0].wait_on, StreamClass::side);
  EXPECT_NE(explain(g, p).find("after node 0 'reader'"), std::string::npos) << explain(g, p);

  // Without the edge nothing orders them: the rewrite, built last but ready first, may run before its reader.
  Graph free_graph;
  GraphBuilder fb(free_graph);
  int fx = fb.param("x", vt({4}), false);
  fb.mark_output(fb.add1(op(Op::scale), {fx}, {{"alpha", 2.0}}, "reader"));
  fb.add(op(Op::negate_in_place), {fx}, {}, "rewrite");
  EXPECT_TRUE(plan_graph(free_graph).events.empty());

  b.order_after(0, rewrite);  // the reader after the rewrite too: a cycle
  EXPECT_THROW(plan_graph(g), Error);
  EXPECT_THROW(b.order_after(0, 0), Error);
  EXPECT_THROW(b.order_after(0, 7), Error);
}

// A control edge whose order another predecessor already implies gets no event: the side node waits for the last
// reader only.
TEST(Planner, ImpliedControlEdgesGetNoEvent) {
  Graph g;
  GraphBuilder b(g);
  int x = b.param("x", vt({4}), false);
  int y = b.add1(op(Op::scale), {x}, {{"alpha", 2.0}}, "first_reader");
  int z = b.add1(op(Op::add), {x, y}, {}, "second_reader");
  b.mark_output(z);
  const int rewrite = g.num_nodes();
  b.add(op(Op::negate_in_place), {x}, {}, "rewrite");
  b.order_after(rewrite, 0);
  b.order_after(rewrite, 1);
  Plan p = plan_graph(g);
  ASSERT_EQ(p.events.size(), 1u);
  EXPECT_EQ(p.events[0].producer, 1);
}

TEST(Planner, CommNodesAreEnqueuedAsEarlyAsReady) {
  Graph g;
  GraphBuilder b(g);
  int x = b.input("x", vt({4}));
  int y = b.input("y", vt({4}));
  int c1 = b.add1(op(Op::scale), {x}, {{"alpha", 2.0}}, "compute_first_built");
  int c2 = b.add1(op(Op::slow_copy), {y}, {}, "gather_built_second");
  b.add1(op(Op::add), {c1, c2}, {}, "join");
  Plan p = plan_graph(g);
  EXPECT_EQ(p.steps[0].node, 1);  // the comm node starts first so it overlaps the scale
  EXPECT_EQ(p.steps[1].node, 0);
  EXPECT_EQ(p.steps[2].node, 2);
}

TEST(Planner, GatherHookDecisionsAreRecordedAndExplained) {
  MlpChain c = mlp_chain();
  PlanOptions opt;
  int calls = 0;
  opt.gather_hook = [&](const Graph& g, const Node& n) {
    ++calls;
    EXPECT_EQ(n.name, "sp_gather");
    EXPECT_EQ(g.value(n.inputs[0]).type.shape, (Shape{8, 16}));
    GatherPlan d;
    d.rowwise = {GatherRoute::quantized, "row-wise 1D blocks always gather"};
    d.columnwise = {GatherRoute::fallback, "local M 8 is not a multiple of 128"};
    d.producer_writes_quantized = true;
    return d;
  };
  Plan p = plan_graph(c.g, opt);
  EXPECT_EQ(calls, 1);
  const GatherPlan* d = p.gather_plan(1);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->columnwise.path, GatherRoute::fallback);
  EXPECT_EQ(d->tensor.path, GatherRoute::none);
  EXPECT_EQ(p.gather_plan(0), nullptr);
  const std::string text = explain(c.g, p);
  EXPECT_NE(text.find("gather columnwise: fallback — local M 8 is not a multiple of 128"), std::string::npos) << text;
  EXPECT_NE(text.find("gather rowwise: quantized — row-wise 1D blocks always gather"), std::string::npos) << text;
  EXPECT_NE(text.find("producer writes quantized"), std::string::npos) << text;
  EXPECT_NE(text.find("comm    node 1 'sp_gather' (t_gather)"), std::string::npos) << text;
  EXPECT_NE(text.find("memory: arena 4.0 KiB (planned peak) vs 7.5 KiB naive sum, 46.7% saved"), std::string::npos)
      << text;
  opt.gather_hook = [](const Graph&, const Node&) {
    GatherPlan d;
    d.rowwise = {GatherRoute::quantized, ""};
    return d;
  };
  EXPECT_THROW(plan_graph(c.g, opt), Error);
}

TEST(Planner, DefaultGatherPlanWithoutHook) {
  MlpChain c = mlp_chain();
  Plan p = plan_graph(c.g);
  const GatherPlan* d = p.gather_plan(1);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->tensor.path, GatherRoute::high_precision);
  EXPECT_EQ(d->rowwise.path, GatherRoute::none);
}

TEST(Planner, QuantizedValueBytesCoverDataAndScales) {
  ValueType t = vt({256, 512}, DType::bf16);
  t.quant = QuantFormat::fp8_block_1d;
  t.usages = Usage::rowwise;
  // data 256*512 B; scales 256 rows x 4 blocks of f32, padded to 256 x 4 → 4096 B; amax 16 B.
  EXPECT_EQ(quantized_value_bytes(t), 256 * 512 + 4096 + 16);
  t.usages = Usage::both;
  // column-wise: 512 rows x 2 blocks (padded to 4) of f32 → 8192 B.
  EXPECT_EQ(quantized_value_bytes(t), 2 * 256 * 512 + 4096 + 8192 + 16);
  t.quant = QuantFormat::nvfp4_1d;
  t.usages = Usage::rowwise;
  // fp4 data: 65536 B; e4m3 scales 256 x 32 → 8192 B.
  EXPECT_EQ(quantized_value_bytes(t), 65536 + 8192 + 16);
}

TEST(Planner, AlignmentMustBeAPowerOfTwo) {
  MlpChain c = mlp_chain();
  EXPECT_NO_THROW(plan_graph(c.g));
  PlanOptions bad;
  bad.alignment = 100;
  EXPECT_THROW(plan_graph(c.g, bad), Error);
}

}  // namespace
}  // namespace te
