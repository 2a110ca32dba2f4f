// `teengine launch`: every rank gets its environment (single- and multi-node rank arithmetic, the job token), node
// 0 refuses a MASTER_PORT in use, the first non-zero exit code is returned, a failed rank stops the others (SIGKILL
// after --grace-s for a rank that ignores SIGTERM), and the ranks die with the launcher even when it is SIGKILLed.
// Every command runs under `timeout`, and every wait is bounded: no test can hang.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/free_port.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string bin() {  // set by meson test (tests/comm/meson.build)
  const char* b = std::getenv("TEENGINE_BIN");
  return b && ::access(b, X_OK) == 0 ? b : "";
}

// Runs `cmd` through sh under `timeout` (so a hung launcher fails the test instead of hanging it; SIGKILL 2 s after
// the SIGTERM); returns the exit code (124 on timeout) and stdout (append 2>&1 to capture stderr too).
int run(const std::string& cmd, std::string* out = nullptr, int limit_s = 60) {
  FILE* p = ::popen(("timeout -k 2 " + std::to_string(limit_s) + " " + cmd).c_str(), "r");
  if (!p) return -1;
  char buf[256];
  std::string s;
  while (std::fgets(buf, sizeof(buf), p)) s += buf;
  int st = ::pclose(p);
  if (out) *out = s;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// The launcher with TEENGINE_JOB_TOKEN removed from its environment (the test may itself run under a launcher).
std::string launch() { return "env -u TEENGINE_JOB_TOKEN " + bin() + " launch"; }

std::string port_flag() { return " --master-port " + std::to_string(te::test::free_port()) + " "; }

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

// A temporary directory, removed with its files.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/teengine-launch-XXXXXX";
    path = ::mkdtemp(tmpl) ? tmpl : "";
  }
  ~TempDir() {
    if (!path.empty()) std::system(("rm -rf '" + path + "'").c_str());
  }
};

// The pid a rank wrote to `file`, or -1 if not there (yet).
pid_t read_pid(const std::string& file) {
  std::ifstream in(file);
  long pid = -1;
  return in >> pid ? static_cast<pid_t>(pid) : -1;
}

// Gone: no such process, or a zombie waiting for init to reap it.
bool is_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(stat)), {});
  const size_t paren = all.rfind(')');
  return paren != std::string::npos && paren + 2 < all.size() && all[paren + 2] == 'Z';
}

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// The launcher forked and exec'd in the background (stdout/stderr to `log`), so the test can signal it.
pid_t start_launcher(const std::vector<std::string>& args, const std::string& log) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (f) ::dup2(::fileno(stdout), STDERR_FILENO);
    ::unsetenv("TEENGINE_JOB_TOKEN");
    std::vector<std::string> all = {bin(), "launch"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : all) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// Waits (bounded) for the launcher to exit; returns its exit code, or -1 after SIGKILLing it on timeout.
int wait_launcher(pid_t pid, std::chrono::milliseconds limit) {
  int status = 0;
  const bool exited = wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, limit);
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

#define REQUIRE_BIN() \
  if (bin().empty()) GTEST_SKIP() << "TEENGINE_BIN is not set or not built"

TEST(Launch, SetsTheRendezvousEnvironment) {
  REQUIRE_BIN();
  std::string out;
  const int rc = run(launch() +
                         " -n 3 --master-port 29611 -- sh -c "
                         "'echo R=$RANK L=$LOCAL_RANK W=$WORLD_SIZE LW=$LOCAL_WORLD_SIZE G=$GROUP_RANK "
                         "NR=$NODE_RANK A=$MASTER_ADDR P=$MASTER_PORT N=$NCCL_NVLS_ENABLE T=${#TEENGINE_JOB_TOKEN}'",
                     &out);
  EXPECT_EQ(rc, 0) << out;
  for (int r = 0; r < 3; ++r) {
    const std::string line =
        "R=" + std::to_string(r) + " L=" + std::to_string(r) + " W=3 LW=3 G=0 NR=0 A=127.0.0.1 P=29611 N=0 T=32";
    EXPECT_NE(out.find(line), std::string::npos) << out;
  }
}

TEST(Launch, MultiNodeRankArithmetic) {
  REQUIRE_BIN();
  std::string out;
  const int rc = run("env TEENGINE_JOB_TOKEN=0123456789abcdef0123456789abcdef " + bin() +
                         " launch --nnodes 2 --node-rank 1 -n 2 --master-addr 10.0.0.1 --master-port 29612 -- sh -c "
                         "'echo R=$RANK L=$LOCAL_RANK W=$WORLD_SIZE LW=$LOCAL_WORLD_SIZE G=$GROUP_RANK NR=$NODE_RANK "
                         "A=$MASTER_ADDR P=$MASTER_PORT'",
                     &out);
  EXPECT_EQ(rc, 0) << out;
  for (int local = 0; local < 2; ++local) {
    const std::string line =
        "R=" + std::to_string(2 + local) + " L=" + std::to_string(local) + " W=4 LW=2 G=1 NR=1 A=10.0.0.1 P=29612";
    EXPECT_NE(out.find(line), std::string::npos) << out;
  }
  EXPECT_EQ(lines_of(out).size(), 2u) << out;
}

