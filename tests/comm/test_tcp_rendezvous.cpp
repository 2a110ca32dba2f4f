// TCP rendezvous: a 128-byte blob (the size of an ncclUniqueId) reaches every rank over loopback, past stray and
// foreign connections; a peer that never connects, or a master that never listens, is an error within the timeout.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "comm/tcp_rendezvous.h"
#include "engine/error.h"
#include "common/free_port.h"

namespace te {
namespace {

class TcpBroadcast : public ::testing::TestWithParam<int> {};

TEST_P(TcpBroadcast, EveryRankReceivesTheBlob) {
  const int world = GetParam();
  const int port = test::free_port();
  std::vector<uint8_t> blob(128);
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<uint8_t>(i * 37 + 11);
  std::vector<std::vector<uint8_t>> got(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = world - 1; r >= 0; --r)  // peers start before the master: they must retry until it listens
    threads.emplace_back([&, r] {
      try {
        TcpRendezvousOptions o;
        o.port = port;
        o.rank = r;
        o.world = world;
        o.timeout = std::chrono::milliseconds(10000);
        got[r] = tcp_broadcast_blob(o, r == 0 ? blob : std::vector<uint8_t>{});
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(got[r], blob) << "rank " << r;
  }
}
INSTANTIATE_TEST_SUITE_P(Worlds, TcpBroadcast, ::testing::Values(1, 2, 4, 8));

// The broadcast runs on the TcpStore: a connection that never speaks is ignored, a peer with another job's token is
// refused, and the real peer still gets the blob.
TEST(TcpBroadcastStray, StrayAndForeignConnectionsDoNotDisturbIt) {
  const int port = test::free_port();
  TcpRendezvousOptions o;
  o.port = port;
  o.world = 2;
  o.timeout = std::chrono::milliseconds(5000);
  o.token = "job";
  const std::vector<uint8_t> blob(128, 7);
  std::vector<uint8_t> got;
  std::string foreign_error;
  std::thread master([&] { tcp_broadcast_blob(o, blob); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::connect(silent, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  TcpRendezvousOptions foreign = o;
  foreign.rank = 1;
  foreign.token = "another job";
  try {
    tcp_broadcast_blob(foreign, {});
  } catch (const Error& e) {
    foreign_error = e.message();
  }
  TcpRendezvousOptions peer = o;
  peer.rank = 1;
  got = tcp_broadcast_blob(peer, {});
  master.join();
  ::close(silent);
  EXPECT_EQ(got, blob);
  EXPECT_NE(foreign_error.find("the job token does not match"), std::string::npos) << foreign_error;
}

TEST(TcpRendezvousTimeout, MasterFailsWhenAPeerNeverConnects) {
  TcpRendezvousOptions o;
  o.port = test::free_port();
  o.rank = 0;
  o.world = 3;
  o.timeout = std::chrono::milliseconds(300);
  const auto t0 = std::chrono::steady_clock::now();
  std::thread peer([&] {  // one of the two peers arrives
    TcpRendezvousOptions p = o;
    p.rank = 1;
    try {
      tcp_broadcast_blob(p, {});
    } catch (const Error&) {
    }
  });
  EXPECT_THROW(tcp_broadcast_blob(o, std::vector<uint8_t>(128, 1)), Error);
  peer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

TEST(TcpRendezvousTimeout, PeerFailsWhenTheMasterNeverListens) {
  TcpRendezvousOptions o;
  o.port = test::free_port();
  o.rank = 2;
  o.world = 3;
  o.timeout = std::chrono::milliseconds(300);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(tcp_broadcast_blob(o, {}), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

TEST(TcpRendezvousEnv, ReadsTheLaunchVariables) {
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29511", 1);
  setenv("TEENGINE_JOB_TOKEN", "job-42", 1);
  int local = -1;
  TcpRendezvousOptions o = rendezvous_options_from_env(&local);
  EXPECT_EQ(o.rank, 2);
  EXPECT_EQ(o.world, 4);
  EXPECT_EQ(local, 1);
  EXPECT_EQ(o.port, 29511);
  EXPECT_EQ(o.token, "job-42");
  unsetenv("TEENGINE_JOB_TOKEN");
  EXPECT_EQ(rendezvous_options_from_env().token, "");
  setenv("RANK", "4", 1);
  EXPECT_THROW(rendezvous_options_from_env(), InputError);
  unsetenv("RANK");
  EXPECT_THROW(rendezvous_options_from_env(), InputError);
  for (const char* v : {"WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
}

}  // namespace
}  // namespace te
