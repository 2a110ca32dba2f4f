// A fixture that runs the built `teengine` (path in $TE_TEENGINE, set by meson test) in a scratch directory and
// captures exit code, stdout and stderr.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/model_path.h"

namespace te {

struct Result {
  int code;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* exe = std::getenv("TE_TEENGINE");
    if (!exe) GTEST_SKIP() << "TE_TEENGINE not set (meson test sets it)";
    exe_ = exe;
    // A parameterised test's name holds a '/': one directory per run, not a parent left behind.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = std::filesystem::temp_directory_path() / ("te_cli_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // The spec every CLI fixture runs: models/tiny.yaml.
  static std::string model() { return te::test::model_path("tiny.yaml"); }
  // `env`: variable assignments for this run only, e.g. "TEENGINE_LOG=debug".
  Result run(const std::string& args, const std::string& env = "") {
    const std::filesystem::path out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string cmd = env + " '" + exe_ + "' " + args + " >'" + out.string() + "' 2>'" + err.string() + "'";
    const int st = std::system(cmd.c_str());
    return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(out), slurp(err)};
  }
  std::string exe_;
  std::filesystem::path dir_;
};

}  // namespace te