TEST(Launch, MultiNodeNeedsAnExportedToken) {
  REQUIRE_BIN();
  std::string out;
  const int rc = run(launch() + " --nnodes 2 --node-rank 0 -n 1 --master-addr 10.0.0.1 -- echo started 2>&1", &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("export TEENGINE_JOB_TOKEN="), std::string::npos) << out;
  EXPECT_NE(out.find("every node"), std::string::npos) << out;
  EXPECT_EQ(out.find("started"), std::string::npos) << "no rank may start: " << out;
  // An empty token counts as none.
  EXPECT_EQ(run("env TEENGINE_JOB_TOKEN= " + bin() + " launch --nnodes 2 -n 1 -- true 2>/dev/null"), 2);
}

TEST(Launch, GeneratesOneRandomTokenPerJob) {
  REQUIRE_BIN();
  auto tokens = [](std::string* out) {
    const int rc = run(launch() + port_flag() + "-n 3 -- sh -c 'echo $TEENGINE_JOB_TOKEN'", out);
    EXPECT_EQ(rc, 0) << *out;
    const auto lines = lines_of(*out);
    return std::set<std::string>(lines.begin(), lines.end());
  };
  std::string out1, out2;
  const auto t1 = tokens(&out1), t2 = tokens(&out2);
  ASSERT_EQ(lines_of(out1).size(), 3u) << out1;
  ASSERT_EQ(t1.size(), 1u) << "every rank must get the same token:\n" << out1;
  const std::string token = *t1.begin();
  EXPECT_EQ(token.size(), 32u) << token;
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
  ASSERT_EQ(t2.size(), 1u) << out2;
  EXPECT_NE(*t2.begin(), token) << "two jobs got the same token";
}

TEST(Launch, PassesAnExistingTokenThrough) {
  REQUIRE_BIN();
  std::string out;
  const int rc = run("env TEENGINE_JOB_TOKEN=my-shared-secret " + bin() + " launch" + port_flag() +
                         "-n 2 -- sh -c 'echo T=$TEENGINE_JOB_TOKEN'",
                     &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "T=my-shared-secret\nT=my-shared-secret\n");
}

TEST(Launch, RefusesAMasterPortInUse) {
  REQUIRE_BIN();
  int busy = 0;
  const int fd = te::test::listening_socket(&busy);
  ASSERT_GE(fd, 0);
  const std::string port = std::to_string(busy);
  std::string out;
  const int rc = run(launch() + " -n 2 --master-port " + port + " -- echo started 2>&1", &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("MASTER_PORT " + port + " on 127.0.0.1 is in use"), std::string::npos) << out;
  EXPECT_NE(out.find("--master-port"), std::string::npos) << out;
  EXPECT_EQ(out.find("started"), std::string::npos) << "no rank may start: " << out;
  // Only node 0 binds MASTER_PORT: another node does not check it.
  EXPECT_EQ(run("env TEENGINE_JOB_TOKEN=t " + bin() + " launch --nnodes 2 --node-rank 1 -n 1 --master-port " + port +
                " -- true 2>/dev/null"),
            0);
  ::close(fd);
  // An address that is not local to this host (TEST-NET-1) skips the check instead of failing.
  EXPECT_EQ(run(launch() + " -n 1 --master-addr 192.0.2.1" + port_flag() + "-- true"), 0);
}

TEST(Launch, ValidatesTheFlags) {
  REQUIRE_BIN();
  const std::pair<const char*, const char*> cases[] = {
      {"--nnodes 0 -n 1", "--nnodes"},           {"--nnodes 2 --node-rank 2 -n 1", "--node-rank"},
      {"--node-rank=-1 -n 1", "--node-rank"},    {"-n 0", "--nproc"},
      {"-n 1 --master-port 0", "--master-port"}, {"-n 1 --master-port 65536", "--master-port"},
      {"-n 1 --grace-s=-1", "--grace-s"},
  };
  for (const auto& [flags, named] : cases) {
    std::string out;
    const int rc = run("env TEENGINE_JOB_TOKEN=t " + bin() + " launch " + flags + " -- echo started 2>&1", &out);
    EXPECT_EQ(rc, 2) << flags << "\n" << out;
    EXPECT_NE(out.find(named), std::string::npos) << flags << "\n" << out;
    EXPECT_EQ(out.find("started"), std::string::npos) << flags << "\n" << out;
  }
}

TEST(Launch, ReturnsTheFirstFailureAndStopsTheOthers) {
  REQUIRE_BIN();
  const auto t0 = Clock::now();
  std::string out;
  const int rc =
      run(launch() + port_flag() + "-n 3 -- sh -c 'if [ $RANK = 1 ]; then exit 7; fi; exec sleep 30' 2>&1", &out);
  EXPECT_EQ(rc, 7) << out;
  EXPECT_NE(out.find("teengine launch: rank 1 exited with code 7; stopping the other ranks"), std::string::npos) << out;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(run(launch() + port_flag() + "-n 2 -- true"), 0);
  EXPECT_EQ(run(launch() + port_flag() + "-n 2 -- /nonexistent/teengine-binary 2>/dev/null"), 127);
  // A rank killed by a signal: 128 + signal, and the message names it.
  const int rc9 =
      run(launch() + port_flag() + "-n 2 -- sh -c 'if [ $RANK = 0 ]; then kill -9 $$; fi; exec sleep 30' 2>&1", &out);
  EXPECT_EQ(rc9, 128 + 9) << out;
  EXPECT_NE(out.find("rank 0 was killed by signal 9 (SIGKILL); stopping the other ranks"), std::string::npos) << out;
}

