// W tensor-parallel ranks of one model on one device, as threads over the local communicator: the spec, its
// global parameters, and per rank a context and a RankModel. What the Engine, multi-rank benchmarks and tests build.
#pragma once
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "models/parameters.h"
#include "models/rank_model.h"
#include "models/spec.h"

namespace te {

// Fills everything but the stream and GEMM context, which the rank's own thread creates (init_rank_resources).
void init_rank_context(RankContext& ctx, const ModelSpec& spec, Communicator& comm, Device device);
void init_rank_resources(RankContext& ctx);  // a new stream and GEMM context on ctx.device

struct RankGroup {
  // Parse YAML with parse_spec (models/spec.h, in the YAML front end) first. Training state follows run.mode.
  RankGroup(ModelSpec spec, Device device);  // parameters from init_params(spec)
  RankGroup(ModelSpec spec, GlobalParams params, Device device);
  int world() const { return static_cast<int>(models.size()); }

  ModelSpec spec;
  GlobalParams params;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<RankContext>> ctxs;
  std::vector<std::unique_ptr<RankModel>> models;
};

}  // namespace te
