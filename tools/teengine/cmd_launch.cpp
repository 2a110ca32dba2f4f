// `teengine launch [--nnodes M --node-rank R] -n N -- COMMAND…`: a torchrun-style launcher. Starts N copies of
// COMMAND on this node, one per local rank, for any multi-process communicator (parallel.comm nccl, gloo or auto).
// Each rank gets RANK = R·N + local, WORLD_SIZE = M·N, LOCAL_RANK, LOCAL_WORLD_SIZE = N, GROUP_RANK = NODE_RANK = R,
// MASTER_ADDR, MASTER_PORT, TEENGINE_JOB_TOKEN (the rendezvous refuses peers presenting another token) and
// NCCL_NVLS_ENABLE=0 unless set. Run it once per node with the same --nnodes, --master-addr/--master-port and token.
//
// Lifetime: the ranks stay in the launcher's process group (a terminal Ctrl-C reaches all of them) and die with it
// (PR_SET_PDEATHSIG), even when the launcher is SIGKILLed. SIGINT/SIGTERM/SIGHUP sent to the launcher are forwarded.
// When a rank fails (non-zero exit or a signal) the others get SIGTERM, so they do not wait out their timeout, and
// whatever is still alive --grace-s seconds after a SIGTERM or a forwarded signal is SIGKILLed. The exit code is the
// first failure's (128+signal for a signal), else 128+signal if the launcher was interrupted, else 0.
//
// The launcher is single-threaded and handles signals synchronously: SIGCHLD, SIGINT, SIGTERM and SIGHUP are blocked
// before the first fork and collected with sigtimedwait(), so there is no async handler and no busy loop.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tools/teengine/commands.h"

namespace te::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxProcs = 1024;  // ranks per node
constexpr const char* kTokenEnv = "TEENGINE_JOB_TOKEN";

struct LaunchArgs {
  int nproc = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double grace_s = 5.0;
  std::vector<std::string> command;
};

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

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// Validates the flags; prints a message naming the flag and returns false on the first bad one.
bool validate(const LaunchArgs& a) {
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "teengine launch: %s\n", msg.c_str());
    return false;
  };
  if (a.nproc < 1 || a.nproc > kMaxProcs)
    return fail("-n/--nproc must be in 1.." + std::to_string(kMaxProcs) + " (got " + std::to_string(a.nproc) + ")");
  if (a.nnodes < 1) return fail("--nnodes must be at least 1 (got " + std::to_string(a.nnodes) + ")");
  if (static_cast<long long>(a.nnodes) * a.nproc > INT_MAX)
    return fail("--nnodes × -n must fit in an int (got " + std::to_string(a.nnodes) + " × " + std::to_string(a.nproc) +
                ")");
  if (a.node_rank < 0 || a.node_rank >= a.nnodes)
    return fail("--node-rank must be in 0..--nnodes−1 = 0.." + std::to_string(a.nnodes - 1) + " (got " +
                std::to_string(a.node_rank) + ")");
  if (a.master_port < 1 || a.master_port > 65535)
    return fail("--master-port must be in 1..65535 (got " + std::to_string(a.master_port) + ")");
  if (!(a.grace_s >= 0.0) || !std::isfinite(a.grace_s) || a.grace_s > 86400.0)
    return fail("--grace-s must be in 0..86400 seconds (got " + std::to_string(a.grace_s) + ")");
  if (a.command.empty()) return fail("no command (usage: teengine launch -n N -- teengine run model.yaml)");
  return true;
}

// A random 128-bit token as 32 lowercase hex digits; empty if no randomness is available.
std::string random_token() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t k = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += static_cast<size_t>(k);
  }
  if (got < sizeof(bytes)) {  // getrandom(2) unavailable (old kernel, seccomp): fall back to /dev/urandom
    FILE* f = std::fopen("/dev/urandom", "rb");
    got = f ? std::fread(bytes, 1, sizeof(bytes), f) : 0;
    if (f) std::fclose(f);
    if (got < sizeof(bytes)) return "";
  }
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

