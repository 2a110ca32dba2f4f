// Reverse-mode autograd over the graph IR. Each op kind's OpDef::backward appends the backward nodes of one forward
// node through a BackwardBuilder. The forward values a rule reads (input(i), output(i)) are marked
// saved_for_backward — the planner keeps exactly those alive until their backward use, nothing else. Backward nodes
// are appended to the same graph, so one plan covers forward + backward and the executor overlaps them.
#pragma once
#include <utility>
#include <vector>

#include "graph/builder.h"
#include "graph/graph.h"
#include "graph/op_table.h"

namespace te {

struct AutogradPass;  // autograd.cpp: the state of one build_backward call

class BackwardBuilder {
 public:
  const Node& node() const { return fwd_; }  // the forward node
  const Graph& graph() const { return b_.graph(); }
  // Forward values, marked saved for backward.
  int input(int i);
  int output(int i);
  // Another forward value the rule reads (e.g. the high-precision source of a quantized input), marked saved.
  int save(int value);
  // Types only (reading a type saves nothing).
  const ValueType& input_type(int i) const;
  const ValueType& output_type(int i) const;
  // Gradient of forward output i (a zero fill when that output got no gradient).
  int grad_output(int i);
  // Whether forward input i needs a gradient; rules skip work for inputs that do not.
  bool needs_grad(int i) const;
  // Sets (or accumulates into) the gradient of forward input i. `grad` must have the input's shape, dtype, device.
  void set_grad_input(int i, int grad);
  // Appends a backward node.
  std::vector<int> add(const OpDef& op, std::vector<int> inputs, Attrs attrs = {}, std::string name = {});
  int add1(const OpDef& op, std::vector<int> inputs, Attrs attrs = {}, std::string name = {});

 private:
  friend struct AutogradPass;
  BackwardBuilder(GraphBuilder& b, const Node& fwd, AutogradPass& pass) : b_(b), fwd_(fwd), pass_(pass) {}
  GraphBuilder& b_;
  const Node fwd_;  // a copy: appending nodes may move the graph's node storage
  AutogradPass& pass_;
};

struct BackwardOptions {
  // Op kinds autograd itself inserts. Defaults: the builtins (graph/builtin_ops.h).
  const OpDef* accumulate = nullptr;  // (a, b) -> a + b, for values read by several nodes
  const OpDef* fill = nullptr;        // () -> constant (attrs from fill_attrs()), seeds and missing gradients
  const OpDef* all_reduce = nullptr;  // (g) -> sum of g over the group, on the comm stream
  int group_size = 1;                 // > 1: gradients of replicated params are all-reduced
  std::string grad_prefix = "grad/";  // gradient value names: prefix + forward name
};

struct BackwardResult {
  int loss_grad = -1;                          // the seed (ones shaped like the loss)
  std::vector<std::pair<int, int>> grads;      // (input or param value id, its gradient value id), build order
  int grad_of(int value) const;                // -1 when `value` got no gradient
};

// Appends the backward of every node the loss depends on and marks each gradient as a graph output. Throws
// te::Error naming the node whose op has no backward rule when a gradient must pass through it.
BackwardResult build_backward(Graph& graph, int loss, const BackwardOptions& options = {});

// Attributes of a fill node producing `value` everywhere, typed `type`.
Attrs fill_attrs(const ValueType& type, double value);
// The type a fill node with these attributes produces.
ValueType fill_type(const Node& fill_node);

}  // namespace te
