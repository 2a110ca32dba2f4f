#include "models/rank_group.h"

#include <utility>

#include "comm/local_communicator.h"

namespace te {

void init_rank_context(RankContext& ctx, const ModelSpec& spec, Communicator& comm, Device device) {
  ctx.comm = &comm;
  ctx.sequence_parallel = spec.parallel.sequence_parallel && comm.size() > 1;
  ctx.device = device;
  ctx.dtype = spec.model.dtype;
  ctx.recipe = recipe_configs(spec.precision, spec.run.seed);
  ctx.training = spec.run.mode == RunMode::train;
}

void init_rank_resources(RankContext& ctx) {
  ctx.stream = Stream::create(ctx.device);
  ctx.gemm = std::make_unique<GemmContext>(ctx.device);
}

RankGroup::RankGroup(ModelSpec spec_in, Device device) : RankGroup(spec_in, init_params(spec_in), device) {}

RankGroup::RankGroup(ModelSpec spec_in, GlobalParams params_in, Device device)
    : spec(std::move(spec_in)), params(std::move(params_in)) {
  const int w = spec.parallel.tp;
  LocalGroupOptions o;
  o.device = device;
  comms = make_local_group(w, o);
  models.resize(static_cast<size_t>(w));
  for (int r = 0; r < w; ++r) {
    ctxs.push_back(std::make_unique<RankContext>());
    init_rank_context(*ctxs.back(), spec, *comms[static_cast<size_t>(r)], device);
  }
  run_ranks(comms, [&](Communicator& c) {
    RankContext& ctx = *ctxs[static_cast<size_t>(c.rank())];
    init_rank_resources(ctx);
    models[static_cast<size_t>(c.rank())] = std::make_unique<RankModel>(spec, params, ctx);
    ctx.stream.synchronize();
  });
}

}  // namespace te
