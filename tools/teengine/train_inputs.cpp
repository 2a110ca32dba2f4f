#include "tools/teengine/train_inputs.h"

#include <utility>

#include "engine/error.h"
#include "engine/log.h"
#include "engine/printable.h"
#include "models/checkpoint_header.h"
#include "models/safetensors.h"

namespace te::cli {
namespace {

Tensor seeded_input(const ModelSpec& spec) {  // x ~ N(0, 1), as an inference run without --input uses
  Tensor x = Tensor::empty({spec.run.tokens, spec.model.hidden}, DType::f32);
  x.fill_normal(spec.run.seed ^ 0x1A2B3C4Dull);
  return x;
}

Dataset training_data(const ModelSpec& spec, const TrainOptions& o) {
  const int64_t tokens = spec.run.tokens, hidden = spec.model.hidden;
  if (!spec.run.data_paths.empty()) {
    if (!o.input.empty())
      TE_INPUT_ERROR("both --input " << printable_path(o.input) << " and run.data give training data",
                     "drop --input, or set run.data to null (--set run.data=null)");
    return Dataset::open(spec.run.data_paths, tokens, hidden, "run.data");
  }
  if (!o.input.empty()) return Dataset::open({o.input}, tokens, hidden, "--input", /*target_optional=*/true);
  return Dataset::from_tensors(seeded_input(spec), Tensor());  // the target: 0.5·x (Dataset::Batch)
}

}  // namespace

std::vector<std::string> training_input_files(const ModelSpec& spec, const TrainOptions& o) {
  std::vector<std::string> files = spec.run.data_paths;
  files.insert(files.end(), spec.run.eval_data_paths.begin(), spec.run.eval_data_paths.end());
  if (!o.input.empty()) files.push_back(o.input);
  return files;
}

TrainInputs open_train_inputs(const ModelSpec& spec, const TrainOptions& o, const std::string& resume,
                              const std::vector<std::string>& inputs, const std::vector<OutputRequest>& outputs) {
  const RunSpec& run = spec.run;
  TrainInputs t{training_data(spec, o), std::nullopt, "", 0, std::nullopt};
  if (!run.eval_data_paths.empty()) {
    Dataset eval = Dataset::open(run.eval_data_paths, run.tokens, spec.model.hidden, "run.eval_data");
    if (run.eval_every > 0)
      t.eval = std::move(eval);
    else
      TE_LOG(warn, "run.eval_data is set but run.eval_every is 0: the run does not evaluate");
  }
  if (!resume.empty()) {
    // The header only: the tensors are read by the engine once it exists.
    t.resume = resume;
    t.start_step = check_checkpoint_identity(resume, SafetensorsReader::open(resume).metadata(), spec);
  }
  if (run.checkpoint_every > 0 && o.checkpoint_dir.empty())
    TE_LOG(warn, "run.checkpoint_every is " << run.checkpoint_every
                                            << " but no --checkpoint-dir was given: no checkpoints are written");
  if (!o.checkpoint_dir.empty()) {
    std::vector<std::string> data_dirs = run.data_paths;
    data_dirs.insert(data_dirs.end(), run.eval_data_paths.begin(), run.eval_data_paths.end());
    t.checkpoints.emplace(o.checkpoint_dir, run.checkpoint_every, t.start_step, run.steps, inputs, outputs, data_dirs);
  }
  return t;
}

}  // namespace te::cli
