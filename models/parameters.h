// The model's parameters as global (unsharded) fp32 host tensors, in parameter_specs() order, and their per-rank
// shards. Seeded init gives the same global tensors whatever tp is; weight files hold global tensors with
// TransformerEngine names, and the engine shards them by rank.
#pragma once
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "models/spec.h"

namespace te {

struct GlobalParams {
  std::vector<ParamSpec> specs;
  std::vector<Tensor> values;  // f32, host, global shape, same order as specs
};

// Seeded init: weights N(0, 1/sqrt(in)) (each parameter its own stream: seed mixed with its name), norm weights 1,
// norm and linear biases 0.
GlobalParams init_params(const ModelSpec& spec);
// Reads every parameter from a safetensors file (any float dtype, converted to f32). Missing or mis-shaped
// tensors are te::InputError naming the file and the tensor.
GlobalParams load_params(const ModelSpec& spec, const std::string& path);
// Writes the global tensors in the model dtype (atomically: temporary file, then rename).
void save_params(const GlobalParams& params, DType dtype, const std::string& path);

// One rank's shards (f32, host, local shapes), in parameter_specs() order: what a RankModel is built from.
struct RankShards {
  std::vector<ParamSpec> specs;
  std::vector<Tensor> values;
};
RankShards shard_params(const GlobalParams& global, int rank, int tp);
// Seeded init of one rank: the same values as shard_params(init_params(spec)), one global tensor at a time.
RankShards init_rank_params(const ModelSpec& spec, int rank, int tp);
// Reads only this rank's slices from a safetensors file of global tensors (by byte offsets; replicated tensors
// whole), so a process holds about 1/tp of the sharded weights. Errors as load_params.
// `prefix` is put before every parameter name (a checkpoint's optimizer state: "optimizer.exp_avg.").
RankShards load_rank_params(const ModelSpec& spec, const std::string& path, int rank, int tp,
                            const std::string& prefix = "");

// Rank `rank`'s shard of a global tensor (f32 host, contiguous). swiglu's FC1 halves are split separately.
Tensor shard_param(const ParamSpec& p, const Tensor& global, int rank, int tp);
// Writes rank `rank`'s shard back into the global tensor (the inverse of shard_param).
void unshard_param(const ParamSpec& p, const Tensor& shard, int rank, int tp, Tensor& global);

}  // namespace te
