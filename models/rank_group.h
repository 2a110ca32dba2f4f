// The tensor-parallel ranks this process runs, with their communicators, contexts and models: all W ranks as
// threads over the local communicator, or one rank of a multi-process group (gloo/nccl, models/rank_placement.h).
// What the Engine, multi-rank benchmarks and tests build.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "models/parameters.h"
#include "models/rank_model.h"
#include "models/rank_placement.h"
#include "models/spec.h"

namespace te {

// Fills everything but the stream and GEMM context, which the rank's own thread creates (init_rank_resources).
void init_rank_context(RankContext& ctx, const ModelSpec& spec, Communicator& comm, Device device);
void init_rank_resources(RankContext& ctx);  // a new stream and GEMM context on ctx.device

// Rank r of tp's parameter shards (host, f32).
using ShardSource = std::function<RankShards(int rank, int tp)>;
ShardSource shards_of(const GlobalParams& global);  // shards the global tensors (they must outlive the call)
// Weights from spec.weights_path (each rank reads only its slices), else seeded init.
ShardSource shards_for(const ModelSpec& spec);

struct RankGroup {
  // All tp ranks as threads on `device`. Parse YAML with parse_spec (models/spec.h, in the YAML front end) first.
  // Training state follows run.mode.
  RankGroup(ModelSpec spec, Device device);  // parameters from init_params(spec)
  RankGroup(ModelSpec spec, GlobalParams params, Device device);
  // This process's ranks as `placement` says (joins the group when distributed), parameters from `source`.
  RankGroup(ModelSpec spec, const RankPlacement& placement, const ShardSource& source);

  int world() const { return spec.parallel.tp; }          // the group's size
  int local_ranks() const { return static_cast<int>(models.size()); }
  bool distributed() const { return placement.distributed; }
  // Index into comms/ctxs/models of the rank `comm` plays.
  int index_of(const Communicator& comm) const { return distributed() ? 0 : comm.rank(); }
  // Replaces every model by one built from `source` (the communicators stay); a failure leaves the old models.
  void load(const ShardSource& source);
  // The global tensors from every rank's masters. Distributed: collective (every rank must call it); the tensors
  // arrive on every rank.
  GlobalParams gather_params();
  // The same for any per-parameter shard of the models (`shard_of(model, i)`: f32, parameter i's local shape), e.g.
  // optimizer state: the global tensors, unsharded as the masters are.
  GlobalParams gather(const std::function<Tensor(RankModel&, size_t)>& shard_of);

  ModelSpec spec;
  RankPlacement placement;
  std::vector<std::unique_ptr<Communicator>> comms;  // [i] plays rank comms[i]->rank()
  std::vector<std::unique_ptr<RankContext>> ctxs;
  std::vector<std::unique_ptr<RankModel>> models;
};

}  // namespace te
