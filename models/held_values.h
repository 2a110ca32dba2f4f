// What the binding holds during a training step (models/model_ops.h: quantized activations and gradients, collective
// outputs, the loss and its gradient — allocated by the kernels, outside the planned arena): when each value goes
// back to the allocator, and the most bytes they take at once, which --explain adds to the plan.
//
// A value goes right after its last reader when every use of it runs on one stream (always on the CPU, where the
// training graph runs every node in order on one thread): the allocator hands a freed block out again only in that
// stream's order. A value a collective made or reads waits for
// the end of the step. Parameter gradients, the loss gate's and the in-place all-reduce's outputs alias memory
// counted elsewhere (0 bytes). A fused activation's kept copy (the column-wise copy, or the activation itself) is
// counted from the activation to the wgrad that reads it, through the wgrad_input node that takes it. A quantized
// value counts with the GEMM images its quantizing pass writes (run.activation_images; a gather's fallback too).
#pragma once
#include <cstdint>
#include <vector>

#include "graph/planner.h"
#include "models/model_ops.h"

namespace te {

struct HeldValues {
  std::vector<std::vector<int>> release_after;  // by node id: held values to drop once it has run
  int64_t peak_bytes = 0;                       // the most the binding holds at any step
};

HeldValues plan_held_values(const Graph& g, const Plan& plan, const ModelBinding& binding);

}  // namespace te
