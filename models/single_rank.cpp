#include "models/single_rank.h"

#include <utility>

#include "comm/local_communicator.h"
#include "models/rank_group.h"

namespace te {

SingleRankModel::SingleRankModel(ModelSpec spec_in, Device device, bool train)
    : spec(std::move(spec_in)), params(init_params(spec)) {
  LocalGroupOptions go;
  go.device = device;
  comms = make_local_group(1, go);
  init_rank_context(ctx, spec, *comms[0], device);
  ctx.training = train;
  init_rank_resources(ctx);
  model = std::make_unique<RankModel>(spec, params, ctx);
}

}  // namespace te
