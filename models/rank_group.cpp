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
  ctx.weight_images = spec.run.weight_images;
  ctx.activation_images = spec.run.activation_images;
}

void init_rank_resources(RankContext& ctx) {
  ctx.stream = Stream::create(ctx.device, StreamPriority::high);  // above the executor's side stream
  ctx.gemm = std::make_unique<GemmContext>(ctx.device);
}

ShardSource shards_of(const GlobalParams& global) {
  return [&global](int rank, int tp) { return shard_params(global, rank, tp); };
}

ShardSource shards_for(const ModelSpec& spec) {
  if (spec.weights_path.empty()) return [&spec](int rank, int tp) { return init_rank_params(spec, rank, tp); };
  return [&spec](int rank, int tp) { return load_rank_params(spec, spec.weights_path, rank, tp); };
}

RankGroup::RankGroup(ModelSpec spec_in, Device device) : RankGroup(spec_in, init_params(spec_in), device) {}

RankGroup::RankGroup(ModelSpec spec_in, GlobalParams params, Device device)
    : RankGroup(spec_in, local_placement(spec_in, device), shards_of(params)) {}

RankGroup::RankGroup(ModelSpec spec_in, const RankPlacement& placement_in, const ShardSource& source)
    : spec(std::move(spec_in)), placement(placement_in) {
  comms = make_rank_comms(placement);
  for (auto& c : comms) {
    ctxs.push_back(std::make_unique<RankContext>());
    init_rank_context(*ctxs.back(), spec, *c, placement.device);
  }
  run_ranks(comms, [&](Communicator& c) { init_rank_resources(*ctxs[static_cast<size_t>(index_of(c))]); });
  load(source);
}

void RankGroup::load(const ShardSource& source) {
  // Read (and validate) every shard first, on this thread: a bad file must not abort the group's communicators.
  std::vector<RankShards> shards(comms.size());
  for (auto& c : comms) shards[static_cast<size_t>(index_of(*c))] = source(c->rank(), c->size());
  std::vector<std::unique_ptr<RankModel>> next(comms.size());
  run_ranks(comms, [&](Communicator& c) {
    const size_t i = static_cast<size_t>(index_of(c));
    next[i] = std::make_unique<RankModel>(spec, std::move(shards[i]), *ctxs[i]);
    ctxs[i]->stream.synchronize();
  });
  models = std::move(next);
}

GlobalParams RankGroup::gather_params() {
  return gather([](RankModel& m, size_t i) { return m.master_values(i); });
}

GlobalParams RankGroup::gather(const std::function<Tensor(RankModel&, size_t)>& shard_of) {
  GlobalParams g;
  g.specs = parameter_specs(spec);
  for (const ParamSpec& p : g.specs) g.values.push_back(Tensor::empty(p.shape, DType::f32));
  for (auto& m : models) m->ctx().stream.synchronize();
  if (!distributed()) {
    for (auto& m : models)
      for (size_t i = 0; i < g.specs.size(); ++i) {
        Tensor host = shard_of(*m, i).to(Device::cpu(), m->ctx().stream);
        m->ctx().stream.synchronize();
        unshard_param(g.specs[i], host, m->ctx().rank(), m->ctx().world(), g.values[i]);
      }
    return g;
  }
  // Every rank's master shard travels as bytes; each rank then places the W shards into the global tensors.
  Communicator& comm = *comms[0];
  RankModel& m = *models[0];
  const int w = comm.size();
  for (size_t i = 0; i < g.specs.size(); ++i) {
    const Tensor shard = shard_of(m, i);
    Tensor all = Tensor::empty({w * shard.numel()}, DType::f32, shard.device(), m.ctx().stream);
    comm.all_gather(shard.contiguous().reshape({shard.numel()}), all, m.ctx().stream).wait();
    Tensor host = all.to(Device::cpu(), m.ctx().stream);
    m.ctx().stream.synchronize();
    for (int r = 0; r < w; ++r)
      unshard_param(g.specs[i], host.narrow(0, r * shard.numel(), shard.numel()).reshape(shard.shape()), r, w,
                    g.values[i]);
  }
  return g;
}

}  // namespace te
