// Executor: a graph equals its kernels called one by one (bit-exact), in order on one thread and on two worker-thread
// streams; random comm delays never change results; a planned event removed from the plan breaks the result.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "graph/executor.h"
#include "graph/host_stream.h"
#include "graph/planner.h"
#include "test_ops.h"

namespace te {
namespace {
using namespace test_ops;

// Runs one kernel outside any graph, on freshly allocated tensors.
Tensor call(const Graph& g, int node_id, const std::vector<Tensor>& ins) {
  const Node& n = g.node(node_id);
  const ValueType& t = g.value(n.outputs[0]).type;
  std::vector<Tensor> outs{Tensor::zeros(t.shape, t.dtype)};
  ExecEnv env;
  Stream s;
  KernelCall c{n, ins, outs, s, env};
  n.op->run(c);
  return outs[0];
}

struct ModeCase {
  ExecMode mode;
  DType dtype;
};

class ExecutorEqualsOneByOne : public ::testing::TestWithParam<ModeCase> {};

TEST_P(ExecutorEqualsOneByOne, BitExact) {
  const auto [mode, dt] = GetParam();
  Graph g;
  GraphBuilder b(g);
  int x = b.input("x", vt({6, 4}, dt));
  int w = b.param("w", vt({4, 5}, dt));
  int v = b.param("v", vt({5, 6}, dt));
  int s = b.add1(op(Op::scale), {x}, {{"alpha", 0.75}}, "scale");        // node 0
  int gx = b.add1(op(Op::slow_copy), {s}, {{"sleep_us", int64_t{300}}}, "copy");  // node 1 (comm)
  int h = b.add1(op(Op::matmul), {gx, w}, {}, "mm1");                   // node 2
  int a = b.add1(op(Op::tanh), {h}, {}, "act");                         // node 3
  int o = b.add1(op(Op::matmul), {a, v}, {}, "mm2");                    // node 4 [6,6]
  int t = b.add1(op(Op::matmul), {o, x}, {}, "mm3");                    // node 5 [6,4]
  int y = b.add1(op(Op::add), {t, s}, {}, "residual");                 // node 6
  b.mark_output(y);
  b.mark_output(a);

  Tensor X = make({6, 4}, dt, 1), W = make({4, 5}, dt, 2), V = make({5, 6}, dt, 3);
  // One by one.
  Tensor rs = call(g, 0, {X});
  Tensor rgx = call(g, 1, {rs});
  Tensor rh = call(g, 2, {rgx, W});
  Tensor ra = call(g, 3, {rh});
  Tensor ro = call(g, 4, {ra, V});
  Tensor rt = call(g, 5, {ro, X});
  Tensor ry = call(g, 6, {rt, rs});

  Plan plan = plan_graph(g);
  EXPECT_LT(plan.arena_bytes, plan.naive_bytes);
  ExecOptions opt;
  opt.mode = mode;
  Executor ex(g, plan, Device::cpu(), opt);
  ex.bind(x, X);
  ex.bind(w, W);
  ex.bind(v, V);
  for (int step = 0; step < 3; ++step) {
    ex.run();
    EXPECT_TRUE(bit_equal(ex.tensor(y), ry)) << "step " << step;
    EXPECT_TRUE(bit_equal(ex.tensor(a), ra)) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ExecutorEqualsOneByOne,
                         ::testing::Values(ModeCase{ExecMode::inline_cpu, DType::f32},
                                           ModeCase{ExecMode::host_threads, DType::f32},
                                           ModeCase{ExecMode::inline_cpu, kF64},
                                           ModeCase{ExecMode::host_threads, kF64}),
                         [](const auto& info) {
                           std::string name = info.param.mode == ExecMode::inline_cpu ? "inline" : "threads";
                           name.append(info.param.dtype == DType::f32 ? "_f32" : "_f64");
                           return name;
                         });

// A random DAG over [n, n] matrices: compute nodes (scale, add, mul, matmul, tanh) interleaved with comm copies that
// sleep a random time, so on two worker threads comm work truly overlaps compute and arena slots are reused across
// streams.
struct RandomDag {
  Graph g;
  std::vector<int> inputs, outputs;
};
RandomDag random_dag(uint64_t seed, int nodes, int64_t sleep_us) {
  RandomDag d;
  GraphBuilder b(d.g);
  std::mt19937_64 rng(seed);
  std::vector<int> pool;
  for (int i = 0; i < 3; ++i) pool.push_back(d.inputs.emplace_back(b.input(std::string("in").append(std::to_string(i)), vt({8, 8}))));
  for (int i = 0; i < nodes; ++i) {
    // Mostly recent values, so chains are long and early values die (arena reuse).
    auto pick = [&] { return pool[pool.size() - 1 - rng() % std::min<size_t>(pool.size(), 4)]; };
    const std::string name = std::string("n").append(std::to_string(i));
    int v = -1;
    switch (rng() % 6) {
      case 0: v = b.add1(op(Op::scale), {pick()}, {{"alpha", 0.5}}, name); break;
      case 1: v = b.add1(op(Op::add), {pick(), pick()}, {}, name); break;
      case 2: v = b.add1(op(Op::mul), {pick(), pick()}, {}, name); break;
      case 3:  // tanh keeps repeated products bounded, so stale reads cannot hide behind inf/NaN
        v = b.add1(op(Op::tanh), {b.add1(op(Op::matmul), {pick(), pick()}, {}, name)}, {}, std::string(name).append(".act"));
        break;
      case 4: v = b.add1(op(Op::tanh), {pick()}, {}, name); break;
      default: v = b.add1(op(Op::slow_copy), {pick()}, {{"sleep_us", sleep_us}}, name); break;
    }
    pool.push_back(v);
  }
  for (size_t i = pool.size() - 2; i < pool.size(); ++i) {
    b.mark_output(pool[i]);
    d.outputs.push_back(pool[i]);
  }
  return d;
}

TEST(ExecutorStress, RandomCommDelaysNeverChangeResults) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    RandomDag d = random_dag(seed, 40, 400);
    Plan plan = plan_graph(d.g);
    ASSERT_FALSE(plan.events.empty()) << "seed " << seed;
    ASSERT_LT(plan.arena_bytes, plan.naive_bytes) << "seed " << seed << ": no reuse, no race to catch";
    ExecOptions inline_opt, threads_opt;
    threads_opt.mode = ExecMode::host_threads;
    Executor ref(d.g, plan, Device::cpu(), inline_opt);
    Executor ex(d.g, plan, Device::cpu(), threads_opt);
    for (int step = 0; step < 4; ++step) {
      // New inputs every step, so a read of a stale buffer from the previous step would show.
      for (size_t i = 0; i < d.inputs.size(); ++i) {
        Tensor t = make({8, 8}, DType::f32, seed * 100 + static_cast<uint64_t>(step) * 10 + i);
        ref.bind(d.inputs[i], t);
        ex.bind(d.inputs[i], t);
      }
      ref.run();
      ex.run();
      for (int o : d.outputs)
        ASSERT_TRUE(bit_equal(ex.tensor(o), ref.tensor(o))) << "seed " << seed << " step " << step << " "
                                                            << d.g.value_label(o);
    }
  }
}

// comm: y = slow_copy(x) (sleeps 20 ms); compute: z = scale(y). The one planned event orders them.
struct CopyThenScale {
  Graph g;
  int x, y, z;
};
CopyThenScale copy_then_scale() {
  CopyThenScale c;
  GraphBuilder b(c.g);
  c.x = b.input("x", vt({64}));
  c.y = b.add1(op(Op::slow_copy), {c.x}, {{"sleep_us", int64_t{20000}}, {"fixed", true}}, "gather");
  c.z = b.add1(op(Op::scale), {c.y}, {{"alpha", 2.0}}, "consumer");
  b.mark_output(c.z);
  return c;
}

int wrong_steps(const CopyThenScale& c, const Plan& plan) {
  ExecOptions opt;
  opt.mode = ExecMode::host_threads;
  Executor ex(c.g, plan, Device::cpu(), opt);
  int wrong = 0;
  for (int step = 0; step < 3; ++step) {
    Tensor x = make({64}, DType::f32, 7 + static_cast<uint64_t>(step));
    ex.bind(c.x, x);
    ex.run();
    std::vector<double> xs = to_doubles(x), zs = to_doubles(ex.tensor(c.z));
    bool ok = true;
    for (size_t i = 0; i < xs.size(); ++i) ok = ok && zs[i] == static_cast<double>(2.0f * static_cast<float>(xs[i]));
    wrong += !ok;
  }
  return wrong;
}

TEST(ExecutorStress, RemovingThePlannedEventBreaksTheResult) {
  CopyThenScale c = copy_then_scale();
  Plan plan = plan_graph(c.g);
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(wrong_steps(c, plan), 0);
  Plan broken = plan;
  broken.events.clear();  // the consumer no longer waits for the gather
  EXPECT_EQ(wrong_steps(c, broken), 3) << "without the event the consumer reads the buffer before the copy lands";
}

// The side stream's in-place rewrite of x waits for the slow reader on the compute stream through the control edge's
// event alone: with it every step reads x before the rewrite, without it the rewrite overtakes the reader.
TEST(ExecutorStress, ControlEdgeEventKeepsTheRewriteAfterItsReader) {
  Graph g;
  GraphBuilder b(g);
  int x = b.param("x", vt({64}), false);
  int y = b.add1(op(Op::scale), {x}, {{"alpha", 2.0}, {"sleep_us", int64_t{20000}}}, "slow_reader");
  b.mark_output(y);
  const int rewrite = g.num_nodes();
  b.add(op(Op::negate_in_place), {x}, {}, "rewrite");
  b.order_after(rewrite, 0);
  auto wrong_steps = [&](const Plan& plan) {
    ExecOptions opt;
    opt.mode = ExecMode::host_threads;
    Executor ex(g, plan, Device::cpu(), opt);
    int wrong = 0;
    for (int step = 0; step < 3; ++step) {
      Tensor xt = make({64}, DType::f32, 11 + static_cast<uint64_t>(step));
      const std::vector<double> before = to_doubles(xt);
      ex.bind(x, xt);
      ex.run();
      const std::vector<double> ys = to_doubles(ex.tensor(y)), after = to_doubles(xt);
      bool ok = true;
      for (size_t i = 0; i < before.size(); ++i)
        ok = ok && ys[i] == static_cast<double>(2.0f * static_cast<float>(before[i])) && after[i] == -before[i];
      wrong += !ok;
    }
    return wrong;
  };
  Plan plan = plan_graph(g);
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(wrong_steps(plan), 0);
  Plan broken = plan;
  broken.events.clear();
  EXPECT_EQ(wrong_steps(broken), 3) << "without the event the rewrite runs while the reader sleeps";
}

TEST(HostStream, EventOrdersWorkAcrossStreams) {
  for (bool use_event : {true, false}) {
    HostStream a, b;
    HostEvent e;
    std::atomic<int> value{0};
    int seen = -1;
    a.submit([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      value = 42;
    });
    if (use_event) {
      e.record(a);
      e.wait(b);
    }
    b.submit([&] { seen = value.load(); });
    b.synchronize();
    EXPECT_EQ(seen, use_event ? 42 : 0) << (use_event ? "with" : "without") << " the event";
    a.synchronize();
  }
}

TEST(HostStream, WaitWithoutRecordDoesNotBlockAndErrorsSurface) {
  HostStream s;
  HostEvent never;
  never.wait(s);
  s.submit([] { TE_THROW("task failed", ""); });
  int after = 0;
  s.submit([&] { after = 1; });
  EXPECT_THROW(s.synchronize(), Error);
  EXPECT_EQ(after, 1);  // later work (e.g. event records) still runs
  EXPECT_NO_THROW(s.synchronize());
}

TEST(Executor, UnboundInputIsNamed) {
  CopyThenScale c = copy_then_scale();
  Executor ex(c.g, plan_graph(c.g), Device::cpu());
  try {
    ex.run();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("%0 'x' [64] f32 cpu replicated is not bound"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ex.bind(c.x, Tensor::zeros({63}, DType::f32)), Error);
  EXPECT_THROW(ex.bind(c.y, Tensor::zeros({64}, DType::f32)), Error);  // produced by a node
}

TEST(Executor, KernelErrorOnAWorkerThreadReachesTheCaller) {
  Graph g;
  GraphBuilder b(g);
  int x = b.input("x", vt({4}));
  int y = b.add1(op(Op::slow_copy), {x}, {}, "copy");
  int z = b.add1(op(Op::fail), {y}, {}, "boom");
  int w = b.add1(op(Op::slow_copy), {z}, {}, "after");
  b.mark_output(w);
  ExecOptions opt;
  opt.mode = ExecMode::host_threads;
  Executor ex(g, plan_graph(g), Device::cpu(), opt);
  ex.bind(x, Tensor::zeros({4}, DType::f32));
  try {
    ex.run();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("node 'boom' failed on purpose"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ex.run(), Error);  // the executor stays usable and reports again
}

// ExecOptions::profile: one time per plan step, the comm copy's fixed 20 ms sleep visible in its step; asking without
// profiling is an error that names the option.
TEST(Executor, ProfileTimesEveryStep) {
  CopyThenScale c = copy_then_scale();
  for (ExecMode mode : {ExecMode::inline_cpu, ExecMode::host_threads}) {
    ExecOptions opt;
    opt.mode = mode;
    opt.profile = true;
    Executor ex(c.g, plan_graph(c.g), Device::cpu(), opt);
    ex.bind(c.x, make({64}, DType::f32, 1));
    ex.run();
    ex.synchronize();
    const std::vector<double> ms = ex.step_ms();
    ASSERT_EQ(ms.size(), ex.plan().steps.size());
    for (size_t s = 0; s < ms.size(); ++s) {
      const bool copy = c.g.node(ex.plan().steps[s].node).name == "gather";
      EXPECT_GE(ms[s], copy ? 20.0 : 0.0) << c.g.node(ex.plan().steps[s].node).name;
      if (!copy) {
        EXPECT_LT(ms[s], 20.0);
      }
    }
  }
  Executor plain(c.g, plan_graph(c.g), Device::cpu());
  try {
    (void)plain.step_ms();
    FAIL() << "step_ms() without profiling";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ExecOptions::profile"), std::string::npos) << e.what();
  }
}

TEST(Executor, ModeMustMatchDevice) {
  CopyThenScale c = copy_then_scale();
  ExecOptions opt;
  opt.mode = ExecMode::cuda;
  EXPECT_THROW(Executor(c.g, plan_graph(c.g), Device::cpu(), opt), Error);
}

}  // namespace
}  // namespace te
