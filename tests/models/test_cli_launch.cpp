// Ranks as processes: `teengine launch -n N -- teengine run` over Gloo against the same spec with the ranks as
// threads (parallel.comm=local). Output, saved weights, gather counters and training losses must be identical
// (the Gloo backend reduces in the local backend's rank order). Then the failures: a rank killed mid-run, tp and
// WORLD_SIZE disagreeing, a port in use, a rank that never starts, a backend that needs a launcher.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_test.h"
#include "comm/gloo_communicator.h"
#include "models/safetensors.h"
#include "common/free_port.h"

namespace te {
namespace {

using Clock = std::chrono::steady_clock;

class LaunchCli : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    if (!built_with_gloo()) GTEST_SKIP() << "this build has no Gloo";
  }
  static std::string model(const std::string& name) { return te::test::model_path(name); }
  std::string launch(int n) { return "launch -n " + std::to_string(n) + " --master-port " + std::to_string(test::free_port()) + " -- teengine "; }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static bool same_bytes(const std::string& a, const std::string& b) {
    const std::string x = slurp(a), y = slurp(b);
    return !x.empty() && x == y;
  }
};

struct Case {
  const char* model;
  int tp;
  const char* sets;
};

class LaunchParity : public LaunchCli, public ::testing::WithParamInterface<Case> {};

// Inference: --output, --save-weights and the summed gather counters equal the local run's, byte for byte.
TEST_P(LaunchParity, InferenceMatchesTheLocalRun) {
  const Case c = GetParam();
  const std::string args = "run " + model(c.model) + " --set run.device=cpu --set run.mode=infer --set parallel.tp=" +
                           std::to_string(c.tp) + " " + c.sets;
  Result local = run(args + " --set parallel.comm=local --output " + path("lo.st") + " --save-weights " +
                     path("lw.st") + " --json " + path("l.json"));
  ASSERT_EQ(local.code, 0) << local.err;
  Result dist = run(launch(c.tp) + args + " --set parallel.comm=gloo --set parallel.timeout_s=60 --output " +
                    path("do.st") + " --save-weights " + path("dw.st") + " --json " + path("d.json"));
  ASSERT_EQ(dist.code, 0) << dist.out << dist.err;
  EXPECT_TRUE(same_bytes(path("lo.st"), path("do.st"))) << "outputs differ";
  EXPECT_TRUE(same_bytes(path("lw.st"), path("dw.st"))) << "saved weights differ";
  auto lj = nlohmann::json::parse(slurp(path("l.json"))), dj = nlohmann::json::parse(slurp(path("d.json")));
  EXPECT_EQ(lj["comm"]["gather"], dj["comm"]["gather"]);
  EXPECT_EQ(lj["comm"]["reduce_scatter"], dj["comm"]["reduce_scatter"]);
  EXPECT_EQ(dj["comm_backend"], "gloo");
  EXPECT_EQ(dj["processes"], c.tp);
  EXPECT_EQ(dj["per_process"].size(), static_cast<size_t>(c.tp));
  // Only rank 0 prints the summary.
  size_t summaries = 0;
  for (size_t at = 0; (at = dist.out.find("gathers:", at)) != std::string::npos; ++at) ++summaries;
  EXPECT_EQ(summaries, 1u) << dist.out;
}

// Training: every step's loss, and the trained weights, equal the local run's.
TEST_P(LaunchParity, TrainingMatchesTheLocalRun) {
  const Case c = GetParam();
  const std::string args = "run " + model(c.model) + " --set run.device=cpu --set run.mode=train --set run.steps=20 " +
                           "--set parallel.tp=" + std::to_string(c.tp) + " " + c.sets;
  Result local = run(args + " --set parallel.comm=local --save-weights " + path("lw.st") + " --json " + path("l.json"));
  ASSERT_EQ(local.code, 0) << local.err;
  Result dist = run(launch(c.tp) + args + " --set parallel.comm=gloo --set parallel.timeout_s=60 --save-weights " +
                    path("dw.st") + " --json " + path("d.json"));
  ASSERT_EQ(dist.code, 0) << dist.out << dist.err;
  auto lj = nlohmann::json::parse(slurp(path("l.json"))), dj = nlohmann::json::parse(slurp(path("d.json")));
  ASSERT_EQ(lj["loss"].size(), 20u);
  EXPECT_EQ(lj["loss"], dj["loss"]);
  EXPECT_EQ(lj["comm"]["gather"], dj["comm"]["gather"]);
  EXPECT_TRUE(same_bytes(path("lw.st"), path("dw.st"))) << "trained weights differ";
}

