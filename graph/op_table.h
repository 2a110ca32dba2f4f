// An op kind is one OpDef: its name, arity, stream class, and three small functions — shape/dtype inference, the
// backward rule, and the kernel binding. Tables of OpDefs are constexpr arrays (graph/builtin_ops.h holds the
// graph's own; models/ and tests define theirs the same way), so binding an op kind to its kernels is one function
// in one table row, and names, arity checks and dispatch cannot drift apart. Nodes point at their OpDef.
#pragma once
#include <any>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/stream.h"
#include "engine/tensor.h"
#include "graph/graph.h"

namespace te {

class BackwardBuilder;  // graph/autograd.h

// Which stream a node runs on: compute (kernels), comm (collectives, so a gather overlaps independent compute), or
// side: memory-bound work off the critical path (an optimizer step) on a stream of lower priority than compute, so
// its blocks take the SMs the compute stream's kernels leave idle instead of delaying them.
enum class StreamClass : uint8_t { compute = 0, comm = 1, side = 2 };
inline constexpr int kNumStreamClasses = 3;
constexpr std::string_view stream_class_name(StreamClass s) {
  return s == StreamClass::compute ? "compute" : s == StreamClass::comm ? "comm" : "side";
}

// What the executor hands to kernels besides tensors: group facts and the collectives, set by the caller
// (models/ wires its comm/ Communicator here; tests use fakes).
struct ExecEnv {
  int rank = 0;
  int world_size = 1;
  // In-place sum over the group of `t` on `stream`; needed by the builtin all_reduce op when world_size > 1.
  std::function<void(Tensor& t, const Stream& stream)> all_reduce_sum;
  // The binding's own state (e.g. models/ puts its layers and the values it holds here); kernels std::any_cast it
  // to the type their table expects, so a mismatch is an error, not a bad pointer.
  std::any binding;
  // Called on the node's lane right after its kernel (CPU modes: after it ran; cuda: after it was enqueued), so a
  // binding can drop what it holds once that node was the last reader (optional).
  std::function<void(int node, const Stream& stream)> after_node;
};

// One kernel invocation. Inputs/outputs are views of caller-bound tensors or of the planned arena, shaped and typed
// as the node's values (a quantized value is a contiguous u8 buffer of its planned size; its binding lays out the
// QuantizedTensor inside). Outputs are not zeroed: the kernel writes every element. Enqueue on `stream`.
struct KernelCall {
  const Node& node;
  const std::vector<Tensor>& inputs;
  std::vector<Tensor>& outputs;
  const Stream& stream;
  const ExecEnv& env;
};

// Output types from input types (and the node's attributes). Throw te::Error naming the node on bad input.
using InferFn = std::vector<ValueType> (*)(const Node& node, const std::vector<ValueType>& inputs);
// Appends the backward nodes of one forward node (see BackwardBuilder).
using BackwardFn = void (*)(BackwardBuilder& bb);
using KernelFn = void (*)(KernelCall& call);

struct OpDef {
  std::string_view name;
  int num_inputs;      // -1: any number
  int num_outputs;
  StreamClass stream;
  bool is_gather;      // the planner asks PlanOptions::gather_hook for its path (quantized vs fallback)
  InferFn infer;
  BackwardFn backward;  // nullptr: not differentiable (build_backward names the node if a gradient must pass)
  KernelFn run;         // nullptr: no kernel bound (the executor names the op at construction)
};

// The entry of `table` called `name`, or nullptr.
constexpr const OpDef* find_op(std::span<const OpDef> table, std::string_view name) {
  for (const OpDef& op : table)
    if (op.name == name) return &op;
  return nullptr;
}

}  // namespace te