// The job token the ranks get: TEENGINE_JOB_TOKEN if set and non-empty, else a fresh random one on a single node.
// Returns false (after printing why) when none can be had.
bool job_token(const LaunchArgs& a, std::string* token) {
  const char* env = std::getenv(kTokenEnv);
  if (env && *env) {
    *token = env;
    return true;
  }
  if (a.nnodes > 1) {
    std::fprintf(stderr,
                 "teengine launch: --nnodes %d needs the same %s on every node; generate one and export it on "
                 "all of them, e.g.\n  export %s=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \\n')\n",
                 a.nnodes, kTokenEnv, kTokenEnv);
    return false;
  }
  *token = random_token();
  if (token->empty()) {
    std::fprintf(stderr,
                 "teengine launch: cannot generate a job token (getrandom and /dev/urandom failed); export %s\n",
                 kTokenEnv);
    return false;
  }
  return true;
}

// Node 0 only: whether MASTER_ADDR:MASTER_PORT is already taken, tried the way rank 0's rendezvous binds it (IPv4,
// SO_REUSEADDR). Only EADDRINUSE counts: an address that does not resolve or is not local to this host (EADDRNOTAVAIL,
// …) skips the check and is left to the rendezvous to report.
bool master_port_in_use(const std::string& addr, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (::getaddrinfo(addr.c_str(), nullptr, &hints, &res) != 0 || !res) return false;
    sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    ::freeaddrinfo(res);
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool in_use = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return in_use;
}

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0; }

// In the forked child: the rank's environment, default signal handling, death with the launcher, then exec.
[[noreturn]] void exec_rank(const LaunchArgs& a, const std::vector<std::string>& cmd, const std::string& token,
                            int local, pid_t launcher, const sigset_t& old_mask) {
  // Die with the launcher, even if it is SIGKILLed; if it already died between fork() and prctl(), the signal
  // would never come, so check that our parent is still the launcher.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(128 + SIGKILL);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) ::signal(sig, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  const int rank = a.node_rank * a.nproc + local;
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(a.nnodes * a.nproc).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(a.nproc).c_str(), 1);
  ::setenv("GROUP_RANK", std::to_string(a.node_rank).c_str(), 1);
  ::setenv("NODE_RANK", std::to_string(a.node_rank).c_str(), 1);
  ::setenv("MASTER_ADDR", a.master_addr.c_str(), 1);
  ::setenv("MASTER_PORT", std::to_string(a.master_port).c_str(), 1);
  ::setenv(kTokenEnv, token.c_str(), 1);
  ::setenv("NCCL_NVLS_ENABLE", "0", 0);
  std::vector<char*> argv;
  for (auto& s : cmd) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr, "teengine launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
  ::_exit(127);
}

// The running ranks of this node and the state of stopping them.
class Ranks {
 public:
  Ranks(int first_rank, double grace_s) : first_rank_(first_rank), grace_(std::chrono::duration<double>(grace_s)) {}

  void add(pid_t pid) {
    pids_.push_back(pid);
    ++alive_;
  }
  int alive() const { return alive_; }

  void signal_all(int sig) {
    for (pid_t p : pids_)
      if (p > 0) ::kill(p, sig);  // unreaped pids (zombies included) cannot have been reused
  }

  // Sends `sig` to every live rank and starts the grace period (once) after which they are SIGKILLed.
  void stop(int sig) {
    signal_all(sig);
    if (!stopping_) {
      stopping_ = true;
      kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(grace_);
    }
  }

