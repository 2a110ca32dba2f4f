// Gloo communicator: W = 1..4 ranks as forked processes run grouped all_gather / reduce_scatter / all_reduce
// (f32, bf16, f16; sum and max; sizes not divisible by W, 0 and 1 element) and must write exactly the bytes the
// local backend (threads) writes for the same inputs. Faults: a rank that exits before a collective is named by the
// others within a few seconds; a rank that never starts is named by the join barrier.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "comm/gloo_communicator.h"
#include "comm/local_communicator.h"
#include "engine/error.h"
#include "common/free_port.h"
#include "common/rendezvous.h"

namespace te {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TcpRendezvousOptions gloo_rendezvous(int port, int rank, int world, std::chrono::milliseconds timeout = 10s) {
  return test::loopback_rendezvous(port, rank, world, timeout, "gloo-test");
}

// What one child reported: its output bytes, or the message of the exception it threw.
struct GlooChildReport {
  bool threw = false;
  std::string data;
  int exit_code = -1;  // -1: killed or never exited
};

// Forks one process per rank in `ranks`; child r runs body(r) and writes what it returns (or what it threw) to a
// pipe, then _exit(0)s — a child never returns into gtest. Call this before the test starts any thread.
std::vector<GlooChildReport> run_gloo_children(int world, const std::vector<int>& ranks,
                                               const std::function<std::string(int)>& body,
                                               std::chrono::seconds limit = 20s) {
  std::vector<GlooChildReport> out(world);
  std::vector<pid_t> pids(world, -1);
  std::vector<int> fds(world, -1);
  for (int r : ranks) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      std::string msg;
      try {
        msg = "O" + body(r);
      } catch (const std::exception& e) {
        msg = std::string("E") + e.what();
      } catch (...) {
        msg = "Eunknown exception";
      }
      for (size_t off = 0; off < msg.size();) {
        const ssize_t k = ::write(p[1], msg.data() + off, msg.size() - off);
        if (k <= 0) break;
        off += static_cast<size_t>(k);
      }
      ::_exit(0);
    }
    ::close(p[1]);
    pids[r] = pid;
    fds[r] = p[0];
  }
  std::vector<std::string> raw(world);
  const auto deadline = Clock::now() + limit;
  for (;;) {  // read every pipe until EOF (outputs can exceed a pipe's buffer)
    std::vector<pollfd> pfds;
    std::vector<int> who;
    for (int r : ranks)
      if (fds[r] >= 0) {
        pfds.push_back({fds[r], POLLIN, 0});
        who.push_back(r);
      }
    if (pfds.empty() || Clock::now() > deadline) break;
    ::poll(pfds.data(), pfds.size(), 100);
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (!pfds[i].revents) continue;
      char buf[65536];
      const ssize_t k = ::read(pfds[i].fd, buf, sizeof(buf));
      if (k > 0) {
        raw[who[i]].append(buf, static_cast<size_t>(k));
      } else {
        ::close(fds[who[i]]);
        fds[who[i]] = -1;
      }
    }
  }
  for (int r : ranks) {
    if (fds[r] >= 0) {
      ::close(fds[r]);
      ::kill(pids[r], SIGKILL);  // past the limit: a hung child
    }
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    out[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (!raw[r].empty()) {
      out[r].threw = raw[r][0] == 'E';
      out[r].data = raw[r].substr(1);
    } else {
      out[r].threw = true;
      out[r].data = "(no report)";
    }
  }
  return out;
}

std::vector<int> gloo_all_ranks(int world) {
  std::vector<int> r(world);
  for (int i = 0; i < world; ++i) r[i] = i;
  return r;
}

// Rank r's input for collective `tag`: values of mixed magnitude, so the order of accumulation shows in the bits.
Tensor gloo_input(int r, const Shape& shape, DType dt, int tag) {
  const int64_t n = shape_numel(shape);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] =
        std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(r) + static_cast<float>(tag)) *
        (1.0f + static_cast<float>((i + r) % 5) * 300.0f);
  return Tensor::from_f32(v, shape, dt, Device::cpu());
}

void append_gloo_bytes(std::string& out, const Tensor& t) {
  out.append(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.nbytes()));
}

