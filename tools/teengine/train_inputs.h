// What `teengine run` trains from, opened and checked before the engine is built, so a bad file costs no
// allocation and names itself: the training batches (run.data, else --input, else one seeded batch), the eval set,
// the checkpoint to resume from (its header checked against the spec) and the checkpoint directory.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/dataset.h"
#include "models/spec.h"
#include "tools/teengine/checkpoint_dir.h"
#include "tools/teengine/output_set.h"

namespace te::cli {

struct TrainOptions {
  std::string input;           // --input: [tokens, hidden] or [batches, tokens, hidden]; `target` optional
  std::string checkpoint_dir;  // --checkpoint-dir
  std::string resume;          // --resume: a checkpoint file or a --checkpoint-dir
  bool keep_going = false;     // --keep-going: train past a non-finite loss
};

struct TrainInputs {
  Dataset data;
  std::optional<Dataset> eval;               // run.eval_data, when run.eval_every > 0
  std::string resume;                        // the checkpoint file to resume from ("" without --resume)
  int64_t start_step = 0;                    // its step
  std::optional<CheckpointDir> checkpoints;  // --checkpoint-dir
};

// The data and eval paths the run reads (files or directories): what `teengine run` passes to OutputSet, beside
// the spec, the weights and the checkpoint to resume, so that no output overwrites one.
std::vector<std::string> training_input_files(const ModelSpec& spec, const TrainOptions& o);
// Opens and checks it all (te::InputError naming the file or field and the fix). `resume`: the checkpoint file
// --resume resolved to (resolve_resume), or "". `inputs` (every file the run reads) and `outputs` are the run's,
// for the checkpoint paths' checks.
TrainInputs open_train_inputs(const ModelSpec& spec, const TrainOptions& o, const std::string& resume,
                              const std::vector<std::string>& inputs, const std::vector<OutputRequest>& outputs);

}  // namespace te::cli
