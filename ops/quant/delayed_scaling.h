// The state delayed scaling carries from step to step (docs/NUMERICS.md §2.4), on its own: the scale the next
// quantize uses, the amax history, the amaxes folded in since the last update, and how many amaxes were pushed.
// A Quantizer of an fp8_delayed tensor owns one; a checkpoint saves it and an eval forward snapshots and puts it
// back. Copying the struct shares the tensors; copy_to makes an independent copy.
#pragma once
#include "engine/tensor.h"

namespace te {

struct DelayedScaling {
  Tensor scale;         // f32 [1]
  Tensor amax_history;  // f32 [history_len]
  Tensor step_amax;     // f32 [1]: max |x| over the quantizes since the last update
  Tensor count;         // i64 [1]: amaxes pushed so far (the next history slot is count % history_len)

  bool defined() const { return scale.defined(); }
  // Before the first step: scale 1, an empty history.
  static DelayedScaling fresh(int history_len, Device device, const Stream& stream = Stream());
  // An independent copy on `device`.
  DelayedScaling copy_to(Device device, const Stream& stream = Stream()) const;
  // A te::Error naming what differs from f32 [1], f32 [history_len], f32 [1], i64 [1].
  void check(int history_len) const;
};

}  // namespace te
