// The nccl backend: one NCCL communicator per GPU. Either one process per GPU with a rendezvous (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT; rank 0 sends the ncclUniqueId over TCP, comm/tcp_rendezvous.h), or one
// process driving several GPUs (one communicator per device, used from one thread per device, e.g. run_ranks).
// Communicators are created non-blocking: initialisation and every wait poll ncclCommGetAsyncError against the
// timeout and call ncclCommAbort on error or timeout, so a failed or missing peer is a te::Error, never a hang.
// NVLink SHARP (NCCL_NVLS_ENABLE) is switched off unless the environment sets it.
// In a build without CUDA every factory throws te::Error.
#pragma once
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/tcp_rendezvous.h"

namespace te {

struct NcclOptions {
  std::chrono::milliseconds timeout = default_comm_timeout();
};

// This process is rank `rv.rank` of `rv.world` on `device`; rank 0 listens at rv.addr:rv.port.
std::unique_ptr<Communicator> make_nccl_communicator(const TcpRendezvousOptions& rv, Device device,
                                                     const NcclOptions& options = {});
// The same from RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT, on device cuda:LOCAL_RANK.
std::unique_ptr<Communicator> make_nccl_communicator_from_env(const NcclOptions& options = {});
// One process, several GPUs: communicator r on devices[r] (ranks 0..n−1), initialised together.
std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<Device>& devices,
                                                           const NcclOptions& options = {});

}  // namespace te
