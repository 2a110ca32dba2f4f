// Training checkpoints: everything a run needs to continue bit-identically to one that was never interrupted, in
// one safetensors file of global (unsharded) tensors, whatever tp wrote it.
//
//   <parameter name>                      f32 master weights (so a checkpoint is also a weights file)
//   optimizer.exp_avg.<name>,             AdamW's first and second moments, or
//   optimizer.exp_avg_sq.<name>
//   optimizer.momentum.<name>             SGD's momentum buffer
//   quantizer.<weight name>.<role>.{scale, amax_history, step_amax, history_count}
//                                         delayed scaling's state of each linear's input/weight/grad quantizer
//                                         (reduced over the group, so every rank's is the same: rank 0's is saved)
//   __metadata__                          format "teengine-checkpoint", version, step (optimizer steps taken),
//                                         spec_hash (model + precision + optimizer type: must match to load),
//                                         run_hash (optimizer hyper-parameters, schedule, seed, steps: a different
//                                         one loads with a warning that the run will not match), recipe,
//                                         optimizer, tp, and whatever the caller adds (the CLI: data position).
//
// Under tensor parallelism the shards are gathered to rank 0, which writes the file (atomically: a temporary file,
// then rename); on load each rank reads only its slices. The step counter is the only other state: the learning
// rate (models/lr_schedule.h) and the batch order (models/dataset.h) are pure functions of it.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "models/rank_group.h"

namespace te {

inline constexpr const char* kCheckpointFormat = "teengine-checkpoint";

// FNV-1a over the fields a checkpoint's tensors depend on (model, precision, optimizer type), as 16 hex digits.
std::string checkpoint_spec_hash(const ModelSpec& spec);
// The same over what makes a continued run match an uninterrupted one (hyper-parameters, schedule, seed, steps).
std::string checkpoint_run_hash(const ModelSpec& spec);

// Collective (every rank calls it); rank 0 writes `path`. `metadata` is added to the header (not over the keys above).
void save_checkpoint(RankGroup& group, int64_t step, const std::string& path,
                     const std::map<std::string, std::string>& metadata = {});
// Validates `path` against the spec (te::InputError naming the file and the field that differs), then replaces the
// models' weights, optimizer state and quantizer state; a bad file leaves the group as it was. Returns the header's
// metadata (its "step" is the step to continue after).
std::map<std::string, std::string> load_checkpoint(RankGroup& group, const std::string& path);

// "step-00000100.safetensors"; and, for --resume: a file as is, or a directory's newest step-*.safetensors.
std::string checkpoint_file_name(int64_t step);
std::string resolve_checkpoint(const std::string& dir_or_file);

}  // namespace te
