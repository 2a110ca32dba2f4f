#include "graph/builder.h"

#include <algorithm>

#include "engine/error.h"

namespace te {

int GraphBuilder::new_value(std::string name, ValueType type, ValueRole role) {
  Value v;
  v.id = g_.num_values();
  v.name = std::move(name);
  v.type = std::move(type);
  v.role = role;
  g_.values_.push_back(std::move(v));
  return g_.values_.back().id;
}

int GraphBuilder::input(std::string name, ValueType type, bool requires_grad) {
  int id = new_value(std::move(name), std::move(type), ValueRole::input);
  g_.values_[static_cast<size_t>(id)].requires_grad = requires_grad;
  return id;
}

int GraphBuilder::param(std::string name, ValueType type, bool requires_grad) {
  int id = new_value(std::move(name), std::move(type), ValueRole::param);
  g_.values_[static_cast<size_t>(id)].requires_grad = requires_grad;
  return id;
}

std::shared_ptr<NodeState> GraphBuilder::set_node_state(std::shared_ptr<NodeState> state) {
  std::swap(state_, state);
  return state;
}

std::vector<int> GraphBuilder::add(const OpDef& op, std::vector<int> inputs, Attrs attrs, std::string name,
                                   const std::vector<std::string>& output_names) {
  Node n;
  n.id = g_.num_nodes();
  n.op = &op;
  n.name = std::move(name);
  n.attrs = std::move(attrs);
  n.is_backward = building_backward_;
  n.forward_node = forward_node_;
  n.state = building_backward_ ? (forward_node_ >= 0 ? g_.node(forward_node_).state : nullptr) : state_;
  const std::string label = "node " + std::to_string(n.id) + (n.name.empty() ? "" : " '" + n.name + "'") + " (" +
                            std::string(op.name) + ")";
  TE_CHECK_HINT(op.num_inputs < 0 || static_cast<int>(inputs.size()) == op.num_inputs,
                label << ": takes " << op.num_inputs << " inputs, got " << inputs.size(),
                "check the inputs passed to GraphBuilder::add");
  TE_CHECK(op.infer != nullptr, label << ": op has no inference rule in its OpDef");
  std::vector<ValueType> in_types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TE_CHECK_HINT(inputs[i] >= 0 && inputs[i] < g_.num_values(),
                  label << ": input " << i << " is value id " << inputs[i] << ", which is not in this graph",
                  "pass ids returned by GraphBuilder");
    in_types.push_back(g_.value(inputs[i]).type);
    TE_CHECK_HINT(in_types[i].device == in_types[0].device,
                  label << ": input " << i << " " << g_.value_label(inputs[i]) << " is on another device than input 0 "
                        << g_.value_label(inputs[0]),
                  "move the value to one device before this node");
  }
  std::vector<ValueType> out_types;
  try {
    out_types = op.infer(n, in_types);
  } catch (const Error& e) {
    std::string ins;
    for (size_t i = 0; i < inputs.size(); ++i) ins += "\n  input " + std::to_string(i) + ": " + g_.value_label(inputs[i]);
    TE_THROW(label << ": " << e.message() << ins, e.hint());
  }
  TE_CHECK(static_cast<int>(out_types.size()) == op.num_outputs,
           label << ": inference returned " << out_types.size() << " outputs, the op table says " << op.num_outputs);
  n.inputs = std::move(inputs);
  for (size_t i = 0; i < out_types.size(); ++i) {
    const std::string suffix = i < output_names.size() ? output_names[i] : std::to_string(i);
    std::string vname = n.name.empty() || out_types.size() == 1 ? n.name : n.name + "." + suffix;
    int vid = new_value(std::move(vname), std::move(out_types[i]), ValueRole::intermediate);
    g_.values_[static_cast<size_t>(vid)].producer = n.id;
    n.outputs.push_back(vid);
  }
  for (int in : n.inputs) g_.values_[static_cast<size_t>(in)].consumers.push_back(n.id);
  g_.nodes_.push_back(std::move(n));
  return g_.nodes_.back().outputs;
}

int GraphBuilder::add1(const OpDef& op, std::vector<int> inputs, Attrs attrs, std::string name) {
  TE_CHECK(op.num_outputs == 1, "GraphBuilder::add1 used with op '" << op.name << "', which has " << op.num_outputs
                                                                    << " outputs; use add()");
  return add(op, std::move(inputs), std::move(attrs), std::move(name))[0];
}

void GraphBuilder::order_after(int node, int earlier) {
  TE_CHECK(node >= 0 && node < g_.num_nodes() && earlier >= 0 && earlier < g_.num_nodes(),
           "order_after: node ids " << node << ", " << earlier << " are not both in this graph");
  TE_CHECK(node != earlier, "order_after: " << g_.node_label(node) << " cannot run after itself");
  std::vector<int>& after = g_.nodes_[static_cast<size_t>(node)].after;
  if (std::find(after.begin(), after.end(), earlier) == after.end()) after.push_back(earlier);
}

void GraphBuilder::mark_output(int value) {
  TE_CHECK(value >= 0 && value < g_.num_values(), "mark_output: value id " << value << " is not in this graph");
  g_.values_[static_cast<size_t>(value)].is_output = true;
}

void GraphBuilder::set_value_name(int value, std::string name) {
  TE_CHECK(value >= 0 && value < g_.num_values(), "set_value_name: value id " << value << " is not in this graph");
  g_.values_[static_cast<size_t>(value)].name = std::move(name);
}

}  // namespace te
