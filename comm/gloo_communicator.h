// The gloo backend: CPU ranks in separate processes (one rank per process), on Gloo, the library PyTorch uses for
// CPU collectives, over its TCP transport. The rendezvous is the TcpStore (comm/tcp_store.h) at MASTER_ADDR:
// MASTER_PORT. Reductions give the local backend's bits: every rank receives its block from every peer (Gloo
// all-to-all) and reduces it in rank order 0..W−1 with f32 accumulation and one rounding (comm/local_reduce.h);
// all_reduce is that reduce-scatter followed by an all-gather of the reduced blocks.
// A failed or missing peer is a te::Error within the timeout that names the lost rank when the store knows it.
// In a build without Gloo the factory throws te::Error saying how to get it.
#pragma once
#include <memory>

#include "comm/communicator.h"
#include "comm/tcp_rendezvous.h"

namespace te {

bool built_with_gloo();

// This process is rank rv.rank of rv.world; rank 0 serves the store at rv.addr:rv.port. The rendezvous waits at
// most rv.timeout; collectives wait at most `timeout`. The local TCP address Gloo listens on is the one that routes
// to rv.addr (127.0.0.1 for a loopback master), or the interface named by GLOO_SOCKET_IFNAME.
std::unique_ptr<Communicator> make_gloo_communicator(const TcpRendezvousOptions& rv,
                                                     std::chrono::milliseconds timeout = default_comm_timeout());

}  // namespace te