INSTANTIATE_TEST_SUITE_P(Models, LaunchParity,
                         ::testing::Values(Case{"tiny.yaml", 2, "--set run.tokens=128"},
                                           Case{"tiny.yaml", 4, "--set run.tokens=128"},
                                           Case{"sp-fallback.yaml", 2, ""},
                                           Case{"sp-fallback.yaml", 4, ""}),
                         [](const auto& info) {
                           return std::string(info.param.model).substr(0, info.param.model[0] == 't' ? 4 : 11) ==
                                          "tiny"
                                      ? "tiny_tp" + std::to_string(info.param.tp)
                                      : "sp_fallback_tp" + std::to_string(info.param.tp);
                         });

// The ranks' process ids, children of the launcher, with their RANK.
std::vector<std::pair<pid_t, int>> ranks_of(pid_t launcher) {
  std::vector<std::pair<pid_t, int>> out;
  std::string kids = slurp("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children");
  for (size_t at = 0; at < kids.size();) {
    size_t end = kids.find(' ', at);
    if (end == std::string::npos) end = kids.size();
    if (end > at) {
      const pid_t pid = std::stoi(kids.substr(at, end - at));
      std::string env = slurp("/proc/" + std::to_string(pid) + "/environ");
      for (size_t e = 0; e < env.size(); e = env.find('\0', e) + 1) {
        if (env.compare(e, 5, "RANK=") == 0) out.push_back({pid, std::atoi(env.c_str() + e + 5)});
        if (env.find('\0', e) == std::string::npos) break;
      }
    }
    at = end + 1;
  }
  return out;
}

