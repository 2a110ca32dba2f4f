// What a checkpoint's __metadata__ records about the spec that wrote it, and the check that a spec may continue
// from it. Each field is stored under its spec path ("model.hidden" → "64"), so a refusal names the field:
//  - identity: what the checkpoint's tensors mean — the model (sizes, dtype, norm, block), the precision recipe
//    and the options its recipe table row reads, the optimizer type. A checkpoint whose identity differs from the
//    spec's is refused (te::InputError naming the file and the first field that differs).
//  - run: what decides whether a continued run matches the one that wrote it — the optimizer's values, the
//    schedule, seed, shuffle, tokens, and run.steps when the cosine decay runs to it. A difference loads with a
//    warning that names the fields: training continues, but not as that run would have.
// Beside them: format, version and step (optimizer steps taken), and what the caller adds (the CLI: data position).
// parallel.* is not recorded: a checkpoint holds global tensors and loads at any tp.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "models/spec.h"

namespace te {

inline constexpr const char* kCheckpointFormat = "teengine-checkpoint";
inline constexpr const char* kCheckpointVersion = "1";

using CheckpointFields = std::vector<std::pair<std::string, std::string>>;  // (spec path, value)
CheckpointFields checkpoint_identity(const ModelSpec& spec);
CheckpointFields checkpoint_run_fields(const ModelSpec& spec);

// The header of a checkpoint of `spec` at `step`; `extra` joins it (never over the keys above).
std::map<std::string, std::string> checkpoint_metadata(const ModelSpec& spec, int64_t step,
                                                       const std::map<std::string, std::string>& extra);
// Format, version and identity of the checkpoint `path` (its header's `metadata`) against the spec: te::InputError
// naming the file and the field otherwise. Returns the checkpoint's step.
int64_t check_checkpoint_identity(const std::string& path, const std::map<std::string, std::string>& metadata,
                                  const ModelSpec& spec);
// Logs one warning naming the run fields that differ (nothing when none does).
void warn_checkpoint_run_differences(const std::string& path, const std::map<std::string, std::string>& metadata,
                                     const ModelSpec& spec);

}  // namespace te
