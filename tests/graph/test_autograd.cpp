// Autograd: gradients of a small chain against central finite differences of the executed graph (f64), saved
// values are exactly those backward rules read, replicated params' gradients are all-reduced.
#include <gtest/gtest.h>

#include <cmath>

#include "graph/autograd.h"
#include "graph/builtin_ops.h"
#include "graph/executor.h"
#include "graph/planner.h"
#include "test_ops.h"

namespace te {
namespace {
using namespace test_ops;

// Autograd over the test op table: gradients accumulate with t_add, seeds and zero gradients are t_fill.
BackwardOptions test_backward_options(int group_size = 1) {
  BackwardOptions bo;
  bo.accumulate = &op(Op::add);
  bo.fill = &op(Op::fill);
  bo.group_size = group_size;
  return bo;
}

struct Chain {
  Graph g;
  int x, w1, w2, h, a, o, loss;
  BackwardResult bw;
};

// loss = sum((o*o + 0.5*o)^2),  o = tanh(x·W1)·W2 — o is read three times (gradient accumulation).
Chain make_chain(DType dt) {
  Chain c;
  GraphBuilder b(c.g);
  c.x = b.input("x", vt({4, 3}, dt), /*requires_grad=*/true);
  c.w1 = b.param("w1", vt({3, 5}, dt));
  c.w2 = b.param("w2", vt({5, 2}, dt));
  c.h = b.add1(op(Op::matmul), {c.x, c.w1}, {}, "h");
  c.a = b.add1(op(Op::tanh), {c.h}, {}, "a");
  c.o = b.add1(op(Op::matmul), {c.a, c.w2}, {}, "o");
  int r = b.add1(op(Op::mul), {c.o, c.o}, {}, "r");
  int s = b.add1(op(Op::scale), {c.o}, {{"alpha", 0.5}}, "s");
  int t = b.add1(op(Op::add), {r, s}, {}, "t");
  c.loss = b.add1(op(Op::sumsq), {t}, {}, "loss");
  b.mark_output(c.loss);
  const BackwardOptions bo = test_backward_options();
  c.bw = build_backward(c.g, c.loss, bo);
  return c;
}

TEST(Autograd, GradientsMatchFiniteDifferences) {
  Chain c = make_chain(kF64);
  Plan plan = plan_graph(c.g);
  Executor ex(c.g, plan, Device::cpu());
  std::vector<Tensor> vals{make({4, 3}, kF64, 11), make({3, 5}, kF64, 12), make({5, 2}, kF64, 13)};
  const std::vector<int> ids{c.x, c.w1, c.w2};
  for (size_t i = 0; i < ids.size(); ++i) ex.bind(ids[i], vals[i]);
  ex.run();
  std::vector<std::vector<double>> grads;
  for (int id : ids) {
    ASSERT_GE(c.bw.grad_of(id), 0) << c.g.value_label(id);
    grads.push_back(to_doubles(ex.tensor(c.bw.grad_of(id))));
  }
  auto loss_at = [&] {
    ex.run();
    return to_doubles(ex.tensor(c.loss))[0];
  };
  const double eps = 1e-6;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<double> v = to_doubles(vals[i]);
    for (size_t k = 0; k < v.size(); ++k) {
      const double keep = v[k];
      v[k] = keep + eps;
      from_doubles(vals[i], v);
      const double up = loss_at();
      v[k] = keep - eps;
      from_doubles(vals[i], v);
      const double down = loss_at();
      v[k] = keep;
      from_doubles(vals[i], v);
      const double fd = (up - down) / (2 * eps);
      EXPECT_NEAR(grads[i][k], fd, 1e-6 * std::max(1.0, std::abs(fd))) << c.g.value_label(ids[i]) << " element " << k;
    }
  }
}

TEST(Autograd, OnlyWhatBackwardReadsIsSaved) {
  Chain c = make_chain(DType::f32);
  EXPECT_TRUE(c.g.value(c.x).saved_for_backward);   // matmul backward reads A (for dW1)
  EXPECT_TRUE(c.g.value(c.w1).saved_for_backward);  // ... and B (for dx)
  EXPECT_FALSE(c.g.value(c.h).saved_for_backward);  // tanh backward reads its output, not its input
  EXPECT_TRUE(c.g.value(c.a).saved_for_backward);
  EXPECT_TRUE(c.g.value(c.o).saved_for_backward);   // o*o reads o
  int backward_nodes = 0;
  for (const Node& n : c.g.nodes()) {
    backward_nodes += n.is_backward;
    if (n.is_backward && n.op != &op(Op::fill)) {
      EXPECT_GE(n.forward_node, 0) << c.g.node_label(n.id);
    }
  }
  EXPECT_GT(backward_nodes, 0);
  for (int id : {c.x, c.w1, c.w2}) EXPECT_TRUE(c.g.value(c.bw.grad_of(id)).is_output);
  EXPECT_EQ(c.g.value(c.bw.grad_of(c.w1)).name, "grad/w1");
}

TEST(Autograd, ThreadedForwardBackwardEqualsInline) {
  Chain c = make_chain(DType::f32);
  Plan plan = plan_graph(c.g);
  ExecOptions threads;
  threads.mode = ExecMode::host_threads;
  Executor a(c.g, plan, Device::cpu()), b(c.g, plan, Device::cpu(), threads);
  std::vector<Tensor> vals{make({4, 3}, DType::f32, 1), make({3, 5}, DType::f32, 2), make({5, 2}, DType::f32, 3)};
  const std::vector<int> ids{c.x, c.w1, c.w2};
  for (size_t i = 0; i < ids.size(); ++i) {
    a.bind(ids[i], vals[i]);
    b.bind(ids[i], vals[i]);
  }
  a.run();
  b.run();
  for (int id : ids) EXPECT_TRUE(bit_equal(a.tensor(c.bw.grad_of(id)), b.tensor(c.bw.grad_of(id))));
}

TEST(Autograd, OpWithoutBackwardIsNamed) {
  Graph g;
  GraphBuilder b(g);
  int x = b.param("x", vt({4}));
  int y = b.add1(op(Op::slow_copy), {x}, {}, "no_backward_copy");
  int l = b.add1(op(Op::sumsq), {y}, {}, "loss");
  const BackwardOptions bo = test_backward_options();
  try {
    build_backward(g, l, bo);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("node 0 'no_backward_copy' (t_slow_copy), whose op has no backward"), std::string::npos)
        << e.what();
  }
}