TEST_F(LaunchCli, ARankKilledMidRunStopsEveryRankWithoutOutput) {
  const std::string out = path("out.st"), log = path("launch.out"), err = path("launch.err");
  const std::string port = std::to_string(test::free_port());
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    const int o = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execl(exe_.c_str(), exe_.c_str(), "launch", "-n", "2", "--master-port", port.c_str(), "--", "teengine", "run",
            model("tiny.yaml").c_str(), "--set", "run.device=cpu", "--set", "run.mode=train", "--set",
            "run.steps=100000", "--set", "run.tokens=128", "--set", "parallel.comm=gloo", "--set",
            "parallel.timeout_s=10", "--output", out.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until training runs, then SIGKILL rank 1.
  const auto t0 = Clock::now();
  while (slurp(log).find("step 3/") == std::string::npos && Clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_NE(slurp(log).find("step 3/"), std::string::npos) << slurp(err);
  pid_t victim = -1;
  for (auto [pid, rank] : ranks_of(launcher))
    if (rank == 1) victim = pid;
  ASSERT_GT(victim, 0);
  const auto killed = Clock::now();
  ::kill(victim, SIGKILL);
  int status = 0;
  while (::waitpid(launcher, &status, WNOHANG) == 0 && Clock::now() - killed < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto took = Clock::now() - killed;
  if (!WIFEXITED(status) && !WIFSIGNALED(status)) {
    ::kill(launcher, SIGKILL);
    ::waitpid(launcher, &status, 0);
    FAIL() << "the launcher did not exit within 30 s of rank 1's death\n" << slurp(err);
  }
  EXPECT_LT(took, std::chrono::seconds(15)) << "timeout is 10 s";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(slurp(err).find("rank 1"), std::string::npos) << slurp(err);
  EXPECT_FALSE(std::filesystem::exists(out));
  for (const auto& f : std::filesystem::directory_iterator(dir_))
    EXPECT_EQ(f.path().filename().string().find("out.st"), std::string::npos) << f.path();
}

// Under any launcher (here: none, the variables set by hand) the surviving rank itself names the dead one.
TEST_F(LaunchCli, ASurvivingRankNamesTheRankThatDied) {
  const std::string env = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(test::free_port());
  const std::string args = "'" + exe_ + "' run " + model("tiny.yaml") + " --set run.device=cpu --set run.mode=train " +
                           "--set run.steps=100000 --set run.tokens=128 --set parallel.comm=gloo " +
                           "--set parallel.timeout_s=10 --output " + path("out.st");
  const std::string script = "cd '" + dir_.string() + "'; " + env + " RANK=1 " + args + " >r1 2>&1 & r1=$!; " + env +
                             " RANK=0 " + args + " >r0 2>e0 & r0=$!; "
                             "for i in $(seq 600); do grep -q 'step 3/' r0 && break; sleep 0.05; done; "
                             "kill -9 $r1; start=$(date +%s%N); wait $r0; echo rc=$? ms=$(( ($(date +%s%N) - start) / 1000000 )) >rc";
  std::ofstream(dir_ / "kill.sh") << script << "\n";
  ASSERT_EQ(std::system(("bash '" + path("kill.sh") + "'").c_str()), 0);
  const std::string rc = slurp(dir_ / "rc"), err = slurp(dir_ / "e0");
  ASSERT_EQ(rc.find("rc=0"), std::string::npos) << rc << err;
  const int ms = std::atoi(rc.c_str() + rc.find("ms=") + 3);
  EXPECT_LT(ms, 10000) << rc;
  EXPECT_NE(err.find("rank 1 exited"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(path("out.st")));
}

// Checkpoints over Gloo: 2 steps, a checkpoint gathered to rank 0, 2 more steps resumed in new processes == 4
// steps straight, byte for byte; the same checkpoint resumed on the local communicator gives the same weights.
TEST_F(LaunchCli, CheckpointResumeMatchesTheUninterruptedRun) {
  const std::string args = "run " + model("tiny.yaml") +
                           " --set run.device=cpu --set run.mode=train --set model.layers=1 --set run.tokens=64"
                           " --set parallel.timeout_s=60 ";
  const std::string gloo = args + "--set parallel.comm=gloo ";
  Result a = run(launch(2) + gloo + "--set run.steps=4 --save-weights " + path("a.st") + " --json " + path("a.json"));
  ASSERT_EQ(a.code, 0) << a.out << a.err;
  Result b = run(launch(2) + gloo + "--set run.steps=2 --checkpoint-dir " + path("ck"));
  ASSERT_EQ(b.code, 0) << b.out << b.err;
  Result c = run(launch(2) + gloo + "--set run.steps=4 --resume " + path("ck") + " --save-weights " + path("c.st") +
                 " --json " + path("c.json"));
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  EXPECT_TRUE(same_bytes(path("a.st"), path("c.st"))) << "resumed weights differ";
  const auto la = nlohmann::json::parse(slurp(path("a.json")))["loss"].get<std::vector<float>>();
  const auto lc = nlohmann::json::parse(slurp(path("c.json")))["loss"].get<std::vector<float>>();
  ASSERT_EQ(la.size(), 4u);
  EXPECT_EQ(lc, std::vector<float>(la.begin() + 2, la.end()));
  Result l = run(args + "--set parallel.comm=local --set run.steps=4 --resume " + path("ck") + " --save-weights " +
                 path("l.st"));
  ASSERT_EQ(l.code, 0) << l.out << l.err;
  EXPECT_TRUE(same_bytes(path("a.st"), path("l.st"))) << "the Gloo checkpoint resumed locally differs";
}

TEST_F(LaunchCli, TpDifferentFromWorldSizeNamesTheFix) {
  Result r = run(launch(2) + "run " + model("tiny.yaml") + " --set run.device=cpu --set parallel.tp=4");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("WORLD_SIZE=2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("launch -n 4"), std::string::npos) << r.err;
}

TEST_F(LaunchCli, LocalCommUnderALauncherIsRefused) {
  Result r = run(launch(2) + "run " + model("tiny.yaml") + " --set run.device=cpu --set parallel.comm=local");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("independent copies"), std::string::npos) << r.err;
}

TEST_F(LaunchCli, GlooWithoutALauncherNamesTheLauncher) {
  Result r = run("run " + model("tiny.yaml") + " --set run.device=cpu --set parallel.comm=gloo");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("teengine launch -n 2"), std::string::npos) << r.err;
}

TEST_F(LaunchCli, APortInUseIsRefused) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ::listen(fd, 1);
  socklen_t len = sizeof(sa);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  const std::string port = std::to_string(ntohs(sa.sin_port));
  Result r = run("launch -n 2 --master-port " + port + " -- teengine run " + model("tiny.yaml") +
                 " --set run.device=cpu --set parallel.comm=gloo --set parallel.timeout_s=5");
  ::close(fd);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(port), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in use"), std::string::npos) << r.err;
}

TEST_F(LaunchCli, ARankThatNeverStartsIsNamedWithinTheTimeout) {
  // Rank 0 of 2, started by hand; rank 1 never comes.
  const std::string env = "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                          std::to_string(test::free_port()) + " ";
  const std::string cmd = env + "'" + exe_ + "' run " + model("tiny.yaml") +
                          " --set run.device=cpu --set parallel.comm=gloo --set parallel.timeout_s=2 >'" +
                          path("o") + "' 2>'" + path("e") + "'";
  const auto t1 = Clock::now();
  const int st = std::system(cmd.c_str());
  EXPECT_LT(Clock::now() - t1, std::chrono::seconds(10));
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_NE(WEXITSTATUS(st), 0);
  const std::string err = slurp(path("e"));
  EXPECT_NE(err.find("rank(s) 1"), std::string::npos) << err;
}

}  // namespace
}  // namespace te