// The same script on every backend: grouped launches of every collective in three dtypes; returns the outputs'
// bytes in order.
std::string gloo_script(Communicator& c) {
  const int W = c.size(), r = c.rank();
  std::string out;
  int tag = 0;
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    std::vector<Collective> ops;
    ops.push_back({CollectiveKind::all_gather, gloo_input(r, {3, 5}, dt, ++tag), Tensor::empty({3 * W, 5}, dt)});
    ops.push_back({CollectiveKind::reduce_scatter, gloo_input(r, {4 * W, 3}, dt, ++tag), Tensor::empty({4, 3}, dt),
                   ReduceOp::sum});
    ops.push_back(
        {CollectiveKind::reduce_scatter, gloo_input(r, {2 * W}, dt, ++tag), Tensor::empty({2}, dt), ReduceOp::max});
    for (int64_t n : {0, 1, 7, 37, 1000})
      ops.push_back({CollectiveKind::all_reduce, Tensor(), gloo_input(r, {n}, dt, ++tag), ReduceOp::sum});
    ops.push_back({CollectiveKind::all_reduce, Tensor(), gloo_input(r, {13}, dt, ++tag), ReduceOp::max});
    ops.push_back({CollectiveKind::all_gather, gloo_input(r, {0, 4}, dt, ++tag), Tensor::empty({0, 4}, dt)});
    c.launch(ops).wait();
    for (const auto& op : ops) append_gloo_bytes(out, op.output);
  }
  // Single launches after the grouped ones (fresh tags), and bytes of a non-reduction dtype.
  Tensor bytes = Tensor::empty({7}, DType::u8);
  for (int i = 0; i < 7; ++i) bytes.data<uint8_t>()[i] = static_cast<uint8_t>(r * 40 + i);
  Tensor gathered = Tensor::empty({7 * W}, DType::u8);
  c.all_gather(bytes, gathered).wait();
  append_gloo_bytes(out, gathered);
  Tensor x = gloo_input(r, {5}, DType::f32, ++tag);
  c.all_reduce(x, ReduceOp::sum).wait();
  append_gloo_bytes(out, x);
  return out;
}

size_t first_differing_byte(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

class GlooCollectives : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!built_with_gloo()) GTEST_SKIP() << "this build has no Gloo";
  }
};

TEST_P(GlooCollectives, SameBytesAsTheLocalBackend) {
  const int W = GetParam();
  const int port = test::free_port();
  auto got = run_gloo_children(W, gloo_all_ranks(W), [&](int r) {
    auto comm = make_gloo_communicator(gloo_rendezvous(port, r, W), 10s);
    if (comm->backend() != "gloo" || comm->rank() != r || comm->size() != W || !comm->device().is_cpu())
      throw std::runtime_error("wrong backend, rank, size or device");
    return gloo_script(*comm);
  });
  // The reference: the local backend's threads, started only after the children were forked.
  std::vector<std::string> want(W);
  auto comms = make_local_group(W, {Device::cpu(), 20s});
  run_ranks(comms, [&](Communicator& c) { want[c.rank()] = gloo_script(c); });
  for (int r = 0; r < W; ++r) {
    ASSERT_FALSE(got[r].threw) << "rank " << r << ": " << got[r].data;
    EXPECT_EQ(got[r].exit_code, 0) << "rank " << r;
    ASSERT_EQ(got[r].data.size(), want[r].size()) << "rank " << r;
    EXPECT_TRUE(got[r].data == want[r]) << "rank " << r << ": first differing byte "
                                        << first_differing_byte(got[r].data, want[r]) << " of " << want[r].size();
  }
}
INSTANTIATE_TEST_SUITE_P(Worlds, GlooCollectives, ::testing::Values(1, 2, 3, 4));

class GlooFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!built_with_gloo()) GTEST_SKIP() << "this build has no Gloo";
  }
};

// The dead rank is named by every peer, also by those that never talk to it directly in Gloo's ring all-gather
// (they fail when a neighbour that noticed aborts and closes its connections).
class GlooPeerExit : public ::testing::TestWithParam<CollectiveKind> {
 protected:
  void SetUp() override {
    if (!built_with_gloo()) GTEST_SKIP() << "this build has no Gloo";
  }
};

