#include "models/rank_placement.h"

#include <cstdlib>
#include <string>

#include "comm/gloo_communicator.h"
#include "comm/local_communicator.h"
#include "comm/nccl_communicator.h"
#include "engine/error.h"

namespace te {
namespace {

bool launched() {
  const char* w = std::getenv("WORLD_SIZE");
  return w && *w;
}

int env_int_or(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return *end == '\0' && x > 0 && x < (1 << 20) ? static_cast<int>(x) : fallback;
}

std::string launch_hint(int tp) {
  return "start one process per rank: teengine launch -n " + std::to_string(tp) + " -- teengine run MODEL.yaml";
}

}  // namespace

RankPlacement local_placement(const ModelSpec& spec, Device device) {
  RankPlacement p;
  p.world = spec.parallel.tp;
  p.device = device;
  p.timeout = spec.parallel.timeout_s
                  ? std::chrono::milliseconds(static_cast<int64_t>(*spec.parallel.timeout_s * 1000.0))
                  : default_comm_timeout();
  return p;
}

RankPlacement place_ranks(const ModelSpec& spec) {
  RankPlacement p = local_placement(spec, Device::cpu());
  const CommBackend asked = spec.parallel.comm;
  if (!launched()) {
    if (asked == CommBackend::gloo || asked == CommBackend::nccl)
      TE_INPUT_ERROR("parallel.comm: " << comm_backend_name(asked)
                                       << " runs one rank per process, but this process was not started by a "
                                          "launcher (WORLD_SIZE is not set)",
                     launch_hint(p.world) << ", or use parallel.comm: local (ranks as threads of one process)");
    p.backend = CommBackend::local;
    p.device = parse_device(spec.run.device);
    return p;
  }
  int local_rank = 0;
  p.rendezvous = rendezvous_options_from_env(&local_rank);
  p.rendezvous.timeout = p.timeout;
  if (asked == CommBackend::local) {
    if (p.rendezvous.world > 1)
      TE_INPUT_ERROR("parallel.comm: local under a launcher (WORLD_SIZE=" << p.rendezvous.world << ") would run "
                                                                        << p.rendezvous.world
                                                                        << " independent copies of the model",
                     "use parallel.comm: auto (gloo on the CPU, nccl on GPUs), or run without teengine launch");
    p.backend = CommBackend::local;
    p.device = parse_device(spec.run.device);
    return p;
  }
  if (p.rendezvous.world != p.world)
    TE_INPUT_ERROR("parallel.tp is " << p.world << " but the launcher started WORLD_SIZE=" << p.rendezvous.world
                                     << " processes (one rank each)",
                   "launch -n " << p.world << ", or set parallel.tp=" << p.rendezvous.world);
  p.distributed = true;
  p.rank = p.rendezvous.rank;
  // The device: nccl ranks each own GPU LOCAL_RANK; gloo ranks compute on the CPU.
  CommBackend b = asked;
  if (b == CommBackend::automatic) {
    // nccl when every process of this node can have a GPU of its own, gloo on the CPU otherwise.
    const int local_world = env_int_or("LOCAL_WORLD_SIZE", p.rendezvous.world);
    const bool gpus = spec.run.device != "cpu" && cuda_device_count() >= local_world;
    b = gpus ? CommBackend::nccl : CommBackend::gloo;
  }
  p.backend = b;
  if (b == CommBackend::gloo) {
    if (spec.run.device != "auto" && spec.run.device != "cpu")
      TE_INPUT_ERROR("parallel.comm: gloo ranks compute on the CPU, but run.device is " << spec.run.device,
                     "set run.device: cpu, or parallel.comm: nccl for one GPU per rank");
    if (!built_with_gloo())
      TE_INPUT_ERROR("parallel.comm: gloo, but this build has no Gloo",
                     "install libgloo-dev (tools/install-deps.sh) and rebuild, or use parallel.comm: nccl on GPUs");
    p.device = Device::cpu();
  } else {
    if (spec.run.device == "cpu")
      TE_INPUT_ERROR("parallel.comm: nccl needs GPUs, but run.device is cpu",
                     "set run.device: auto or cuda (rank r uses GPU LOCAL_RANK), or parallel.comm: gloo");
    p.device = parse_device("cuda:" + std::to_string(local_rank));
  }
  return p;
}

std::vector<std::unique_ptr<Communicator>> make_rank_comms(const RankPlacement& p) {
  std::vector<std::unique_ptr<Communicator>> comms;
  switch (p.backend) {
    case CommBackend::gloo: comms.push_back(make_gloo_communicator(p.rendezvous, p.timeout)); break;
    case CommBackend::nccl: {
      NcclOptions o;
      o.timeout = p.timeout;
      comms.push_back(make_nccl_communicator(p.rendezvous, p.device, o));
      break;
    }
    default: {
      LocalGroupOptions o;
      o.device = p.device;
      o.timeout = p.timeout;
      comms = make_local_group(p.world, o);
    }
  }
  for (auto& c : comms) c->set_timeout(p.timeout);
  return comms;
}

}  // namespace te
