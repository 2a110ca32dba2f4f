// `teengine launch`: every rank gets its environment, the first non-zero exit code is returned, and a failed rank
// stops the others instead of leaving them to their timeout.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

std::string bin() {  // set by meson test (tests/comm/meson.build)
  const char* b = std::getenv("TEENGINE_BIN");
  return b && ::access(b, X_OK) == 0 ? b : "";
}

int run(const std::string& cmd, std::string* out = nullptr) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[256];
  std::string s;
  while (std::fgets(buf, sizeof(buf), p)) s += buf;
  int st = ::pclose(p);
  if (out) *out = s;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(Launch, SetsTheRendezvousEnvironment) {
  if (bin().empty()) GTEST_SKIP() << "TEENGINE_BIN is not set or not built";
  std::string out;
  const int rc = run(bin() + " launch -n 3 --master-port 29611 -- sh -c "
                             "'echo R=$RANK L=$LOCAL_RANK W=$WORLD_SIZE A=$MASTER_ADDR P=$MASTER_PORT N=$NCCL_NVLS_ENABLE'",
                     &out);
  EXPECT_EQ(rc, 0) << out;
  for (int r = 0; r < 3; ++r) {
    const std::string line = "R=" + std::to_string(r) + " L=" + std::to_string(r) + " W=3 A=127.0.0.1 P=29611 N=0";
    EXPECT_NE(out.find(line), std::string::npos) << out;
  }
}

TEST(Launch, ReturnsTheFirstFailureAndStopsTheOthers) {
  if (bin().empty()) GTEST_SKIP() << "TEENGINE_BIN is not set or not built";
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = run(bin() + " launch -n 3 -- sh -c 'if [ $RANK = 1 ]; then exit 7; fi; exec sleep 30'");
  EXPECT_EQ(rc, 7);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(run(bin() + " launch -n 2 -- true"), 0);
  EXPECT_EQ(run(bin() + " launch -n 2 -- /nonexistent/teengine-binary 2>/dev/null"), 127);
}

}  // namespace
