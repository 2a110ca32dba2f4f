// GraphBuilder appends values and nodes to a Graph and validates as it goes: input ids exist, arity matches the op
// table, inputs share one device, and the op's inference rule accepts the input types. Every error is a te::Error
// naming the node (id, name, op) and the offending value(s) with their types.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/op_table.h"

namespace te {

struct AutogradPass;

class GraphBuilder {
 public:
  explicit GraphBuilder(Graph& graph) : g_(graph) {}

  // Values the caller binds every step (Executor::bind). Parameters require gradients by default.
  int input(std::string name, ValueType type, bool requires_grad = false);
  int param(std::string name, ValueType type, bool requires_grad = true);

  // Appends `op` reading `inputs`; output types come from op.infer. Returns the output value ids.
  // Outputs are named after the node ("N" for one output; "N.<output_names[i]>", else "N.i", for several).
  std::vector<int> add(const OpDef& op, std::vector<int> inputs, Attrs attrs = {}, std::string name = {},
                       const std::vector<std::string>& output_names = {});
  // add() for single-output ops: the output id.
  int add1(const OpDef& op, std::vector<int> inputs, Attrs attrs = {}, std::string name = {});

  // Nodes appended from now on own a share of `state` (null: none), e.g. the phases of one layer its parameters;
  // backward nodes always share their forward node's. Returns the state set before.
  std::shared_ptr<NodeState> set_node_state(std::shared_ptr<NodeState> state);

  // `node` runs after `earlier` although it reads none of its outputs (a control edge: the planner orders, and
  // across streams synchronises, the two as if a value connected them, and no buffer lives longer for it).
  void order_after(int node, int earlier);

  // Keeps `value` alive to the end of the step so the caller can read it (Executor::tensor).
  void mark_output(int value);
  void set_value_name(int value, std::string name);

  Graph& graph() { return g_; }

 private:
  friend class BackwardBuilder;
  friend struct AutogradPass;
  int new_value(std::string name, ValueType type, ValueRole role);
  Value& mutable_value(int id) { return g_.values_.at(static_cast<size_t>(id)); }
  Graph& g_;
  bool building_backward_ = false;
  int forward_node_ = -1;
  std::shared_ptr<NodeState> state_;  // forward nodes' (set_node_state)
};

}  // namespace te
