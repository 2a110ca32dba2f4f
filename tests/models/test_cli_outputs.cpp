// `teengine run`'s outputs as one set: every path checked before the run (no device, FIFO, directory or symlink is
// replaced, no input is overwritten, no two outputs collide), `--json -` goes to stdout, and no temporary file is
// left behind, after success or failure.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli_test.h"

namespace te {
namespace {
namespace fs = std::filesystem;

class OutputsCli : public CliTest {
 protected:
  std::string fast() const { return " --set run.tokens=64 --set run.device=cpu --set run.steps=1 "; }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Files in the test directory other than stdout/stderr captures: temporary files must not survive.
  std::vector<std::string> leftovers() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (n != "stdout" && n != "stderr") names.push_back(n);
    }
    return names;
  }
};

TEST_F(OutputsCli, AFifoIsRefusedAndStaysAFifo) {
  const std::string fifo = path("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const char* flag : {"--output", "--json", "--save-weights"}) {
    Result r = run("run " + model() + fast() + flag + " " + fifo);
    EXPECT_EQ(r.code, 2) << flag << r.err;
    EXPECT_NE(r.err.find(std::string(flag) + " " + fifo + ": is a FIFO"), std::string::npos) << r.err;
    struct stat st {};
    ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode)) << flag;
  }
}

// Inputs that would block or never end (a FIFO as the spec, --input or weights) are input errors, not hangs.
TEST_F(OutputsCli, AFifoAsAnInputIsAnErrorNotAHang) {
  const std::string fifo = path("in.pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& args : {"run " + fifo, "run " + model() + fast() + "--input " + fifo,
                                  "run " + model() + fast() + "--set weights=" + fifo, "inspect " + fifo}) {
    Result r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << args << "\n" << r.err;
  }
}

// /dev/zero never ends: as the spec, --input or weights it is refused by kind, as is a spec file far larger than
// any spec (weights passed by mistake), before anything is read.
TEST_F(OutputsCli, DevicesAndHugeFilesAsInputsAreRefusedBeforeTheyAreRead) {
  for (const std::string& args : {std::string("run /dev/zero"), "run " + model() + fast() + "--input /dev/zero",
                                  "run " + model() + fast() + "--set weights=/dev/zero",
                                  std::string("inspect /dev/zero")}) {
    Result r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("/dev/zero: is not a regular file"), std::string::npos) << args << "\n" << r.err;
  }
  const std::string big = path("big.yaml");
  std::ofstream(big) << "model:\n";
  fs::resize_file(big, 32u << 20);  // 32 MiB, sparse
  Result r = run("run " + big);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("is too large for a model spec"), std::string::npos) << r.err;
}

TEST_F(OutputsCli, TheSpecAndTheWeightsAreNeverOverwritten) {
  const std::string spec = path("m.yaml");
  fs::copy_file(model(), spec);
  const std::string before = slurp(spec);
  Result r = run("run " + spec + fast() + "--output " + spec);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("is an input of this run"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(spec), before);
  const std::string w = path("w.safetensors");
  ASSERT_EQ(run("run " + model() + fast() + "--save-weights " + w).code, 0);
  const std::string weights = slurp(w);
  r = run("run " + model() + fast() + "--set weights=" + w + " --output " + w);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(slurp(w), weights);
}

TEST_F(OutputsCli, TwoOutputsAtOnePathAreRefusedBeforeTheRun) {
  const std::string p = path("x.out");
  Result r = run("run " + model() + fast() + "--output " + p + " --json " + p);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--json " + p + ": --output writes the same file"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("ms/step"), std::string::npos) << "the run started: " << r.out;
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(OutputsCli, ADirectoryOrASymlinkIsRefusedAndNothingIsLeftBehind) {
  fs::create_directory(dir_ / "d");
  Result r = run("run " + model() + fast() + "--json " + path("d"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
  const std::string target = path("real.json"), link = path("link.json");
  std::ofstream(target) << "{}";
  fs::create_symlink(target, link);
  r = run("run " + model() + fast() + "--json " + link);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("is a symbolic link"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(slurp(target), "{}");
  std::vector<std::string> left = leftovers();
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"d", "link.json", "real.json"}));
}

TEST_F(OutputsCli, JsonToStdoutAndEveryFileComplete) {
  const std::string out = path("o.safetensors"), w = path("w.safetensors");
  Result r = run("run " + model() + fast() + "--json - --output " + out + " --save-weights " + w);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"step_ms\""), std::string::npos) << r.out;
  EXPECT_GT(fs::file_size(out), 8u);
  EXPECT_GT(fs::file_size(w), 8u);
  EXPECT_EQ(fs::status(out).permissions() & fs::perms::others_read, fs::perms::others_read);  // not mkstemp's 0600
  std::vector<std::string> left = leftovers();
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"o.safetensors", "w.safetensors"}));
  EXPECT_EQ(run("run " + model() + fast() + "--output -").code, 2);  // only --json takes stdout
}

}  // namespace
}  // namespace te
