// The graph's own op kinds (fill, add, all_reduce) on the CPU, and the CUDA executor — streams, events, CUDA graph
// capture and replay — against the CPU inline executor on a graph of builtin ops (GPU only).
#include <gtest/gtest.h>

#include "common/gpu.h"
#include "graph/autograd.h"
#include "graph/builtin_ops.h"
#include "graph/executor.h"
#include "test_ops.h"

namespace te {
namespace {
using test_ops::vt;

// u = all_reduce((a + b) + 0.5) + a, with the all-reduce on the comm stream.
struct BuiltinGraph {
  Graph g;
  int a, b, u;
};
BuiltinGraph builtin_graph(Device dev, DType dt) {
  BuiltinGraph c;
  GraphBuilder bld(c.g);
  ValueType t = vt({3, 257}, dt);
  t.device = dev;
  c.a = bld.input("a", t);
  c.b = bld.input("b", t);
  int s = bld.add1(builtin_op(BuiltinOp::add), {c.a, c.b}, {}, "sum");
  int h = bld.add1(builtin_op(BuiltinOp::fill), {}, fill_attrs(t, 0.5), "half");
  int s2 = bld.add1(builtin_op(BuiltinOp::add), {s, h}, {}, "shift");
  int r = bld.add1(builtin_op(BuiltinOp::all_reduce), {s2}, {}, "reduce");
  c.u = bld.add1(builtin_op(BuiltinOp::add), {r, c.a}, {}, "out");
  bld.mark_output(c.u);
  return c;
}

TEST(BuiltinOps, AddFillAllReduceOnCpu) {
  for (DType dt : {DType::f32, DType::bf16}) {
    BuiltinGraph c = builtin_graph(Device::cpu(), dt);
    ExecOptions opt;
    opt.env.world_size = 3;
    opt.env.all_reduce_sum = [](Tensor& t, const Stream&) {  // three identical ranks
      std::vector<float> v = t.to_f32_vector();
      for (float& x : v) x *= 3.f;
      t.copy_from(Tensor::from_f32(v, t.shape(), t.dtype()));
    };
    Executor ex(c.g, plan_graph(c.g), Device::cpu(), opt);
    Tensor a = Tensor::empty({3, 257}, dt), b = Tensor::empty({3, 257}, dt);
    a.fill_uniform(1, -1.f, 1.f);
    b.fill_uniform(2, -1.f, 1.f);
    ex.bind(c.a, a);
    ex.bind(c.b, b);
    ex.run();
    std::vector<float> av = a.to_f32_vector(), bv = b.to_f32_vector(), uv = ex.tensor(c.u).to_f32_vector();
    auto round = [&](float x) { return Tensor::from_f32({x}, {1}, dt).to_f32_vector()[0]; };
    for (size_t i = 0; i < av.size(); ++i) {
      const float s2 = round(round(av[i] + bv[i]) + 0.5f);
      ASSERT_EQ(uv[i], round(round(3.f * s2) + av[i])) << dtype_name(dt) << " element " << i;
    }
  }
}

TEST(BuiltinOps, AllReduceWithoutCollectiveIsAnError) {
  BuiltinGraph c = builtin_graph(Device::cpu(), DType::f32);
  ExecOptions opt;
  opt.env.world_size = 2;
  Executor ex(c.g, plan_graph(c.g), Device::cpu(), opt);
  ex.bind(c.a, Tensor::zeros({3, 257}, DType::f32));
  ex.bind(c.b, Tensor::zeros({3, 257}, DType::f32));
  EXPECT_THROW(ex.run(), Error);
}

TEST(BuiltinOps, AddRejectsMismatchedInputs) {
  Graph g;
  GraphBuilder b(g);
  int x = b.input("x", vt({4}));
  int y = b.input("y", vt({4}, DType::bf16));
  EXPECT_THROW(b.add1(builtin_op(BuiltinOp::add), {x, y}, {}, "mixed"), Error);
}

class ExecutorGpu : public ::testing::TestWithParam<bool> {};

TEST_P(ExecutorGpu, CudaStreamsAndGraphReplayEqualCpu) {
  TE_REQUIRE_GPU();
  const bool capture = GetParam();
  const Device gpu = Device::cuda(0);
  BuiltinGraph cc = builtin_graph(Device::cpu(), DType::f32);
  BuiltinGraph gc = builtin_graph(gpu, DType::f32);
  Executor cpu(cc.g, plan_graph(cc.g), Device::cpu());
  ExecOptions opt;
  opt.mode = ExecMode::cuda;
  opt.cuda_graph = capture;
  Plan plan = plan_graph(gc.g);
  ASSERT_FALSE(plan.events.empty());
  Executor ex(gc.g, plan, gpu, opt);
  Tensor da = Tensor::empty({3, 257}, DType::f32, gpu), db = Tensor::empty({3, 257}, DType::f32, gpu);
  ex.bind(gc.a, da);
  ex.bind(gc.b, db);
  for (int step = 0; step < 3; ++step) {
    Tensor a = Tensor::empty({3, 257}, DType::f32), b = Tensor::empty({3, 257}, DType::f32);
    a.fill_uniform(10 + static_cast<uint64_t>(step), -1.f, 1.f);
    b.fill_uniform(20 + static_cast<uint64_t>(step), -1.f, 1.f);
    // New values in the same device buffers: the captured graph replays over them.
    da.copy_from(a, ex.compute_stream());
    db.copy_from(b, ex.compute_stream());
    ex.run();
    ex.synchronize();
    EXPECT_EQ(ex.graph_captured(), capture);
    cpu.bind(cc.a, a);
    cpu.bind(cc.b, b);
    cpu.run();
    EXPECT_TRUE(test_ops::bit_equal(ex.tensor(gc.u).to(Device::cpu()), cpu.tensor(cc.u))) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Capture, ExecutorGpu, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "graph_replay" : "eager"); });

}  // namespace
}  // namespace te
