// TcpStore: set/get across ranks (threads) at W = 1, 2, 4, get waiting for a later set, barriers naming the ranks
// that never arrived, the job token, a silent connection that must not stall real ranks, a port in use, and a rank
// that dies (a forked child that _exit()s without its goodbye) named by lost_ranks(), rank 0's own death included.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "comm/tcp_store.h"
#include "engine/error.h"
#include "common/free_port.h"
#include "common/rendezvous.h"

namespace te {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TcpRendezvousOptions store_options(int port, int rank, int world, std::chrono::milliseconds timeout = 10s) {
  return test::loopback_rendezvous(port, rank, world, timeout, "store-test");
}

std::string store_key(int rank) {
  std::string k = "k";
  k += std::to_string(rank);
  return k;
}

std::vector<uint8_t> store_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// Runs fn(rank) on one thread per rank; returns each rank's exception message ("" if none).
std::vector<std::string> run_store_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = world - 1; r >= 0; --r)  // peers start before rank 0: they retry until it listens
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

class TcpStoreWorlds : public ::testing::TestWithParam<int> {};

TEST_P(TcpStoreWorlds, EveryRankSeesEveryKey) {
  const int world = GetParam();
  const int port = test::free_port();
  std::vector<std::vector<std::vector<uint8_t>>> got(world);
  auto errors = run_store_ranks(world, [&](int r) {
    TcpStore s(store_options(port, r, world));
    EXPECT_EQ(s.rank(), r);
    EXPECT_EQ(s.world(), world);
    std::vector<uint8_t> value(1000 + r * 77);
    for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<uint8_t>(i * 31 + r);
    s.set(store_key(r), value);
    for (int q = 0; q < world; ++q) got[r].push_back(s.get(store_key(q)));
    s.barrier("done");
    EXPECT_TRUE(s.lost_ranks().empty());
    s.barrier("done");  // a barrier name can be reused
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    ASSERT_EQ(got[r].size(), static_cast<size_t>(world));
    for (int q = 0; q < world; ++q) {
      ASSERT_EQ(got[r][q].size(), 1000u + q * 77) << r << " reads " << q;
      EXPECT_EQ(got[r][q][5], static_cast<uint8_t>(5 * 31 + q));
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Worlds, TcpStoreWorlds, ::testing::Values(1, 2, 4));

TEST(TcpStore, GetWaitsForALaterSet) {
  const int port = test::free_port();
  Clock::duration waited{};
  auto errors = run_store_ranks(2, [&](int r) {
    TcpStore s(store_options(port, r, 2));
    if (r == 0) {
      s.get("ready");  // rank 1 is connected and about to wait
      std::this_thread::sleep_for(200ms);
      s.set("late", store_bytes("value"));
    } else {
      s.set("ready", {});
      const auto t0 = Clock::now();
      s.wait({"late"}, 5s);
      EXPECT_EQ(s.get("late"), store_bytes("value"));
      waited = Clock::now() - t0;
    }
    s.barrier("end");
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_GE(waited, 150ms);
}

TEST(TcpStore, GetAndWaitTimeOutNamingTheKey) {
  TcpStore s(store_options(test::free_port(), 0, 1, 200ms));
  const auto t0 = Clock::now();
  try {
    s.get("never-set");
    FAIL() << "get returned";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("key 'never-set' was not set within 200 ms"), std::string::npos) << e.message();
  }
  EXPECT_THROW(s.wait({"a", "b"}, 100ms), Error);
  s.set("after", store_bytes("x"));  // the connection is still usable after timeouts
  EXPECT_EQ(s.get("after"), store_bytes("x"));
  EXPECT_LT(Clock::now() - t0, 3s);
}

TEST(TcpStore, BarrierNamesTheRanksThatNeverArrived) {
  const int port = test::free_port();
  const auto t0 = Clock::now();
  auto errors = run_store_ranks(2, [&](int r) {  // ranks 2 and 3 of 4 never start
    TcpStore s(store_options(port, r, 4, 500ms));
    s.barrier("gloo-connect");
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(errors[r].find("rank(s) 2, 3 never arrived at 'gloo-connect'"), std::string::npos) << errors[r];
  EXPECT_NE(errors[0].find("within 500 ms"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("teengine launch -n N"), std::string::npos) << errors[0];
  EXPECT_LT(Clock::now() - t0, 3s);
}

TEST(TcpStore, AWrongTokenIsRefused) {
  const int port = test::free_port();
  TcpStore master(store_options(port, 0, 2));
  TcpRendezvousOptions o = store_options(port, 1, 2);
  o.token = "another job";
  try {
    TcpStore peer(o);
    FAIL() << "a peer with another token joined";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("the job token does not match"), std::string::npos) << e.message();
    EXPECT_NE(e.hint().find("TEENGINE_JOB_TOKEN"), std::string::npos) << e.hint();
  }
  // A duplicate rank is refused too; the real rank 1 still joins afterwards.
  TcpStore peer(store_options(port, 1, 2));
  EXPECT_THROW(TcpStore(store_options(port, 1, 2)), Error);
  peer.set("ok", store_bytes("1"));
  EXPECT_EQ(master.get("ok"), store_bytes("1"));
}

TEST(TcpStore, ASilentConnectionDoesNotStallRealRanks) {
  const int port = test::free_port();
  TcpStore master(store_options(port, 0, 2));
  // A stray client that connects and never says a word, and one that sends half a frame.
  int silent = ::socket(AF_INET, SOCK_STREAM, 0), partial = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(silent, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(::connect(partial, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  const uint8_t half[6] = {0, 0, 0, 40, 1, 0};
  ASSERT_EQ(::send(partial, half, sizeof(half), MSG_NOSIGNAL), 6);
  const auto t0 = Clock::now();
  std::thread peer([&] {
    TcpStore s(store_options(port, 1, 2));
    s.set("from-1", store_bytes("hello"));
    s.barrier("both");
  });
  EXPECT_EQ(master.get("from-1"), store_bytes("hello"));
  master.barrier("both");
  peer.join();
  EXPECT_LT(Clock::now() - t0, 2s);
  ::close(silent);
  ::close(partial);
}

TEST(TcpStore, APortInUseIsAnInputError) {
  int port = 0;
  const int fd = test::listening_socket(&port);
  ASSERT_GE(fd, 0);
  try {
    TcpStore s(store_options(port, 0, 2));
    FAIL() << "bound a port in use";
  } catch (const InputError& e) {
    EXPECT_EQ(e.message(), "MASTER_PORT " + std::to_string(port) + " on 127.0.0.1 is in use");
    EXPECT_EQ(e.hint(), "pick a free port (teengine launch --master-port P)");
  }
  ::close(fd);
}

TEST(TcpStore, APeerFailsWhenRankZeroNeverListens) {
  const int port = test::free_port();
  const auto t0 = Clock::now();
  try {
    TcpStore s(store_options(port, 1, 2, 300ms));
    FAIL() << "connected to nobody";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("MASTER_ADDR:MASTER_PORT 127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.message();
    EXPECT_NE(e.hint().find("start rank 0"), std::string::npos) << e.hint();
  }
  EXPECT_LT(Clock::now() - t0, 3s);
}

TEST(TcpStore, LostRanksNamesARankThatDiedWithoutGoodbye) {
  const int port = test::free_port();
  // Fork before this process starts any thread (rank 0's server): the child is rank 1, which joins and dies.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      TcpStore s(store_options(port, 1, 3));
      s.barrier("joined");
      ::_exit(0);  // no destructor: the connection closes without a goodbye
    } catch (...) {
      ::_exit(1);
    }
  }
  TcpStore master(store_options(port, 0, 3));
  std::thread polite([&] {  // rank 2 leaves properly: never counted as lost
    TcpStore s(store_options(port, 2, 3));
    s.barrier("joined");
  });
  master.barrier("joined");
  polite.join();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::vector<int> lost;
  for (const auto until = Clock::now() + 2s; lost.empty() && Clock::now() < until;) {
    lost = master.lost_ranks();
    if (lost.empty()) std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(lost, std::vector<int>{1});
  // A barrier that the dead rank can never reach fails at once, naming it.
  const auto t0 = Clock::now();
  try {
    master.barrier("after");
    FAIL() << "barrier passed without rank 1";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("rank(s) 1 exited before arriving at 'after'"), std::string::npos) << e.message();
  }
  EXPECT_LT(Clock::now() - t0, 1s);
}

TEST(TcpStore, LostRanksNamesRankZeroWhenItsProcessDies) {
  const int port = test::free_port();
  const pid_t child = ::fork();  // rank 0 in a child that dies without shutting its store down
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      TcpStore s(store_options(port, 0, 2));
      s.get("go");
      ::_exit(0);
    } catch (...) {
      ::_exit(1);
    }
  }
  {
    TcpStore peer(store_options(port, 1, 2));
    peer.set("go", {});
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_EQ(peer.lost_ranks(), std::vector<int>{0});
    try {
      peer.get("anything");
      FAIL() << "get from a dead store";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("the connection to rank 0's store closed (rank 0 exited?)"), std::string::npos)
          << e.message();
    }
  }
}

TEST(TcpStore, PeersKeepTheLostRanksAfterRankZeroShutsDown) {
  const int port = test::free_port();
  auto master = std::make_unique<TcpStore>(store_options(port, 0, 2));
  TcpStore peer(store_options(port, 1, 2));
  peer.set("joined", store_bytes("1"));
  EXPECT_EQ(master->get("joined"), store_bytes("1"));
  const auto t0 = Clock::now();
  master.reset();  // orderly: a bye, so the peer does not take rank 0 for dead
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_TRUE(peer.lost_ranks().empty());
  EXPECT_THROW(peer.get("anything"), Error);
}

}  // namespace
}  // namespace te
