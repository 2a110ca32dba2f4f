// The learning rate of each training step: a pure function of the step number, so a run resumed from a checkpoint
// at step K uses exactly the rates of an uninterrupted run.
//
//   constant:  lr(s) = lr · min(1, s / W)                                   (W = warmup_steps; no warm-up when 0)
//   cosine:    lr(s) = lr · s / W                                           for s ≤ W
//              lr(s) = min_lr + (lr − min_lr) · ½ (1 + cos(π · min(s − W, D) / D))   for s > W
//   with D = decay_steps, or run.steps − W when decay_steps is 0 (at least 1); after W + D the rate stays min_lr.
// Steps count from 1. Evaluated in double; the optimizer rounds it to f32 once per step (graph/optimizer.h).
#pragma once
#include <cstdint>

#include "models/spec.h"

namespace te {

double learning_rate(const OptimizerSpec& optimizer, int64_t total_steps, int64_t step);

}  // namespace te
