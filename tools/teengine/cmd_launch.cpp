// `teengine launch -n N -- COMMAND…`: starts N copies of COMMAND on this host for the NCCL communicator, each with
// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (and NCCL_NVLS_ENABLE=0 unless set), forwards SIGINT/
// SIGTERM/SIGHUP to them, and returns the first non-zero exit code (the other ranks are then sent SIGTERM, so a
// failed rank does not leave its peers waiting out their timeout).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/teengine/commands.h"

namespace te::cli {
namespace {

constexpr int kMaxProcs = 1024;
volatile sig_atomic_t g_nchildren = 0;
pid_t g_children[kMaxProcs];

void forward_signal(int sig) {
  for (int i = 0; i < g_nchildren; ++i)
    if (g_children[i] > 0) ::kill(g_children[i], sig);
}

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "teengine";
  buf[n] = '\0';
  return buf;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

struct LaunchArgs {
  int nproc = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::vector<std::string> command;
};

int run_launch(const LaunchArgs& a) {
  if (a.nproc < 1 || a.nproc > kMaxProcs) {
    std::fprintf(stderr, "teengine launch: -n must be in 1..%d\n", kMaxProcs);
    return 2;
  }
  if (a.command.empty()) {
    std::fprintf(stderr, "teengine launch: no command (usage: teengine launch -n N -- teengine run model.yaml)\n");
    return 2;
  }
  // `teengine` as the command means this very binary, whether or not it is on PATH.
  std::vector<std::string> cmd = a.command;
  if (cmd[0] == "teengine") cmd[0] = self_exe();

  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);

  std::fflush(nullptr);
  for (int r = 0; r < a.nproc; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("teengine launch: fork");
      forward_signal(SIGTERM);
      break;
    }
    if (pid == 0) {
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(a.nproc).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(a.nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", a.master_addr.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(a.master_port).c_str(), 1);
      ::setenv("NCCL_NVLS_ENABLE", "0", 0);
      std::vector<char*> argv;
      for (auto& s : cmd) argv.push_back(const_cast<char*>(s.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "teengine launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
      ::_exit(127);
    }
    g_children[r] = pid;
    g_nchildren = r + 1;
  }

  int first_failure = 0, alive = g_nchildren;
  while (alive > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int rank = -1;
    for (int i = 0; i < g_nchildren; ++i)
      if (g_children[i] == pid) rank = i;
    if (rank < 0) continue;
    g_children[rank] = -1;
    --alive;
    const int code = exit_code_of(status);
    if (code != 0 && first_failure == 0) {
      first_failure = code;
      std::fprintf(stderr, "teengine launch: rank %d exited with code %d; stopping the other ranks\n", rank, code);
      forward_signal(SIGTERM);
    }
  }
  return first_failure;
}

}  // namespace

Command add_launch_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "launch", "Start N processes on this host for the NCCL communicator: teengine launch -n N -- teengine run …");
  auto args = std::make_shared<LaunchArgs>();
  sub->add_option("-n,--nproc", args->nproc, "Number of processes (ranks), one per GPU")->required();
  sub->add_option("--master-addr", args->master_addr, "Address rank 0 listens on (MASTER_ADDR)")
      ->capture_default_str();
  sub->add_option("--master-port", args->master_port, "TCP port rank 0 listens on (MASTER_PORT)")
      ->capture_default_str();
  sub->add_option("command", args->command, "The command each rank runs (after --)")->required();
  return {sub, [args] { return run_launch(*args); }};
}

}  // namespace te::cli
