// Bounded engine metrics (models/step_history.h, Engine::metrics_json) and the public log sink.
#include <gtest/gtest.h>
#include <teengine/teengine.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "engine/log.h"
#include "models/step_history.h"
#include "common/model_path.h"

namespace te {
namespace {

// Past the window the lists keep the newest kWindow steps; counters and the histogram keep counting every step.
TEST(StepHistory, ListsAreBoundedAndCountersAreNot) {
  StepHistory h;
  const int n = static_cast<int>(StepHistory::kWindow) + 500;
  for (int i = 0; i < n; ++i) {
    h.record(0.001 * (i + 1), 0.0005, 16);
    h.record_train(static_cast<float>(i), 0.5);
  }
  EXPECT_EQ(h.steps(), n);
  EXPECT_EQ(h.tokens(), 16 * n);
  EXPECT_EQ(h.wall_ms().size(), StepHistory::kWindow);
  EXPECT_EQ(h.device_ms().size(), StepHistory::kWindow);
  EXPECT_EQ(h.losses().size(), StepHistory::kWindow);
  EXPECT_DOUBLE_EQ(h.wall_ms().back(), 0.001 * n);
  EXPECT_DOUBLE_EQ(h.last_ms(), 0.001 * n);
  EXPECT_EQ(h.losses().front(), static_cast<float>(n - StepHistory::kWindow));
  const auto j = h.histogram_json();
  int64_t total = 0;
  for (const auto& c : j["counts"]) total += c.get<int64_t>();
  EXPECT_EQ(total, n);
  EXPECT_EQ(j["le_ms"].size(), static_cast<size_t>(StepHistory::kBuckets));
  EXPECT_TRUE(j["le_ms"].back().is_null());
}

// Bucket i holds (bound(i-1), bound(i)]; beyond the last bound goes to the +inf bucket.
TEST(StepHistory, HistogramBuckets) {
  StepHistory h;
  h.record(0.01, 0, 1);   // exactly the first bound: bucket 0
  h.record(0.015, 0, 1);  // bucket 1 (0.01, 0.02]
  h.record(1.0, 0, 1);    // (0.64, 1.28]: bucket 7
  h.record(1e9, 0, 1);    // +inf
  const auto c = h.histogram_json()["counts"];
  EXPECT_EQ(c[0].get<int>(), 1);
  EXPECT_EQ(c[1].get<int>(), 1);
  EXPECT_EQ(c[7].get<int>(), 1);
  EXPECT_EQ(c[StepHistory::kBuckets - 1].get<int>(), 1);
}

TEST(EngineMetrics, HistogramAndTotalsInMetricsJson) {
  auto e = teengine::Engine::from_yaml(te::test::model_path("tiny.yaml"),
                                       {"run.mode=infer", "precision.recipe=none", "parallel.tp=1"});
  const auto x = teengine::HostTensor::from_floats({8, 256}, std::vector<float>(8 * 256, 0.5f));
  for (int i = 0; i < 3; ++i) e.forward(x);
  const auto j = nlohmann::json::parse(e.metrics_json());
  EXPECT_EQ(j["steps"].get<int>(), 3);
  EXPECT_EQ(j["step_ms"].size(), 3u);
  EXPECT_EQ(j["tokens_total"].get<int>(), 24);
  EXPECT_EQ(j["step_window"].get<int>(), static_cast<int>(StepHistory::kWindow));
  EXPECT_EQ(j["step_ms_histogram"]["count"].get<int>(), 3);
  EXPECT_TRUE(e.tokens_independent());
  EXPECT_EQ(e.recipe(), "none");
  EXPECT_EQ(e.token_multiple(), 1);
}

// teengine::set_log_sink receives the engine's lines (level and text) and gives back the previous sink.
TEST(PublicLogSink, ReceivesLinesAndRestores) {
  std::vector<std::pair<teengine::LogLevel, std::string>> got;
  auto old = teengine::set_log_sink([&](teengine::LogLevel l, const std::string& m) { got.emplace_back(l, m); });
  EXPECT_FALSE(old);
  te::log_message(te::LogLevel::warn, "hello sink");
  auto mine = teengine::set_log_sink(nullptr);
  EXPECT_TRUE(mine);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, teengine::LogLevel::warn);
  EXPECT_EQ(got[0].second, "hello sink");
}

}  // namespace
}  // namespace te
