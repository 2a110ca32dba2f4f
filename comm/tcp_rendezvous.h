// Rendezvous for the multi-process backends. tcp_broadcast_blob hands one blob (the NCCL communicator's 128-byte
// ncclUniqueId) from rank 0 to every rank through the TcpStore (comm/tcp_store.h): rank 0 serves the store on
// MASTER_ADDR:MASTER_PORT and sets the blob, the other ranks get it, then every rank meets at a barrier so rank 0's
// server outlives every read. Peers must present the job token (TEENGINE_JOB_TOKEN); no CUDA, so it is tested on the
// CPU. Every wait is bounded by the timeout: a peer that never arrives, or a master that never listens, is a
// te::Error. Also the environment parsing (RANK, WORLD_SIZE, MASTER_ADDR/PORT, TEENGINE_JOB_TOKEN).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace te {

struct TcpRendezvousOptions {
  std::string addr = "127.0.0.1";  // rank 0 binds it, the others connect to it
  int port = 29500;
  int rank = 0;
  int world = 1;
  std::chrono::milliseconds timeout{60000};
  std::string token;  // the job's shared secret: peers presenting another token are refused (TEENGINE_JOB_TOKEN)
};

// Rank 0 passes the blob and gets it back once all world−1 peers received it (the barrier); other ranks pass {} and
// get the blob rank 0 set (its size is carried on the wire). World size 1 returns the blob without a store.
std::vector<uint8_t> tcp_broadcast_blob(const TcpRendezvousOptions& options, const std::vector<uint8_t>& blob);

// RANK, WORLD_SIZE, MASTER_ADDR (default 127.0.0.1), MASTER_PORT (default 29500) and TEENGINE_JOB_TOKEN (default
// empty) from the environment, with LOCAL_RANK returned through `local_rank` (default: RANK). Throws te::InputError
// naming a missing/bad variable.
TcpRendezvousOptions rendezvous_options_from_env(int* local_rank = nullptr);

}  // namespace te
