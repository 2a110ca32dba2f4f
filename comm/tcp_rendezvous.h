// TCP rendezvous for the NCCL communicator: rank 0 listens on MASTER_ADDR:MASTER_PORT and sends one blob (the
// 128-byte ncclUniqueId) to every other rank. Plain sockets and poll(), no CUDA, so it is tested on the CPU. Every
// wait is bounded by the timeout: a peer that never connects, or a master that never listens, is a te::Error.
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

// Rank 0 passes the blob and gets it back once all world−1 peers received it; other ranks pass {} and get the
// blob rank 0 sent (its size is carried on the wire).
std::vector<uint8_t> tcp_broadcast_blob(const TcpRendezvousOptions& options, const std::vector<uint8_t>& blob);

// RANK, WORLD_SIZE, MASTER_ADDR (default 127.0.0.1), MASTER_PORT (default 29500) and TEENGINE_JOB_TOKEN (default
// empty) from the environment, with LOCAL_RANK returned through `local_rank` (default: RANK). Throws te::InputError
// naming a missing/bad variable.
TcpRendezvousOptions rendezvous_options_from_env(int* local_rank = nullptr);

}  // namespace te
