// Starts the built teengine-serve (path in $TE_SERVE_BIN) on 127.0.0.1 with a port the kernel picks (--port 0
// --port-file), waits until it listens, and stops it by signal. Used by the server tests and the load-generator test.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace te::test {

class ServeProcess {
 public:
  // `args` follow the model spec; --port and --port-file are added, and the model runs on the CPU (the tests compare
  // batched replies with lone ones byte for byte, which only the CPU GEMM promises).
  ServeProcess(const std::string& model, std::vector<std::string> args) {
    const char* bin = std::getenv("TE_SERVE_BIN");
    if (!bin) throw std::runtime_error("TE_SERVE_BIN not set (meson test sets it)");
    port_file_ = std::filesystem::temp_directory_path() /
                 ("te_serve_port_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::remove(port_file_);
    args.insert(args.begin(),
                {bin, model, "--set", "run.device=cpu", "--port", "0", "--port-file", port_file_.string()});
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin, argv.data());
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (port_ == 0) {
      std::ifstream f(port_file_);
      if (f >> port_) break;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("teengine-serve exited before listening");
      }
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("teengine-serve did not start");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove(port_file_);
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Sends `sig` and waits for the exit; returns the exit code (128 + signal if killed by one).
  int stop(int sig = SIGTERM) {
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path port_file_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace te::test
