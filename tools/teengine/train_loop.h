// The training loop of `teengine run` (run.mode: train): step s trains on the batch models/dataset.h's order gives
// it, at the learning rate of the schedule (inside the Engine); eval loss every run.eval_every steps and after the
// last; a checkpoint every run.checkpoint_every steps and after the last; --resume continues from a checkpoint's
// step; progress on rank 0 (tools/teengine/train_progress.h).
#pragma once
#include <teengine/teengine.h>

#include <cstdint>

#include "models/spec.h"
#include "tools/teengine/train_inputs.h"

namespace te::cli {

struct TrainLoopResult {
  teengine::StagedTensor input;  // the first batch's input, staged (what --output runs the trained model on)
  bool stopped = false;          // a non-finite loss stopped the run (without --keep-going) at `step`
  int64_t step = 0;
  float loss = 0;
};

// Runs the steps after the resumed one (or 0) up to spec.run.steps. Throws te::InputError for a batch that cannot
// be read or a checkpoint that cannot be loaded or written.
TrainLoopResult train_loop(teengine::Engine& engine, const ModelSpec& spec, const TrainInputs& in, bool keep_going);

}  // namespace te::cli
