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
//   __metadata__                          format, version, step and the spec fields of models/checkpoint_header.h,
//                                         and whatever the caller adds (the CLI: the data position)
//
// Under tensor parallelism the shards are gathered to rank 0, which writes the file (write_safetensors: a
// temporary file, fsynced, then renamed); on load each rank reads only its slices. The step counter is the only
// other state: the learning rate (models/lr_schedule.h) and the batch order (models/dataset.h) are functions of it.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "models/rank_group.h"

namespace te {

// Collective (every rank calls it); rank 0 writes `path`. `metadata` joins the header (never over its own keys).
void save_checkpoint(RankGroup& group, int64_t step, const std::string& path,
                     const std::map<std::string, std::string>& metadata = {});
// Checks `path` against the spec (te::InputError naming the file and the field), then replaces the models' weights,
// optimizer state and quantizer state; a bad file leaves the group as it was. Returns the header's metadata (its
// "step" is the step to continue after).
std::map<std::string, std::string> load_checkpoint(RankGroup& group, const std::string& path);

}  // namespace te
