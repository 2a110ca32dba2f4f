// The --checkpoint-dir of `teengine run` (training) and how --resume finds a checkpoint in one.
//  - one file per checkpoint, step-00000100.safetensors (8 digits: name order is step order);
//  - checked before the run: the directory is created when missing, must be a writable directory and not one of
//    the run's data directories (its checkpoints would be read as batches), and every checkpoint path the run
//    will write is checked as tools/teengine/output_set.h checks --output (absent or a regular file, not an input
//    of the run, not another output's path);
//  - each checkpoint is written through an OutputSet of its own (a unique fsynced temporary file, removed on error
//    or SIGINT/SIGTERM) and renamed into place at once, so a run stopped later keeps every checkpoint before it.
#pragma once
#include <teengine/teengine.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tools/teengine/output_set.h"

namespace te::cli {

std::string checkpoint_file_name(int64_t step);
std::optional<int64_t> checkpoint_step_of(const std::string& file_name);  // "step-N.safetensors" → N
// --resume: a file as is, or the newest step-N.safetensors of a directory; te::InputError when there is none.
std::string resolve_resume(const std::string& file_or_dir);

class CheckpointDir {
 public:
  // Checkpoints of steps s in (first_step, last_step] with s % every == 0, and of last_step. `inputs`: the run's
  // input files; `outputs`: its other outputs (--output, --json, ...); `data_dirs`: run.data/eval_data paths.
  CheckpointDir(std::string dir, int64_t every, int64_t first_step, int64_t last_step,
                const std::vector<std::string>& inputs, const std::vector<OutputRequest>& outputs,
                const std::vector<std::string>& data_dirs);
  bool due(int64_t step) const;
  std::string path(int64_t step) const;
  // Collective (every rank calls it, rank 0 writes). Returns the path written.
  std::string write(teengine::Engine& engine, int64_t step, const std::map<std::string, std::string>& metadata) const;

 private:
  void check_path(const std::string& path) const;  // as OutputSet checks an output
  std::string dir_;
  int64_t every_, first_, last_;
  std::vector<std::string> inputs_;
};

}  // namespace te::cli
