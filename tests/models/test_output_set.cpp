// The CLI's output set (tools/teengine/output_set.h) on its own: all of the set or none of it reaches the targets,
// every temporary is unique and gone afterwards, and SIGINT/SIGTERM during a write removes the temporaries (the
// set's and write_safetensors' own) before the process dies of the signal.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "engine/error.h"
#include "engine/temp_files.h"
#include "tools/teengine/output_set.h"

namespace te::cli {
namespace {
namespace fs = std::filesystem;

class OutputSetTest : public ::testing::Test {
 protected:
  // A threadsafe death test runs the test again from its start in a child process, fixture included: the child takes
  // the parent's directory from the environment, or what it writes and removes would be where the parent never looks.
  static constexpr const char* kDirVariable = "TE_TEST_OUTPUT_SET_DIR";
  void SetUp() override {
    if (const char* parents = std::getenv(kDirVariable)) {
      dir_ = parents;
      return;
    }
    dir_ = fs::temp_directory_path() /
           ("te_output_set_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ::setenv(kDirVariable, dir_.c_str(), 1);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    ::unsetenv(kDirVariable);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::set<std::string> files() const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.insert(e.path().filename().string());
    return names;
  }
  static std::string slurp(const std::string& p) {
    std::ifstream f(p);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  fs::path dir_;
};

TEST_F(OutputSetTest, AFailedWriteLeavesThePreviousSetAndNoTemporary) {
  std::ofstream(path("m.json")) << "old json";
  std::ofstream(path("o.bin")) << "old output";
  {
    OutputSet set({{"--json", path("m.json"), true}, {"--output", path("o.bin")}}, {});
    set.stage_text("--json", "new json");
    EXPECT_THROW(set.stage("--output",
                           [](const std::string&) { TE_INPUT_ERROR("disk full while writing", "free space"); }),
                 InputError);
  }  // dropped without commit
  EXPECT_EQ(slurp(path("m.json")), "old json");
  EXPECT_EQ(slurp(path("o.bin")), "old output");
  EXPECT_EQ(files(), (std::set<std::string>{"m.json", "o.bin"}));

  OutputSet set({{"--json", path("m.json"), true}, {"--output", path("o.bin")}}, {});
  set.stage_text("--json", "new json");
  set.stage("--output", [](const std::string& tmp) { std::ofstream(tmp) << "new output"; });
  EXPECT_EQ(slurp(path("m.json")), "old json");  // nothing is renamed before commit
  set.commit();
  EXPECT_EQ(slurp(path("m.json")), "new json");
  EXPECT_EQ(slurp(path("o.bin")), "new output");
  EXPECT_EQ(files(), (std::set<std::string>{"m.json", "o.bin"}));
}

TEST_F(OutputSetTest, TemporariesAreUniqueBesideTheirTarget) {
  std::string first, second;
  OutputSet a({{"--json", path("m.json"), true}}, {}), b({{"--json", path("m.json"), true}}, {});
  a.stage("--json", [&](const std::string& tmp) {
    first = tmp;
    b.stage("--json", [&](const std::string& tmp2) { second = tmp2; });  // a second run writing the same target
  });
  EXPECT_NE(first, second);
  EXPECT_EQ(fs::path(first).parent_path(), dir_);
  EXPECT_EQ(fs::path(second).parent_path(), dir_);
  EXPECT_TRUE(fs::exists(first) && fs::exists(second));
  a.commit();
  b.commit();
  EXPECT_EQ(files(), (std::set<std::string>{"m.json"}));
}

// The child stages an output, registers a second temporary as write_safetensors does for its own, and is killed
// in the middle of writing: both temporaries are gone, the target is untouched.
void die_while_writing(const std::string& target, const std::string& inner, int sig) {
  OutputSet::install_signal_cleanup();
  OutputSet set({{"--output", target}}, {});
  set.stage("--output", [&](const std::string& tmp) {
    std::ofstream(tmp) << "half";
    std::ofstream(inner) << "half";
    (void)register_temp_file(inner);
    ::raise(sig);
  });
}

TEST_F(OutputSetTest, SigintAndSigtermRemoveTheTemporaries) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::ofstream(path("o.bin")) << "previous";
  for (int sig : {SIGINT, SIGTERM}) {
    EXPECT_EXIT(die_while_writing(path("o.bin"), path(".o.bin.tmp.inner"), sig), ::testing::KilledBySignal(sig),
                "");
    EXPECT_EQ(files(), (std::set<std::string>{"o.bin"})) << "signal " << sig;
    EXPECT_EQ(slurp(path("o.bin")), "previous");
  }
}

TEST_F(OutputSetTest, ADeviceIsNeverAnOutput) {
  for (const char* dev : {"/dev/null", "/dev/zero"}) {
    try {
      OutputSet set({{"--save-weights", dev}}, {});
      FAIL() << dev << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("--save-weights ") + dev + ": is a device"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace te::cli
