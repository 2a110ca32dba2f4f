// One rank of a model (tp = 1) built from a parsed spec on one device, with its own stream and GEMM context, parameters
// initialised from the spec's seed: what a benchmark, a test, or a single-GPU embedder needs to call RankModel
// (and its graphs) directly, without the Engine's host-tensor interface.
#pragma once
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "models/parameters.h"
#include "models/rank_model.h"
#include "models/spec.h"

namespace te {

struct SingleRankModel {
  // `train`: keep what backward needs (the spec's run.mode should agree). Parse YAML with parse_spec (models/spec.h,
  // in the YAML front end) first.
  SingleRankModel(ModelSpec spec, Device device, bool train);

  ModelSpec spec;
  GlobalParams params;
  std::vector<std::unique_ptr<Communicator>> comms;  // a local group of one
  RankContext ctx;
  std::unique_ptr<RankModel> model;
};

}  // namespace te
