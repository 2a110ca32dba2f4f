// The model run layer by layer, each ParallelLinear's phases chained in the order the graphs' nodes call them: the
// reference the planned graphs (models/model_graph.h, models/train_graph.h) are checked against byte for byte. It
// lives in the tests because the product runs only the graphs (run.executor: eager is the same graph, serial).
#pragma once
#include <cstdint>

#include "engine/tensor.h"
#include "models/rank_model.h"

namespace te::test {

// The inference (or training) forward, then the delayed-scaling update, as a graph step ends.
Tensor eager_forward(RankModel& m, const Tensor& x);
// Loss, backward and each parameter's grad holding this step's gradient alone (no optimizer update, replicated
// parameters' gradients not yet summed over the group). A non-finite loss skips the backward: every grad 0.
float eager_forward_backward(RankModel& m, const Tensor& x, const Tensor& target);
// One optimizer step on mean((forward(x) − target)²); a non-finite loss leaves the weights untouched.
float eager_train_step(RankModel& m, const Tensor& x, const Tensor& target, int64_t step, double lr);

}  // namespace te::test