  // Reaps every rank that has exited; the first failure stops the others and sets the launcher's exit code.
  void reap() {
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid < 0 && errno == EINTR) continue;
      if (pid < 0 && errno == ECHILD) {  // no children left (cannot happen unless someone else reaped them)
        std::fill(pids_.begin(), pids_.end(), -1);
        alive_ = 0;
      }
      if (pid <= 0) return;  // none exited yet, or no children left
      int local = -1;
      for (size_t i = 0; i < pids_.size(); ++i)
        if (pids_[i] == pid) local = static_cast<int>(i);
      if (local < 0) continue;
      pids_[local] = -1;
      --alive_;
      const int code = exit_code_of(status);
      if (code == 0 || first_failure_ != 0 || stopping_) continue;  // ranks stopped by us are not failures
      first_failure_ = code;
      const int rank = first_rank_ + local;
      const char* tail = alive_ > 0 ? "; stopping the other ranks" : "";
      if (WIFSIGNALED(status))
        std::fprintf(stderr, "teengine launch: rank %d was killed by signal %d (%s)%s\n", rank, WTERMSIG(status),
                     signal_name(WTERMSIG(status)).c_str(), tail);
      else
        std::fprintf(stderr, "teengine launch: rank %d exited with code %d%s\n", rank, code, tail);
      stop(SIGTERM);
    }
  }

  // SIGKILLs whatever outlived the grace period.
  void kill_stragglers() {
    if (!stopping_ || killed_ || Clock::now() < kill_at_) return;
    killed_ = true;
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (pids_[i] <= 0) continue;
      std::fprintf(stderr, "teengine launch: rank %d still running %gs after being asked to stop; sending SIGKILL\n",
                   first_rank_ + static_cast<int>(i), grace_.count());
      ::kill(pids_[i], SIGKILL);
    }
  }

  // How long to wait for the next signal: until the SIGKILL deadline while stopping, capped so that a lost wakeup
  // costs at most one second.
  timespec next_wait() const {
    auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::seconds(1));
    if (stopping_ && !killed_) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(kill_at_ - Clock::now());
      wait = std::max(std::chrono::nanoseconds(std::chrono::milliseconds(1)), std::min(wait, left));
    }
    return timespec{static_cast<time_t>(wait.count() / 1000000000), static_cast<long>(wait.count() % 1000000000)};
  }

  void fail(int code) {
    if (first_failure_ == 0) first_failure_ = code;
  }
  int first_failure() const { return first_failure_; }

 private:
  std::vector<pid_t> pids_;  // by local rank; -1 once reaped
  int alive_ = 0;
  int first_rank_;
  std::chrono::duration<double> grace_;
  bool stopping_ = false, killed_ = false;
  Clock::time_point kill_at_{};
  int first_failure_ = 0;
};

