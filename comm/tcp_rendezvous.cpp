// TCP blob broadcast over the TcpStore (comm/tcp_store.h): rank 0 sets the blob, the others get it, and a barrier
// keeps rank 0's server up until every rank has read it. Environment parsing for the multi-process backends.
#include "comm/tcp_rendezvous.h"

#include <cstdlib>

#include "comm/tcp_store.h"
#include "engine/error.h"

namespace te {
namespace {

int env_int(const char* name, int fallback, bool required) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    if (required) TE_INPUT_ERROR(name << " is not set", "set RANK and WORLD_SIZE, or start with teengine launch -n N");
    return fallback;
  }
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > (1 << 20))
    TE_INPUT_ERROR(name << "='" << v << "' is not a non-negative integer", "");
  return static_cast<int>(x);
}

}  // namespace

std::vector<uint8_t> tcp_broadcast_blob(const TcpRendezvousOptions& o, const std::vector<uint8_t>& blob) {
  TE_CHECK(o.world >= 1 && o.rank >= 0 && o.rank < o.world,
           "TCP rendezvous: rank " << o.rank << " is outside world size " << o.world);
  TE_CHECK(o.port > 0 && o.port < 65536, "TCP rendezvous: port " << o.port << " is outside 1..65535");
  if (o.world == 1) return blob;
  TcpStore store(o);
  std::vector<uint8_t> out = blob;
  if (o.rank == 0) {
    store.set("broadcast/blob", blob);
  } else {
    out = store.get("broadcast/blob");
  }
  store.barrier("broadcast");  // rank 0's server outlives every read
  return out;
}

TcpRendezvousOptions rendezvous_options_from_env(int* local_rank) {
  TcpRendezvousOptions o;
  o.rank = env_int("RANK", 0, true);
  o.world = env_int("WORLD_SIZE", 1, true);
  if (o.rank >= o.world) TE_INPUT_ERROR("RANK=" << o.rank << " is not below WORLD_SIZE=" << o.world, "");
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) o.addr = a;
  o.port = env_int("MASTER_PORT", 29500, false);
  if (const char* t = std::getenv("TEENGINE_JOB_TOKEN")) o.token = t;
  if (local_rank) *local_rank = env_int("LOCAL_RANK", o.rank, false);
  return o;
}

}  // namespace te
