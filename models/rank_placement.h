// Where this process's tensor-parallel ranks live. Under a launcher (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT in the environment, as `teengine launch` and torchrun set them) the process is exactly one rank of a
// multi-process group on gloo (CPU) or nccl (GPU LOCAL_RANK); otherwise every rank is a thread of this process over
// the local communicator. parallel.comm: auto picks by the launcher and the device.
#pragma once
#include <chrono>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/tcp_rendezvous.h"
#include "models/spec.h"

namespace te {

struct RankPlacement {
  CommBackend backend = CommBackend::local;  // resolved: local | gloo | nccl
  Device device;
  int world = 1;         // parallel.tp
  int rank = 0;          // this process's rank (distributed) or 0 (local: ranks 0..world−1 all here)
  bool distributed = false;
  TcpRendezvousOptions rendezvous;  // distributed only
  std::chrono::milliseconds timeout{300000};
  int local_ranks() const { return distributed ? 1 : world; }
};

// Validates the spec against the environment: tp == WORLD_SIZE under a launcher, the backend against the device.
// Every mismatch is a te::InputError that names the variable or field and the fix.
RankPlacement place_ranks(const ModelSpec& spec);

// All tp ranks as threads of this process on `device`, whatever the environment says (tests, benchmarks).
RankPlacement local_placement(const ModelSpec& spec, Device device);

// The communicators of this process's ranks (one when distributed; joins the group, bounded by the timeout).
std::vector<std::unique_ptr<Communicator>> make_rank_comms(const RankPlacement& placement);

}  // namespace te
