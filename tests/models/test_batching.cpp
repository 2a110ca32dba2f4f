// Dynamic batching (Engine::set_batching) on the CPU (pinned: on a GPU the GEMM kernel is chosen by the token count,
// so a batch may differ from a lone request in the last bits, as the README says): for the recipes that quantize per
// token (none, fp8_block, mxfp8) every request batched with others gets the bytes it gets alone, whatever the batch
// (the CPU GEMM is row-independent: ops/gemm/row_gemm.h); per-tensor recipes are refused unless asked for, and then do
// change outputs; the batcher reports its batches and drains when switched off.
#include <gtest/gtest.h>
#include <teengine/teengine.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include "common/model_path.h"

namespace {
using teengine::HostTensor;

std::string batching_tiny() { return te::test::model_path("tiny.yaml"); }

HostTensor batching_request(int64_t tokens, int64_t hidden, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(tokens * hidden));
  for (float& x : v) x = d(gen);
  return HostTensor::from_floats({tokens, hidden}, v);
}

// Rows [begin, begin + n) of a [t, h] tensor.
HostTensor batching_rows(const HostTensor& x, int64_t begin, int64_t n) {
  const size_t row = x.bytes.size() / static_cast<size_t>(x.shape[0]);
  HostTensor out{{n, x.shape[1]}, x.dtype, {}};
  out.bytes.assign(x.bytes.begin() + static_cast<std::ptrdiff_t>(row * begin),
                   x.bytes.begin() + static_cast<std::ptrdiff_t>(row * (begin + n)));
  return out;
}

// Concatenated along the tokens, with zero rows up to a multiple of `multiple`.
HostTensor batching_concat(const std::vector<HostTensor>& parts, int64_t multiple) {
  HostTensor out{{0, parts[0].shape[1]}, parts[0].dtype, {}};
  for (const HostTensor& p : parts) {
    out.shape[0] += p.shape[0];
    out.bytes.insert(out.bytes.end(), p.bytes.begin(), p.bytes.end());
  }
  const int64_t pad = (multiple - out.shape[0] % multiple) % multiple;
  out.bytes.resize(out.bytes.size() / static_cast<size_t>(out.shape[0]) * static_cast<size_t>(out.shape[0] + pad), 0);
  out.shape[0] += pad;
  return out;
}

// What a request gets alone: its own forward, padded to the token multiple (tp 2 with sequence parallelism).
HostTensor batching_alone(teengine::Engine& e, const HostTensor& x) {
  return batching_rows(e.forward(batching_concat({x}, e.token_multiple())), 0, x.shape[0]);
}

const int64_t kBatchingTokens[] = {1, 3, 4, 7, 16, 2, 33, 5, 64, 9, 12, 1};

class BatchingExact : public ::testing::TestWithParam<const char*> {};

// One forward of many requests concatenated (what the batcher runs), sliced back: each slice equals the request's
// forward alone, byte for byte, in every order.
TEST_P(BatchingExact, ConcatenatedForwardEqualsEachAlone) {
  auto e = teengine::Engine::from_yaml(
      batching_tiny(), {"run.device=cpu", "run.mode=infer", std::string("precision.recipe=") + GetParam()});
  ASSERT_TRUE(e.tokens_independent());
  std::vector<HostTensor> reqs, want;
  for (size_t i = 0; i < std::size(kBatchingTokens); ++i) {
    reqs.push_back(batching_request(kBatchingTokens[i], e.hidden(), static_cast<uint32_t>(10 + i)));
    want.push_back(batching_alone(e, reqs.back()));
  }
  for (bool reversed : {false, true}) {
    std::vector<HostTensor> order = reqs, expect = want;
    if (reversed) {
      std::reverse(order.begin(), order.end());
      std::reverse(expect.begin(), expect.end());
    }
    const HostTensor y = e.forward(batching_concat(order, e.token_multiple()));
    int64_t at = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      const HostTensor got = batching_rows(y, at, order[i].shape[0]);
      at += order[i].shape[0];
      EXPECT_EQ(got.bytes, expect[i].bytes) << "request " << i << " (" << order[i].shape[0] << " tokens)"
                                            << (reversed ? ", reversed" : "");
    }
  }
}

