// The benchmarks' timing helpers (tools/teengine/bench_util.h): alternating samples really alternate, and each
// function's timing is its own.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tools/teengine/bench_util.h"

namespace te {
namespace {

TEST(BenchTiming, AlternatingSamplesInterleaveTheFunctions) {
  std::string calls;
  const Stream cpu;
  const std::vector<bench::Timing> t =
      bench::time_alternating({[&] { calls += 'a'; }, [&] { calls += 'b'; }}, cpu, /*warmup=*/1, /*repeats=*/4);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(calls, "ab" "abababab");  // each warmed up once, then four rounds of one sample each
  EXPECT_EQ(t[0].repeats, 4);
  EXPECT_EQ(t[1].repeats, 4);
}

TEST(BenchTiming, EachFunctionKeepsItsOwnTimes) {
  const Stream cpu;
  const std::vector<bench::Timing> t = bench::time_alternating(
      {[] { std::this_thread::sleep_for(std::chrono::milliseconds(3)); }, [] {}}, cpu, 0, 5);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_GE(t[0].min_ms, 3.0);  // a sleep lasts at least what it asks for
  EXPECT_LT(t[1].median_ms, t[0].min_ms);
  EXPECT_LE(t[0].min_ms, t[0].median_ms);
  EXPECT_LE(t[0].median_ms, t[0].max_ms);
}

}  // namespace
}  // namespace te
