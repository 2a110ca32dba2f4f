// The training loop of `teengine run` (run.mode: train): batches from run.data (or --input, or one seeded batch)
// in the order of models/dataset.h, the learning-rate schedule (inside the Engine), eval loss every
// run.eval_every steps, checkpoints every run.checkpoint_every steps into --checkpoint-dir, --resume, and the
// progress lines (rank 0 only): one per step, rewritten in place when stdout is a terminal, then a summary.
#pragma once
#include <teengine/teengine.h>

#include <string>

#include "models/spec.h"

namespace te::cli {

struct TrainLoopOptions {
  std::string input;           // --input: one batch ([tokens, hidden]) or [batches, tokens, hidden]
  std::string checkpoint_dir;  // --checkpoint-dir
  std::string resume;          // --resume: a checkpoint file or a --checkpoint-dir
  bool keep_going = false;     // --keep-going: train past a non-finite loss
};

struct TrainLoopResult {
  teengine::StagedTensor input;  // the first batch's input, staged (what --output runs the trained model on)
  bool stopped = false;          // a non-finite loss stopped the run (without --keep-going) at `step`
  int64_t step = 0;
  float loss = 0;
};

// Runs the steps after engine.step() up to spec.run.steps. Throws te::InputError for bad data or checkpoints.
TrainLoopResult train_loop(teengine::Engine& engine, const ModelSpec& spec, const TrainLoopOptions& o);

}  // namespace te::cli
