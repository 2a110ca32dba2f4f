#include "graph/autograd.h"

#include "engine/error.h"
#include "graph/builtin_ops.h"

namespace te {

struct AutogradPass {
  GraphBuilder& b;
  BackwardOptions opt;
  std::vector<int> grad;     // by forward value id: its gradient value so far (-1: none)
  std::vector<char> needs;   // by forward value id: a gradient must reach it
  std::vector<char> saved;   // by forward value id: a backward rule read it

  Graph& g() { return b.graph(); }
  // GraphBuilder state only this pass may touch.
  void set_backward_mode(bool on, int forward_node) {
    b.building_backward_ = on;
    b.forward_node_ = forward_node;
  }
  BackwardBuilder builder_for(const Node& fwd) { return BackwardBuilder(b, fwd, *this); }
  void mark_saved(int v) { b.mutable_value(v).saved_for_backward = true; }

  void accumulate(int value, int gv, const Node& by) {
    // Shape, dtype and device must match. Sharding is not compared: the gradient of a value is sharded like the
    // value by definition, and a local GEMM's inference cannot know which operand was the split one. Nor is the
    // quantized format: a quantized value's gradient is carried in its original dtype, and a gradient may travel
    // quantized (a gathered output gradient) to the GEMMs that read it.
    const ValueType& want = g().value(value).type;
    const ValueType& got = g().value(gv).type;
    TE_CHECK_HINT(got.shape == want.shape && got.dtype == want.dtype && got.device == want.device,
                  "backward of " << g().node_label(by.id) << ": gradient " << g().value_label(gv) << " for "
                                 << g().value_label(value) << " has another type",
                  "a gradient has its value's shape, dtype and device");
    int& slot = grad[static_cast<size_t>(value)];
    slot = slot < 0 ? gv : b.add1(*opt.accumulate, {slot, gv}, {}, "accumulate");
  }
};

int BackwardBuilder::input(int i) {
  int v = fwd_.inputs.at(static_cast<size_t>(i));
  pass_.saved[static_cast<size_t>(v)] = 1;
  return v;
}

int BackwardBuilder::output(int i) {
  int v = fwd_.outputs.at(static_cast<size_t>(i));
  pass_.saved[static_cast<size_t>(v)] = 1;
  return v;
}

int BackwardBuilder::save(int value) {
  TE_CHECK(value >= 0 && value < static_cast<int>(pass_.saved.size()),
           "backward of " << b_.graph().node_label(fwd_.id) << ": save(" << value << ") of a value built after the "
                          << "forward");
  pass_.saved[static_cast<size_t>(value)] = 1;
  return value;
}

const ValueType& BackwardBuilder::input_type(int i) const {
  return b_.graph().value(fwd_.inputs.at(static_cast<size_t>(i))).type;
}
const ValueType& BackwardBuilder::output_type(int i) const {
  return b_.graph().value(fwd_.outputs.at(static_cast<size_t>(i))).type;
}

int BackwardBuilder::grad_output(int i) {
  int v = fwd_.outputs.at(static_cast<size_t>(i));
  int& slot = pass_.grad[static_cast<size_t>(v)];
  if (slot < 0) slot = b_.add1(*pass_.opt.fill, {}, fill_attrs(output_type(i), 0.0), "zero_grad");
  return slot;
}

bool BackwardBuilder::needs_grad(int i) const {
  return pass_.needs[static_cast<size_t>(fwd_.inputs.at(static_cast<size_t>(i)))] != 0;
}

void BackwardBuilder::set_grad_input(int i, int grad) {
  TE_CHECK(needs_grad(i), "backward of " << b_.graph().node_label(fwd_.id) << ": set_grad_input(" << i
                                         << ") for an input that needs no gradient");
  pass_.accumulate(fwd_.inputs.at(static_cast<size_t>(i)), grad, fwd_);
}

std::vector<int> BackwardBuilder::add(const OpDef& op, std::vector<int> inputs, Attrs attrs, std::string name) {
  return b_.add(op, std::move(inputs), std::move(attrs), std::move(name));
}

int BackwardBuilder::add1(const OpDef& op, std::vector<int> inputs, Attrs attrs, std::string name) {
  return b_.add1(op, std::move(inputs), std::move(attrs), std::move(name));
}

int BackwardResult::grad_of(int value) const {
  for (const auto& [v, gv] : grads)
    if (v == value) return gv;
  return -1;
}

Attrs fill_attrs(const ValueType& t, double value) {
  TE_CHECK(!t.is_quantized(), "fill_attrs: a fill produces high-precision values, not " << t.str());
  return Attrs{{"shape", t.shape},
               {"dtype", static_cast<int64_t>(t.dtype)},
               {"device", static_cast<int64_t>(t.device.kind) * 1024 + t.device.index},
               {"sharding", static_cast<int64_t>(t.sharding.kind) * 1024 + t.sharding.dim},
               {"value", value}};
}

ValueType fill_type(const Node& n) {
  ValueType t;
  t.shape = n.attr<std::vector<int64_t>>("shape");
  const int64_t dt = n.attr<int64_t>("dtype");
  TE_CHECK(dt >= 0 && dt < static_cast<int64_t>(kDTypes.size()), "fill: dtype code " << dt << " is not a DType");
  t.dtype = static_cast<DType>(dt);
  const int64_t dev = n.attr<int64_t>("device");
  t.device = {static_cast<DeviceKind>(dev / 1024), static_cast<int>(dev % 1024)};
  const int64_t sh = n.attr<int64_t>("sharding");
  t.sharding = {static_cast<Sharding::Kind>(sh / 1024), static_cast<int>(sh % 1024)};
  return t;
}

BackwardResult build_backward(Graph& graph, int loss, const BackwardOptions& options) {
  GraphBuilder b(graph);
  AutogradPass pass{b, options, {}, {}, {}};
  if (!pass.opt.accumulate) pass.opt.accumulate = &builtin_op(BuiltinOp::add);
  if (!pass.opt.fill) pass.opt.fill = &builtin_op(BuiltinOp::fill);
  if (!pass.opt.all_reduce) pass.opt.all_reduce = &builtin_op(BuiltinOp::all_reduce);
  const Value lv = graph.value(loss);  // a copy: the value vector grows below
  TE_CHECK_HINT(lv.role == ValueRole::intermediate, "build_backward: the loss " << graph.value_label(loss)
                                                                                << " is not computed by the graph",
                "pass the value produced by the loss node");
  const int num_nodes = graph.num_nodes();
  const int num_values = graph.num_values();
  pass.grad.assign(static_cast<size_t>(num_values), -1);
  pass.needs.assign(static_cast<size_t>(num_values), 0);
  pass.saved.assign(static_cast<size_t>(num_values), 0);
  for (const Value& v : graph.values()) pass.needs[static_cast<size_t>(v.id)] = v.requires_grad;
  // Build order is topological (a node only reads values that exist), so one forward sweep propagates needs and
  // one reverse sweep visits every node after all its consumers.
  for (const Node& n : graph.nodes()) {
    bool any = false;
    for (int v : n.inputs) any = any || pass.needs[static_cast<size_t>(v)];
    for (int v : n.outputs) pass.needs[static_cast<size_t>(v)] = any;
  }
  std::vector<char> on_path(static_cast<size_t>(num_nodes), 0);
  std::vector<char> reaches(static_cast<size_t>(num_values), 0);
  reaches[static_cast<size_t>(loss)] = 1;
  for (int id = num_nodes - 1; id >= 0; --id) {
    const Node& n = graph.node(id);
    for (int v : n.outputs) on_path[static_cast<size_t>(id)] |= reaches[static_cast<size_t>(v)];
    if (on_path[static_cast<size_t>(id)])
      for (int v : n.inputs) reaches[static_cast<size_t>(v)] = 1;
  }

  pass.set_backward_mode(true, -1);
  BackwardResult result;
  result.loss_grad = b.add1(*pass.opt.fill, {}, fill_attrs(lv.type, 1.0), options.grad_prefix + lv.name);
  pass.grad[static_cast<size_t>(loss)] = result.loss_grad;
  for (int id = num_nodes - 1; id >= 0; --id) {
    if (!on_path[static_cast<size_t>(id)]) continue;
    const Node fwd = graph.node(id);  // a copy: the node vector grows below
    bool has_grad = false, wants = false;
    for (int v : fwd.outputs) has_grad = has_grad || pass.grad[static_cast<size_t>(v)] >= 0;
    for (int v : fwd.inputs) wants = wants || pass.needs[static_cast<size_t>(v)];
    if (!has_grad || !wants) continue;
    TE_CHECK_HINT(fwd.op->backward != nullptr,
                  "build_backward: a gradient must pass through " << graph.node_label(id) << ", whose op has no backward",
                  "give the op a backward rule, or mark its inputs as not requiring gradients");
    pass.set_backward_mode(true, id);
    BackwardBuilder bb = pass.builder_for(fwd);
    fwd.op->backward(bb);
  }
  pass.set_backward_mode(true, -1);

  for (int v = 0; v < num_values; ++v) {
    const Value val = graph.value(v);  // a copy: adding the all-reduce below may grow the value vector
    if (val.role == ValueRole::intermediate || !val.requires_grad || pass.grad[static_cast<size_t>(v)] < 0) continue;
    int gv = pass.grad[static_cast<size_t>(v)];
    // Replicated parameters see a different slice of the tokens on every rank (sequence parallelism): their
    // gradient is the sum over the group.
    if (val.role == ValueRole::param && val.type.sharding.is_replicated() && options.group_size > 1)
      gv = b.add1(*pass.opt.all_reduce, {gv}, {}, "all_reduce " + options.grad_prefix + val.name);
    b.set_value_name(gv, options.grad_prefix + val.name);
    b.mark_output(gv);
    result.grads.emplace_back(v, gv);
  }
  pass.set_backward_mode(false, -1);
  for (int v = 0; v < num_values; ++v)
    if (pass.saved[static_cast<size_t>(v)]) pass.mark_saved(v);
  return result;
}

}  // namespace te
