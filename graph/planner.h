// The planner runs once per graph, before the first step. It fixes the order of nodes, re-checks every type through
// the op inference rules, asks the model layer how each gather travels (quantized vs fallback, per usage, with a
// reason), assigns each node to the compute or the comm stream, lists the cross-stream events, and places every
// intermediate value at an offset of one arena so that buffers whose lifetimes are ordered share memory.
//
// Buffer reuse is sound on two streams: value B may take A's bytes only when every use of A (its producer and all
// consumers) happens-before B's producer through data edges and per-stream program order — exactly the orders the
// executor enforces with stream order and planned events. No extra events are needed for reuse.
//
// In place: a node whose kernel may write output 0 over input i (attribute in_place = i, an element-wise pass that
// reads each element before writing it) gets output 0 at exactly input i's offset when input i is an arena value of
// the same size, not a step output, and every other use of it happens-before the node. Partial overlap is never
// planned for such a pair: the output either takes the input's bytes or bytes of its own.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/gather_plan.h"
#include "graph/graph.h"
#include "graph/op_table.h"

namespace te {

// Called once per gather node (OpDef::is_gather). The model layer sets it; without one, a gather of a quantized
// value is planned as a fallback (the safe path) and a gather of a high-precision value as high_precision.
using GatherHook = std::function<GatherPlan(const Graph& graph, const Node& gather)>;

struct PlanOptions {
  GatherHook gather_hook;
  int64_t alignment = 256;     // every buffer offset and size is a multiple of this (bytes)
  bool reuse_buffers = true;   // false: every value gets its own bytes (naive layout, for debugging)
  bool single_stream = false;  // true: every node on the compute stream (no events)
  // Bytes of a quantized value's buffer (data + scales of its usages + amax). Without it a conservative estimate
  // from the format table is used (see quantized_value_bytes).
  std::function<int64_t(const ValueType&)> quantized_bytes;
  // Values whose bytes the op binding owns (true): no arena slot; the executor hands the kernel an undefined tensor
  // and the binding keeps the real one (e.g. models/ keeps gathered QuantizedTensors, which gather_along_first_dim
  // allocates, beside the graph).
  std::function<bool(const Graph&, const Value&)> held_by_binding;
};

struct PlannedBuffer {
  int value = -1;
  int64_t offset = -1;  // into the arena; -1: not in the arena (caller-bound input or param, or held by the binding)
  int64_t bytes = 0;    // aligned size
  int first_step = -1, last_step = -1;  // producer step and last use step (num_steps for outputs)
  bool held_by_binding = false;         // PlanOptions::held_by_binding: bytes 0, no offset
};

// `event` is recorded on the producer's stream after `producer` and waited on by the consumer's stream before
// `consumer` (the first consumer of `value` on that stream; later ones there are ordered by the stream).
struct PlannedEvent {
  int value = -1;                    // -1: a control edge (Node::after), no value
  int producer = -1, consumer = -1;  // node ids
  StreamClass record_on = StreamClass::compute, wait_on = StreamClass::compute;
};

struct PlanStep {
  int node = -1;
  StreamClass stream = StreamClass::compute;
};

struct Plan {
  std::vector<PlanStep> steps;            // topological order: the order nodes are enqueued
  std::vector<PlannedBuffer> buffers;     // indexed by value id
  std::vector<PlannedEvent> events;       // cross-stream dependencies (removing one breaks ordering)
  std::vector<std::pair<int, GatherPlan>> gathers;  // (gather node id, its plan)
  int64_t arena_bytes = 0;                // planned peak: the one allocation
  int64_t naive_bytes = 0;                // sum of all intermediate buffers without reuse
  int64_t alignment = 256;
  const GatherPlan* gather_plan(int node) const;  // nullptr when `node` is not a gather
};

Plan plan_graph(const Graph& graph, const PlanOptions& options = {});

// A conservative byte size for a quantized value: per usage, packed data plus one scale per block (per tensor: one),
// plus 16 bytes of amax/global scale, rounded up to 16-byte pieces.
int64_t quantized_value_bytes(const ValueType& type);

// The plan in words (what `teengine run --explain` prints): nodes in order with stream, waits/records, buffers
// (offset, size), gather decisions with reasons, saved-for-backward values, arena peak vs naive sum.
std::string explain(const Graph& graph, const Plan& plan);

}  // namespace te