int run_launch(const LaunchArgs& a) {
  if (!validate(a)) return 2;
  std::string token;
  if (!job_token(a, &token)) return 2;
  if (a.nnodes > 1 && is_loopback(a.master_addr))
    std::fprintf(stderr,
                 "teengine launch: warning: --master-addr %s with --nnodes %d: ranks on other hosts cannot reach "
                 "it; pass node 0's address\n",
                 a.master_addr.c_str(), a.nnodes);
  if (a.node_rank == 0 && master_port_in_use(a.master_addr, a.master_port)) {
    std::fprintf(stderr, "teengine launch: MASTER_PORT %d on %s is in use; pick a free port with --master-port\n",
                 a.master_port, a.master_addr.c_str());
    return 2;
  }
  // `teengine` as the command means this very binary, whether or not it is on PATH.
  std::vector<std::string> cmd = a.command;
  if (cmd[0] == "teengine") cmd[0] = self_exe();

  // Block the signals we wait for before the first fork, so none is lost between fork() and sigtimedwait(). Their
  // dispositions must not be SIG_IGN (SIGCHLD ignored would auto-reap the ranks; a launcher started with `&` by a
  // shell inherits SIGINT ignored and would never forward it).
  sigset_t waited, old_mask;
  sigemptyset(&waited);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) {
    sigaddset(&waited, sig);
    ::signal(sig, SIG_DFL);
  }
  ::sigprocmask(SIG_BLOCK, &waited, &old_mask);

  Ranks ranks(a.node_rank * a.nproc, a.grace_s);
  const pid_t launcher = ::getpid();
  std::fflush(nullptr);
  sigset_t stop_signals = waited;
  sigdelset(&stop_signals, SIGCHLD);
  int interrupted_by = 0;
  for (int local = 0; local < a.nproc; ++local) {
    const timespec no_wait{};
    const int sig = ::sigtimedwait(&stop_signals, nullptr, &no_wait);
    if (sig > 0) {  // interrupted while starting: stop the ranks started so far, start no more
      interrupted_by = sig;
      ranks.stop(sig);
      break;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "teengine launch: fork for local rank %d: %s; stopping the other ranks\n", local,
                   std::strerror(errno));
      ranks.fail(1);
      ranks.stop(SIGTERM);
      break;
    }
    if (pid == 0) exec_rank(a, cmd, token, local, launcher, old_mask);
    ranks.add(pid);
  }

  while (ranks.alive() > 0) {
    ranks.reap();
    if (ranks.alive() == 0) break;
    ranks.kill_stragglers();
    const timespec wait = ranks.next_wait();
    siginfo_t info{};
    const int sig = ::sigtimedwait(&waited, &info, &wait);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      if (interrupted_by == 0) interrupted_by = sig;
      ranks.stop(sig);  // forward every one; the first starts the grace period
    }
    // SIGCHLD, a timeout (EAGAIN) or EINTR: reap and check the deadline at the top of the loop.
  }
  // Drop what arrived after the last rank was reaped, so that unblocking cannot kill the launcher and replace the
  // exit code.
  const timespec no_wait{};
  while (::sigtimedwait(&waited, nullptr, &no_wait) > 0) {
  }
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  if (ranks.first_failure() != 0) return ranks.first_failure();
  return interrupted_by != 0 ? 128 + interrupted_by : 0;
}

}  // namespace

Command add_launch_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "launch",
      "Start N ranks on this node (torchrun-style) for the multi-process communicators (parallel.comm nccl, gloo "
      "or auto): teengine launch -n N -- teengine run …; multi-node: run it on every node with --nnodes M "
      "--node-rank R --master-addr NODE0 and the same exported TEENGINE_JOB_TOKEN. Each rank gets RANK, "
      "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK/NODE_RANK, MASTER_ADDR, MASTER_PORT and "
      "TEENGINE_JOB_TOKEN (random on a single node unless set). A failed rank stops the others; the exit code is "
      "the first failure's (128+signal if killed)");
  auto args = std::make_shared<LaunchArgs>();
  sub->add_option("-n,--nproc", args->nproc, "Number of ranks on this node (LOCAL_WORLD_SIZE), one per GPU")
      ->required();
  sub->add_option("--nnodes", args->nnodes, "Number of nodes; WORLD_SIZE = nnodes × nproc")->capture_default_str();
  sub->add_option("--node-rank", args->node_rank,
                  "This node's index in 0..nnodes−1 (GROUP_RANK, NODE_RANK); RANK = node-rank × nproc + LOCAL_RANK")
      ->capture_default_str();
  sub->add_option("--master-addr", args->master_addr,
                  "Address rank 0 listens on (MASTER_ADDR); with --nnodes > 1, node 0's address reachable from all")
      ->capture_default_str();
  sub->add_option("--master-port", args->master_port,
                  "TCP port rank 0 listens on (MASTER_PORT); node 0 checks that it is free before starting")
      ->capture_default_str();
  sub->add_option("--grace-s", args->grace_s,
                  "Seconds the ranks get to exit after SIGTERM (a rank failed) or a forwarded SIGINT/SIGTERM/SIGHUP "
                  "before they are SIGKILLed")
      ->capture_default_str();
  sub->add_option("command", args->command, "The command each rank runs (after --); `teengine` means this binary")
      ->required();
  return {sub, [args] { return run_launch(*args); }};
}

}  // namespace te::cli