// Node state: the nodes built while a state is set own a share of it, the nodes after it none; every backward node
// shares its forward node's (a layer's backward phases act on the layer's own parameters and quantizers).
struct LayerState : NodeState {
  int id = 0;
};
struct OtherState : NodeState {};

TEST(Autograd, BackwardNodesShareTheirForwardNodesState) {
  Graph g;
  GraphBuilder b(g);
  const int x = b.input("x", vt({4, 3}), /*requires_grad=*/true);
  const int w = b.param("w", vt({3, 5}));
  auto layer = std::make_shared<LayerState>();
  layer->id = 7;
  EXPECT_EQ(b.set_node_state(layer), nullptr);
  const int h = b.add1(op(Op::matmul), {x, w}, {}, "fc");
  EXPECT_EQ(b.set_node_state(nullptr), layer);
  const int a = b.add1(op(Op::tanh), {h}, {}, "act");
  const int loss = b.add1(op(Op::sumsq), {a}, {}, "loss");
  const int forward_nodes = g.num_nodes();
  build_backward(g, loss, test_backward_options());
  int shared = 0;
  for (const Node& n : g.nodes()) {
    const int owner = n.is_backward ? n.forward_node : n.id;
    const bool of_fc = owner >= 0 && g.node(owner).name == "fc";
    EXPECT_EQ(n.state.get(), of_fc ? layer.get() : nullptr) << g.node_label(n.id);
    if (n.is_backward && of_fc) {
      EXPECT_EQ(n.state_as<LayerState>().id, 7);
      ++shared;
    }
  }
  EXPECT_GT(g.num_nodes(), forward_nodes);
  EXPECT_GE(shared, 2);  // the matmul's dx and dw
  const Node& fc = g.node(g.value(h).producer);
  EXPECT_EQ(&fc.state_as<LayerState>(), layer.get());
  try {
    (void)fc.state_as<OtherState>();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("'fc' (t_matmul): holds the state of another op kind"), std::string::npos) << e.what();
  }
  try {
    (void)g.node(g.value(a).producer).state_as<LayerState>();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("'act' (t_tanh): has no state"), std::string::npos) << e.what();
  }
}