TEST(Launch, KillsARankThatIgnoresSigtermAfterTheGracePeriod) {
  REQUIRE_BIN();
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  // Rank 1 ignores SIGTERM (its short sleeps inherit that) and says so; rank 0 then fails.
  const std::string script = "if [ $RANK = 1 ]; then trap \"\" TERM; touch " + dir.path +
                             "/ready; while :; do sleep 0.1; done; fi; "
                             "i=0; while [ ! -e " +
                             dir.path + "/ready ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; exit 5";
  const auto t0 = Clock::now();
  std::string out;
  const int rc = run(launch() + port_flag() + "-n 2 --grace-s 1 -- sh -c '" + script + "' 2>&1", &out, 8);
  const auto took = Clock::now() - t0;
  EXPECT_EQ(rc, 5) << out;
  EXPECT_NE(out.find("rank 0 exited with code 5; stopping the other ranks"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 still running"), std::string::npos) << out;
  EXPECT_NE(out.find("SIGKILL"), std::string::npos) << out;
  EXPECT_GE(took, std::chrono::milliseconds(900)) << "SIGKILL came before the grace period: " << out;
  EXPECT_LT(took, std::chrono::seconds(5)) << out;
}

TEST(Launch, RanksDieWithASigkilledLauncher) {
  REQUIRE_BIN();
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string log = dir.path + "/log";
  // Each rank writes its pid, then becomes `sleep` under that same pid.
  const pid_t launcher = start_launcher(
      {"-n", "2", "--master-port", std::to_string(te::test::free_port()), "--", "sh", "-c",
       "echo $$ > " + dir.path + "/$RANK.tmp && mv " + dir.path + "/$RANK.tmp " + dir.path + "/$RANK; exec sleep 30"},
      log);
  ASSERT_GT(launcher, 0);
  pid_t pids[2] = {-1, -1};
  const bool started = wait_until(
      [&] {
        for (int r = 0; r < 2; ++r) pids[r] = read_pid(dir.path + "/" + std::to_string(r));
        return pids[0] > 0 && pids[1] > 0;
      },
      std::chrono::seconds(10));
  ::kill(launcher, SIGKILL);
  EXPECT_EQ(wait_launcher(launcher, std::chrono::seconds(5)), 128 + SIGKILL);
  ASSERT_TRUE(started) << read_file(log);
  const bool gone = wait_until([&] { return is_gone(pids[0]) && is_gone(pids[1]); }, std::chrono::seconds(2));
  EXPECT_TRUE(gone) << "ranks " << pids[0] << " and " << pids[1] << " outlived the launcher";
  for (pid_t p : pids)
    if (!is_gone(p)) ::kill(p, SIGKILL);  // leave nothing behind
}

TEST(Launch, ForwardsSigtermThenKillsAfterTheGracePeriod) {
  REQUIRE_BIN();
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string log = dir.path + "/log";
  // Rank 0 ignores SIGTERM, rank 1 is killed by it.
  const std::string script = "if [ $RANK = 0 ]; then trap \"\" TERM; fi; echo $$ > " + dir.path + "/$RANK.tmp && mv " +
                             dir.path + "/$RANK.tmp " + dir.path + "/$RANK; while :; do sleep 0.1; done";
  const pid_t launcher = start_launcher(
      {"-n", "2", "--grace-s", "1", "--master-port", std::to_string(te::test::free_port()), "--", "sh", "-c", script}, log);
  ASSERT_GT(launcher, 0);
  pid_t pids[2] = {-1, -1};
  const bool started = wait_until(
      [&] {
        for (int r = 0; r < 2; ++r) pids[r] = read_pid(dir.path + "/" + std::to_string(r));
        return pids[0] > 0 && pids[1] > 0;
      },
      std::chrono::seconds(10));
  if (!started) ::kill(launcher, SIGKILL);
  const auto t0 = Clock::now();
  ::kill(launcher, SIGTERM);
  const int rc = wait_launcher(launcher, std::chrono::seconds(5));
  const auto took = Clock::now() - t0;
  ASSERT_TRUE(started) << read_file(log);
  EXPECT_EQ(rc, 128 + SIGTERM) << read_file(log);
  EXPECT_GE(took, std::chrono::milliseconds(900)) << read_file(log);
  EXPECT_LT(took, std::chrono::seconds(4)) << read_file(log);
  EXPECT_NE(read_file(log).find("rank 0 still running"), std::string::npos) << read_file(log);
  EXPECT_TRUE(is_gone(pids[0]) && is_gone(pids[1]));
}

}  // namespace
