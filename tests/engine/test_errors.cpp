// Errors carry what, where and what to do; logging honours levels and log-once.
#include <gtest/gtest.h>

#include "engine/device.h"
#include "engine/error.h"
#include "engine/log.h"

namespace te {
namespace {

TEST(Errors, CarryMessageCallLocationAndHint) {
  try {
    int x = 3;
    TE_CHECK_HINT(x == 4, "x is " << x, "set x to 4");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "x is 3");
    EXPECT_EQ(e.call(), "x == 4");
    EXPECT_EQ(e.hint(), "set x to 4");
    EXPECT_NE(e.file().find("test_errors.cpp"), std::string::npos);
    EXPECT_GT(e.line(), 0);
    EXPECT_EQ(e.device(), current_device_name());  // "cpu" here, "cuda:0" on a GPU machine
    std::string w = e.what();
    EXPECT_NE(w.find("hint: set x to 4"), std::string::npos);
    EXPECT_NE(w.find("test_errors.cpp:"), std::string::npos);
  }
}

TEST(Errors, InputErrorIsAnError) {
  EXPECT_THROW(TE_INPUT_ERROR("bad field", "fix it"), InputError);
  EXPECT_THROW(TE_INPUT_ERROR("bad field", "fix it"), Error);
}

void log_twice() {
  for (int i = 0; i < 2; ++i) TE_LOG_ONCE(warn, "once " << i);
}

TEST(Logging, LevelsAndOnce) {
  std::vector<std::string> lines;
  auto old = set_log_sink([&](LogLevel, const std::string& m) { lines.push_back(m); });
  LogLevel old_level = log_level();
  set_log_level(LogLevel::warn);
  TE_LOG(info, "hidden");
  TE_LOG(warn, "shown");
  log_twice();
  log_twice();
  set_log_level(old_level);
  set_log_sink(old);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "shown");
  EXPECT_EQ(lines[1], "once 0");
}

}  // namespace
}  // namespace te
