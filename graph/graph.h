// The graph IR: Values (typed, sharded tensors) produced and consumed by Nodes (an op kind + typed attributes).
// Shapes are static after build, so the planner (graph/planner.h) sizes every buffer and decides every gather
// path before the first step. Graphs are built and extended through GraphBuilder (graph/builder.h); this header
// only describes them. Ids are dense indices: value(i), node(i).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/tensor.h"
#include "ops/quant/format.h"

namespace te {

struct OpDef;  // graph/op_table.h

// How a value is laid out over the tensor-parallel group.
struct Sharding {
  // partial: every rank holds a full-shape addend of the value (a row-parallel GEMM's output before its reduction).
  enum class Kind : uint8_t { replicated, split, partial };
  Kind kind = Kind::replicated;
  int dim = 0;  // split only: the dimension cut into `group size` equal pieces
  static Sharding replicated() { return {Kind::replicated, 0}; }
  static Sharding split(int dim) { return {Kind::split, dim}; }
  static Sharding partial() { return {Kind::partial, 0}; }
  bool is_replicated() const { return kind == Kind::replicated; }
  std::string str() const;  // "replicated" | "split(0)" | "partial"
  friend bool operator==(const Sharding&, const Sharding&) = default;
};

// The static type of a value. `shape` is the local (per-rank) shape.
struct ValueType {
  Shape shape;
  DType dtype = DType::f32;          // element dtype; for quantized values the original (high-precision) dtype
  std::optional<QuantFormat> quant;  // set: the value is a QuantizedTensor of this format
  Usage usages = Usage::none;        // quantized only: which copies (row-wise, column-wise) it carries
  Device device = Device::cpu();
  Sharding sharding;

  bool is_quantized() const { return quant.has_value(); }
  std::string str() const;  // "[8, 16] f32 cpu split(0)" / "[8, 16] mxfp8(rowwise) of bf16 ..."
  friend bool operator==(const ValueType&, const ValueType&) = default;
};

// Typed node attributes: a small ordered map name → int | float | bool | string | int list.
using Attr = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, Attr>> items);
  Attrs& set(std::string name, Attr value);  // replaces an existing entry
  bool has(std::string_view name) const { return find(name) != nullptr; }
  const Attr* find(std::string_view name) const;
  const std::vector<std::pair<std::string, Attr>>& items() const { return items_; }
  std::string str() const;  // "alpha=0.5, ta=true"

 private:
  std::vector<std::pair<std::string, Attr>> items_;
};

enum class ValueRole : uint8_t {
  input,         // bound by the caller each step (activations, targets)
  param,         // bound by the caller (weights); gradients are built for those that require them
  intermediate,  // produced by a node; lives in the planned arena
};

struct Value {
  int id = -1;
  std::string name;  // for messages and --explain; may be empty
  ValueType type;
  ValueRole role = ValueRole::intermediate;
  int producer = -1;             // node id (-1 for inputs and params)
  std::vector<int> consumers;    // node ids, in build order (a node reading it twice appears twice)
  bool requires_grad = false;    // inputs/params: autograd builds a gradient for it
  bool saved_for_backward = false;  // a backward rule reads it, so it lives until its backward use
  bool is_output = false;        // kept alive to the end of the step and readable after it
};

// What a node's kernels act on besides its values and attributes: e.g. one model layer's parameters, quantizers and
// what its forward saves for the backward (models/parallel_linear.h). Every node of that layer owns a share of it,
// forward and backward alike, so a node carries everything its kernel needs.
struct NodeState {
  virtual ~NodeState() = default;
};

struct Node {
  int id = -1;
  const OpDef* op = nullptr;
  std::string name;
  Attrs attrs;
  std::shared_ptr<NodeState> state;  // null for ops that need none
  std::vector<int> inputs, outputs;  // value ids
  // Nodes that must run before this one although no value connects them: e.g. the last reader of memory this node
  // rewrites in place (GraphBuilder::order_after).
  std::vector<int> after;
  bool is_backward = false;          // appended by build_backward
  int forward_node = -1;             // backward nodes: the forward node whose rule appended it

  // Typed attribute access; throws te::Error naming this node, the attribute and the expected type.
  template <class T>
  const T& attr(std::string_view attr_name) const;
  template <class T>
  T attr_or(std::string_view attr_name, T fallback) const;
  // The node's state as T; throws te::Error naming this node when it has none or another kind.
  template <class T>
  T& state_as() const;
};

class Graph {
 public:
  int num_values() const { return static_cast<int>(values_.size()); }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  const Value& value(int id) const;
  const Node& node(int id) const;
  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<int> outputs() const;  // values marked as outputs, in id order
  // "%3 'h' [8, 16] f32 cpu replicated" and "node 2 'fc1' (matmul)": how errors and --explain name things.
  std::string value_label(int id) const;
  std::string node_label(int id) const;

 private:
  friend class GraphBuilder;
  std::vector<Value> values_;
  std::vector<Node> nodes_;
};

namespace detail {
[[noreturn]] void throw_attr_error(const Node& node, std::string_view attr_name, const char* expected, bool missing);
[[noreturn]] void throw_state_error(const Node& node);
template <class T>
constexpr const char* attr_type_name() {
  if constexpr (std::is_same_v<T, int64_t>) return "int";
  else if constexpr (std::is_same_v<T, double>) return "float";
  else if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_same_v<T, std::string>) return "string";
  else return "int list";
}
}  // namespace detail

template <class T>
const T& Node::attr(std::string_view attr_name) const {
  const Attr* a = attrs.find(attr_name);
  if (a == nullptr) detail::throw_attr_error(*this, attr_name, detail::attr_type_name<T>(), true);
  const T* v = std::get_if<T>(a);
  if (v == nullptr) detail::throw_attr_error(*this, attr_name, detail::attr_type_name<T>(), false);
  return *v;
}

template <class T>
T Node::attr_or(std::string_view attr_name, T fallback) const {
  return attrs.has(attr_name) ? attr<T>(attr_name) : fallback;
}

template <class T>
T& Node::state_as() const {
  T* s = dynamic_cast<T*>(state.get());
  if (s == nullptr) detail::throw_state_error(*this);
  return *s;
}

}  // namespace te
