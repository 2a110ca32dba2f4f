// IR and builder: validation names the node and the offending value; bookkeeping of producers and consumers.
#include <gtest/gtest.h>

#include "graph/builder.h"
#include "test_ops.h"

namespace te {
namespace {
using namespace test_ops;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GraphIR, ProducersAndConsumersAreRecorded) {
  Graph g;
  GraphBuilder b(g);
  int x = b.input("x", vt({2, 3}));
  int y = b.add1(op(Op::scale), {x}, {{"alpha", 2.0}}, "s");
  int z = b.add1(op(Op::add), {x, y}, {}, "a");
  EXPECT_EQ(g.value(y).producer, 0);
  EXPECT_EQ(g.value(z).producer, 1);
  EXPECT_EQ(g.value(x).consumers, (std::vector<int>{0, 1}));
  EXPECT_EQ(g.value(y).consumers, (std::vector<int>{1}));
  EXPECT_EQ(g.value(y).name, "s");
  EXPECT_EQ(g.value(z).type, vt({2, 3}));
  EXPECT_EQ(g.node_label(1), "node 1 'a' (t_add)");
}

TEST(GraphIR, ShapeMismatchNamesNodeAndValues) {
  Graph g;
  GraphBuilder b(g);
  int a = b.input("act", vt({2, 3}));
  int w = b.param("weight", vt({4, 5}));
  std::string msg = error_of([&] { b.add1(op(Op::matmul), {a, w}, {}, "fc1"); });
  EXPECT_NE(msg.find("'fc1' (t_matmul)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("inner dimensions differ: 3 vs 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("%0 'act' [2, 3] f32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("%1 'weight' [4, 5] f32"), std::string::npos) << msg;
  EXPECT_EQ(g.num_nodes(), 0) << "a rejected node must not be added";
}

TEST(GraphIR, ArityAndUnknownIdsAreRejected) {
  Graph g;
  GraphBuilder b(g);
  int x = b.input("x", vt({2}));
  EXPECT_NE(error_of([&] { b.add1(op(Op::add), {x}, {}, "lonely"); }).find("'lonely' (t_add): takes 2 inputs, got 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { b.add1(op(Op::add), {x, 7}, {}, "ghost"); }).find("value id 7, which is not in this graph"),
            std::string::npos);
}

TEST(GraphIR, DeviceMismatchNamesTheValue) {
  Graph g;
  GraphBuilder b(g);
  int x = b.input("x", vt({2}));
  ValueType t = vt({2});
  t.device = Device::cuda(0);
  int y = b.input("y_gpu", t);
  std::string msg = error_of([&] { b.add1(op(Op::add), {x, y}, {}, "mixed"); });
  EXPECT_NE(msg.find("'mixed'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'y_gpu'"), std::string::npos) << msg;
}

TEST(GraphIR, TypedAttributesNameNodeAndAttribute) {
  Graph g;
  GraphBuilder b(g);
  int x = b.input("x", vt({2}));
  b.add1(op(Op::scale), {x}, {{"alpha", int64_t{3}}}, "wrong_type");
  const Node& n = g.node(0);
  std::string msg = error_of([&] { (void)n.attr<double>("alpha"); });
  EXPECT_NE(msg.find("'wrong_type' (t_scale): attribute 'alpha' is not a float"), std::string::npos) << msg;
  msg = error_of([&] { (void)n.attr<std::string>("mode"); });
  EXPECT_NE(msg.find("missing attribute 'mode' (string)"), std::string::npos) << msg;
  EXPECT_EQ(n.attr<int64_t>("alpha"), 3);
  EXPECT_EQ(n.attr_or<bool>("flag", true), true);
  EXPECT_EQ(n.attrs.str(), "alpha=3");
}

TEST(GraphIR, ValueTypeStringShowsShardingAndQuantization) {
  ValueType t = vt({8, 16}, DType::bf16, Sharding::split(0));
  EXPECT_EQ(t.str(), "[8, 16] bf16 cpu split(0)");
  t.quant = QuantFormat::mxfp8;
  t.usages = Usage::both;
  EXPECT_EQ(t.str(), "[8, 16] mxfp8(both) of bf16 cpu split(0)");
}

TEST(GraphIR, OpTableLookupByName) {
  EXPECT_EQ(find_op(kTestOps, "t_matmul"), &op(Op::matmul));
  EXPECT_EQ(find_op(kTestOps, "nope"), nullptr);
  for (size_t i = 0; i < kTestOps.size(); ++i) EXPECT_EQ(find_op(kTestOps, kTestOps[i].name), &kTestOps[i]);
}

}  // namespace
}  // namespace te