TEST_P(GlooPeerExit, ARankThatExitsIsNamedByThePeers) {
  const int W = 4, port = test::free_port();
  const CollectiveKind kind = GetParam();
  auto got = run_gloo_children(W, gloo_all_ranks(W), [&](int r) -> std::string {
    auto comm = make_gloo_communicator(gloo_rendezvous(port, r, W), 3s);
    if (r == 2) ::_exit(3);  // dies between collectives: no goodbye
    Tensor x = gloo_input(r, {64}, DType::f32, 0);
    Tensor all = Tensor::empty({64 * W}, DType::f32);
    const auto t0 = Clock::now();
    std::string report;
    try {
      if (kind == CollectiveKind::all_gather) {
        comm->all_gather(x, all).wait();
      } else {
        comm->all_reduce(x, ReduceOp::sum).wait();
      }
      return "no error";
    } catch (const Error& e) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
      report = std::to_string(ms) + " ms: " + e.message() + " | hint: " + e.hint();
    }
    try {  // the communicator is aborted: later launches fail at once
      comm->all_reduce(x, ReduceOp::sum).wait();
      report += " | second launch passed";
    } catch (const Error& e) {
      report += " | then: " + e.message();
    }
    throw std::runtime_error(report);
  });
  EXPECT_EQ(got[2].exit_code, 3);
  for (int r : {0, 1, 3}) {
    const std::string& m = got[r].data;
    const std::string who = "gloo rank " + std::to_string(r) + "/4: ";
    EXPECT_TRUE(got[r].threw) << m;
    EXPECT_NE(m.find(who + std::string(collective_name(kind)) + " #0 of launch 1 failed: rank 2 exited (gloo: "),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("hint: look at that rank's log; raise parallel.timeout_s if it is just slow"), std::string::npos)
        << m;
    EXPECT_NE(m.find("then: " + who + "the communicator was aborted"), std::string::npos) << m;
    const long ms = std::isdigit(static_cast<unsigned char>(m[0])) ? std::stol(m) : 1000000;
    EXPECT_LT(ms, 2500) << "detected by the death, not the 3 s timeout: " << m;
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, GlooPeerExit, ::testing::Values(CollectiveKind::all_reduce, CollectiveKind::all_gather),
                         [](const auto& info) { return std::string(collective_name(info.param)); });

TEST_F(GlooFaults, ARankThatHangsIsATimeoutNamingNoRank) {
  const int W = 2, port = test::free_port();
  auto got = run_gloo_children(W, gloo_all_ranks(W), [&](int r) -> std::string {
    auto comm = make_gloo_communicator(gloo_rendezvous(port, r, W), 1000ms);
    if (r == 1) {  // alive (its store connection stays up) but never launches
      std::this_thread::sleep_for(2500ms);
      return "slept";
    }
    Tensor x = gloo_input(r, {64}, DType::f32, 0);
    const auto t0 = Clock::now();
    try {
      comm->all_reduce(x, ReduceOp::sum).wait();
    } catch (const Error& e) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
      throw std::runtime_error(std::to_string(ms) + " ms: " + e.message());
    }
    return "no error";
  });
  const std::string& m = got[0].data;
  EXPECT_TRUE(got[0].threw) << m;
  EXPECT_NE(m.find("no rank exited: a peer is hanging or slower than the timeout (1000 ms)"), std::string::npos) << m;
  const long ms = std::isdigit(static_cast<unsigned char>(m[0])) ? std::stol(m) : 0;
  EXPECT_GE(ms, 900) << m;
  EXPECT_LT(ms, 2500) << m;
  EXPECT_EQ(got[1].data, "slept");
}

TEST_F(GlooFaults, ARankThatNeverStartsIsNamedByTheJoinBarrier) {
  const int W = 3, port = test::free_port();
  const auto t0 = Clock::now();
  auto got = run_gloo_children(W, {0, 1}, [&](int r) -> std::string {
    auto comm = make_gloo_communicator(gloo_rendezvous(port, r, W, 1500ms), 3s);
    return "joined without rank 2";
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(got[r].threw) << got[r].data;
    EXPECT_NE(got[r].data.find("rank(s) 2 never arrived at 'join'"), std::string::npos) << got[r].data;
  }
  EXPECT_LT(Clock::now() - t0, 6s);
}

TEST(GlooBuild, WithoutGlooTheFactorySaysHowToGetIt) {
  if (built_with_gloo()) GTEST_SKIP() << "this build has Gloo";
  try {
    make_gloo_communicator(gloo_rendezvous(test::free_port(), 0, 1));
    FAIL() << "made a gloo communicator without Gloo";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("this build has no Gloo"), std::string::npos) << e.message();
    EXPECT_EQ(e.hint(), "install libgloo-dev (tools/install-deps.sh) and rebuild");
  }
}

}  // namespace
}  // namespace te