// Many replicated parameters: each all-reduce added grows the graph's value vector while the gradient's name is
// being set, so the names must come from a copy of the parameter's value, not a reference into that vector. The
// parameter counts cover a reallocation inside the all-reduce loop.
TEST(Autograd, ReplicatedGradientNamesSurviveTheGraphGrowing) {
  for (int n = 8; n <= 64; ++n) {
    Graph g2;
    GraphBuilder b2(g2);
    int h = b2.input("x", vt({4, 3}));
    std::vector<std::pair<int, std::string>> params;
    for (int i = 0; i < n; ++i) {
      std::string name = "layers." + std::to_string(i) + ".a_parameter_name_longer_than_any_small_string_buffer";
      const int p = b2.param(name, vt({4, 3}));  // replicated
      params.emplace_back(p, name);
      h = b2.add1(op(Op::mul), {h, p}, {}, "scale" + std::to_string(i));
    }
    int l = b2.add1(op(Op::sumsq), {h}, {}, "loss");
    const BackwardOptions bo = test_backward_options(2);
    BackwardResult r = build_backward(g2, l, bo);
    for (const auto& [p, name] : params) {
      const int dg = r.grad_of(p);
      ASSERT_GE(dg, 0) << name;
      ASSERT_EQ(g2.value(dg).name, bo.grad_prefix + name) << n << " parameters";
      ASSERT_EQ(g2.node(g2.value(dg).producer).name, "all_reduce " + bo.grad_prefix + name) << n << " parameters";
    }
  }
}

// y = (x * gamma) · W; gamma is replicated (a LayerNorm weight), W split: only gamma's gradient is all-reduced.
TEST(Autograd, ReplicatedParamGradientsAreAllReduced) {
  Graph g2;
  GraphBuilder b2(g2);
  int x2 = b2.input("x", vt({4, 3}));
  int gm = b2.param("layer_norm_weight", vt({4, 3}));  // replicated
  int w = b2.param("weight", vt({3, 2}, DType::f32, Sharding::split(1)));
  int y = b2.add1(op(Op::mul), {x2, gm}, {}, "norm");
  int z = b2.add1(op(Op::matmul), {y, w}, {}, "fc");
  int l = b2.add1(op(Op::sumsq), {z}, {}, "loss");
  const BackwardOptions bo = test_backward_options(2);
  BackwardResult r = build_backward(g2, l, bo);
  const int dg = r.grad_of(gm), dw = r.grad_of(w);
  ASSERT_GE(dg, 0);
  ASSERT_GE(dw, 0);
  EXPECT_EQ(g2.node(g2.value(dg).producer).op, &builtin_op(BuiltinOp::all_reduce));
  EXPECT_NE(g2.node(g2.value(dw).producer).op, &builtin_op(BuiltinOp::all_reduce));
  const int local = g2.node(g2.value(dg).producer).inputs[0];
  GraphBuilder(g2).mark_output(local);  // keep the pre-reduction gradient readable after the step
  Plan plan = plan_graph(g2);
  EXPECT_EQ(plan.steps.back().stream, StreamClass::comm);  // the all-reduce runs on the comm stream

  // Two identical ranks: the sum over the group is twice the local gradient.
  ExecOptions opt;
  opt.env.world_size = 2;
  opt.env.all_reduce_sum = [](Tensor& t, const Stream&) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] *= 2.f;
  };
  Executor ex(g2, plan, Device::cpu(), opt);
  Tensor X = make({4, 3}, DType::f32, 1), G = make({4, 3}, DType::f32, 2), W = make({3, 2}, DType::f32, 3);
  ex.bind(x2, X);
  ex.bind(gm, G);
  ex.bind(w, W);
  ex.run();
  std::vector<double> red = to_doubles(ex.tensor(dg)), loc = to_doubles(ex.tensor(local));
  for (size_t i = 0; i < red.size(); ++i) EXPECT_EQ(red[i], 2 * loc[i]);
}

}  // namespace
}  // namespace te
