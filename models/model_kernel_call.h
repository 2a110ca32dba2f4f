// How the model op kernels reach their state: the ParallelLinear a node owns a share of, the ModelBinding in
// ExecEnv::binding (the rank's context), and the operands the binding holds for values the planner left to it (models/model_ops.h). Shared by the
// forward kernels (model_ops.cpp) and the training ones (train_ops.cpp).
#pragma once
#include <any>

#include "engine/error.h"
#include "graph/op_table.h"
#include "models/model_ops.h"

namespace te::model_ops {

inline ModelBinding& binding(const KernelCall& c) {
  auto* b = std::any_cast<ModelBinding*>(&c.env.binding);
  TE_CHECK_HINT(b != nullptr && *b != nullptr, "node '" << c.node.name << "': the executor has no ModelBinding",
                "set ExecEnv::binding to the model graph's ModelBinding*");
  return **b;
}

// The layer the node belongs to: its state.
inline ParallelLinear& linear(const KernelCall& c) { return c.node.state_as<ParallelLinear>(); }

// Input i: its planned tensor, or the operand the binding holds for it.
inline GemmOperand operand(const KernelCall& c, size_t i) {
  if (c.inputs[i].defined()) return GemmOperand(c.inputs[i]);
  const auto& held = binding(c).held.at(static_cast<size_t>(c.node.inputs[i]));
  TE_CHECK(held.has_value(), "node '" << c.node.name << "': input " << i << " was not produced this step");
  return *held;
}

inline Tensor tensor_input(const KernelCall& c, size_t i) {
  const GemmOperand v = operand(c, i);
  TE_CHECK(!v.is_quantized(), "node '" << c.node.name << "': input " << i << " must be high precision");
  return v.tensor();
}

// Output i of the node: its value now held by the binding.
inline void hold_output(const KernelCall& c, size_t i, GemmOperand v) {
  binding(c).held.at(static_cast<size_t>(c.node.outputs.at(i))) = std::move(v);
}

inline void hold(const KernelCall& c, GemmOperand v) { hold_output(c, 0, std::move(v)); }

inline ActKind act_of(const Node& n) {
  const auto k = act_kind_from_name(n.attr<std::string>("act"));
  TE_CHECK(k.has_value(), "node '" << n.name << "': unknown activation '" << n.attr<std::string>("act") << "'");
  return *k;
}

}  // namespace te::model_ops