// The engine's batcher under concurrent callers: every reply is the request's bytes alone, and requests did share
// forwards.
TEST_P(BatchingExact, ConcurrentCallersGetTheirBytesAlone) {
  auto e = teengine::Engine::from_yaml(
      batching_tiny(), {"run.device=cpu", "run.mode=infer", std::string("precision.recipe=") + GetParam()});
  const int n = 24;
  std::vector<HostTensor> reqs, want;
  for (int i = 0; i < n; ++i) {
    reqs.push_back(batching_request(kBatchingTokens[i % std::size(kBatchingTokens)], e.hidden(), static_cast<uint32_t>(100 + i)));
    want.push_back(batching_alone(e, reqs.back()));
  }
  teengine::BatchingOptions b;
  b.enabled = true;
  b.max_wait_us = 20000;  // long enough for the threads to arrive together
  e.set_batching(b);
  std::vector<HostTensor> got(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back([&, i] { got[static_cast<size_t>(i)] = e.forward(reqs[static_cast<size_t>(i)]); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(got[static_cast<size_t>(i)].shape, want[static_cast<size_t>(i)].shape) << i;
    EXPECT_EQ(got[static_cast<size_t>(i)].bytes, want[static_cast<size_t>(i)].bytes) << "request " << i;
  }
  const auto m = nlohmann::json::parse(e.metrics_json())["batching"];
  EXPECT_TRUE(m["enabled"].get<bool>());
  EXPECT_EQ(m["requests"].get<int>(), n);
  EXPECT_LT(m["batches"].get<int>(), n) << "no two requests shared a forward";
  EXPECT_EQ(m["requests_per_batch"]["count"].get<int>(), m["batches"].get<int>());
}

INSTANTIATE_TEST_SUITE_P(PerTokenRecipes, BatchingExact, ::testing::Values("none", "fp8_block", "mxfp8"),
                         [](const auto& info) { return std::string(info.param); });

// Per-tensor scaling: the batch's amax sets every request's scale. Refused unless asked for; when asked for, some
// request's output does change.
TEST(Batching, PerTensorRecipeIsRefusedUnlessAllowed) {
  auto e = teengine::Engine::from_yaml(batching_tiny(),
                                       {"run.device=cpu", "run.mode=infer", "precision.recipe=fp8_current"});
  EXPECT_FALSE(e.tokens_independent());
  teengine::BatchingOptions b;
  b.enabled = true;
  try {
    e.set_batching(b);
    FAIL() << "batching fp8_current was accepted";
  } catch (const teengine::Error& err) {
    EXPECT_TRUE(err.is_input_error());
    EXPECT_NE(std::string(err.what()).find("allow_per_tensor_scaling"), std::string::npos) << err.what();
  }
  EXPECT_FALSE(e.batching().enabled);
  std::vector<HostTensor> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(batching_request(4 * (i + 1), e.hidden(), static_cast<uint32_t>(40 + i)));
  reqs[3] = HostTensor::from_floats({16, e.hidden()}, std::vector<float>(static_cast<size_t>(16 * e.hidden()), 30.f));
  const HostTensor y = e.forward(batching_concat(reqs, e.token_multiple()));
  int changed = 0;
  int64_t at = 0;
  for (const HostTensor& r : reqs) {
    changed += batching_rows(y, at, r.shape[0]).bytes != e.forward(r).bytes;
    at += r.shape[0];
  }
  EXPECT_GT(changed, 0) << "a batch with a large-amax request left the others' outputs unchanged";
  b.allow_per_tensor_scaling = true;
  e.set_batching(b);
  EXPECT_TRUE(e.batching().enabled);
  // Under sequence parallelism nothing may be padded for a per-tensor recipe: an odd request is refused.
  EXPECT_THROW(e.forward(batching_request(3, e.hidden(), 1)), teengine::Error);
}

// Switching batching off sends the queued requests at once (no waiting out max_wait_us) and forward runs alone again.
TEST(Batching, SwitchingOffRunsTheQueue) {
  auto e = teengine::Engine::from_yaml(batching_tiny(), {"run.device=cpu", "run.mode=infer", "precision.recipe=none"});
  teengine::BatchingOptions b;
  b.enabled = true;
  b.max_wait_us = 60'000'000;
  e.set_batching(b);
  std::vector<std::thread> threads;
  std::vector<HostTensor> got(4);
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] { got[static_cast<size_t>(i)] = e.forward(batching_request(2, e.hidden(), static_cast<uint32_t>(i))); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  e.set_batching({});
  for (auto& t : threads) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  for (const HostTensor& y : got) EXPECT_EQ(y.shape, (std::vector<int64_t>{2, e.hidden()}));
  EXPECT_FALSE(nlohmann::json::parse(e.metrics_json())["batching"]["enabled"].get<bool>());
  EXPECT_THROW(e.forward(batching_request(3, e.hidden(), 9)), teengine::Error);  // unbatched: 3 is not a multiple of tp
}

// A bad request is refused on its own (input Error) and never fails the batch it would have joined.
TEST(Batching, BadRequestFailsAlone) {
  auto e = teengine::Engine::from_yaml(batching_tiny(), {"run.device=cpu", "run.mode=infer"});
  teengine::BatchingOptions b;
  b.enabled = true;
  e.set_batching(b);
  HostTensor bad = batching_request(4, e.hidden(), 3);
  bad.bytes.resize(10);
  EXPECT_THROW(e.forward(bad), teengine::Error);
  EXPECT_THROW(e.forward(HostTensor::from_floats({2, 3}, std::vector<float>(6))), teengine::Error);
  EXPECT_EQ(e.forward(batching_request(3, e.hidden(), 4)).shape, (std::vector<int64_t>{3, e.hidden()}));
}

}  // namespace
