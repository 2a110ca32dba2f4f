#include "models/single_rank.h"

#include <utility>

#include "comm/local_communicator.h"

namespace te {

SingleRankModel::SingleRankModel(ModelSpec spec_in, Device device, bool train)
    : spec(std::move(spec_in)), params(init_params(spec)) {
  LocalGroupOptions go;
  go.device = device;
  comms = make_local_group(1, go);
  ctx.comm = comms[0].get();
  ctx.device = device;
  ctx.stream = Stream::create(device);
  ctx.dtype = spec.model.dtype;
  ctx.recipe = recipe_configs(spec.precision, spec.run.seed);
  ctx.training = train;
  ctx.gemm = std::make_unique<GemmContext>(device);
  model = std::make_unique<RankModel>(spec, params, ctx);
}

}  // namespace te
