// Rendezvous options for a rank of a test group on the loopback interface, with the test's own job token.
#pragma once
#include <chrono>
#include <string>

#include "comm/tcp_rendezvous.h"

namespace te::test {

inline TcpRendezvousOptions loopback_rendezvous(int port, int rank, int world, std::chrono::milliseconds timeout,
                                                std::string token) {
  TcpRendezvousOptions o;
  o.port = port;
  o.rank = rank;
  o.world = world;
  o.timeout = timeout;
  o.token = std::move(token);
  return o;
}

}  // namespace te::test
