// The local backend: W ranks are W threads of one process sharing a rendezvous. Over host memory the collectives
// are memcpys and a rank-ordered reduction; over device memory (all ranks on one GPU, each rank on its own
// stream) they are cudaMemcpyAsync copies and a reduction kernel on the calling rank's stream, ordered against
// the peers' streams with events — no host synchronisation. This is what tests, CPU runs and single-GPU
// simulations of N ranks use.
//
// A launch is two rendezvous: "posted" (every rank has published its tensors) and "done" (every rank has read its
// peers' inputs, so inputs may be reused). A rank that does not arrive within the timeout fails the group: every
// waiting rank throws te::Error, and later launches on any rank throw at once.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace te {

struct LocalGroupOptions {
  Device device = Device::cpu();  // where every rank's tensors live
  std::chrono::milliseconds timeout = default_comm_timeout();
};

// W communicators (rank 0..W−1) of one group; hand communicator r to the thread that plays rank r.
std::vector<std::unique_ptr<Communicator>> make_local_group(int world, const LocalGroupOptions& options = {});

// Runs fn(comm) for each communicator on its own thread (the device made current) and joins them all; a single
// communicator runs on the calling thread. A rank that throws aborts the group so the others fail fast; the first
// error thrown (the root cause) is rethrown.
void run_ranks(const std::vector<std::unique_ptr<Communicator>>& comms, const std::function<void(Communicator&)>& fn);

}  // namespace te
