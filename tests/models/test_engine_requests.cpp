// Requests a serving process must survive: every malformed HostTensor is a teengine::Error with is_input_error(),
// raised before anything is allocated for it, and the Engine answers the next good request with the same bytes.
#include <gtest/gtest.h>
#include <teengine/teengine.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace {

std::string model(const std::string& mode) {
  return "name: requests\nmodel:\n  hidden: 128\n  layers: 1\n  dtype: bf16\n  block:\n"
         "    - [ {layernorm_mlp: {name: mlp, ffn: 256, activation: gelu}} ]\n"
         "parallel: {tp: 2, sequence_parallel: true, comm: local}\nprecision: {recipe: fp8_block}\n"
         "run: {mode: " +
         mode + ", device: cpu, tokens: 64, seed: 5, optimizer: {type: sgd, lr: 0.1}}\n";
}

teengine::HostTensor tensor(std::vector<int64_t> shape, std::string dtype, size_t bytes) {
  teengine::HostTensor h;
  h.shape = std::move(shape);
  h.dtype = std::move(dtype);
  h.bytes.resize(bytes);
  return h;
}

teengine::HostTensor good(int64_t tokens) {
  std::vector<float> v(static_cast<size_t>(tokens) * 128);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.11f * static_cast<float>(i));
  return teengine::HostTensor::from_floats({tokens, 128}, v);
}

struct BadRequest {
  const char* name;
  teengine::HostTensor input;
  const char* expect;  // a substring of the message
};

std::vector<BadRequest> bad_requests() {
  return {
      {"ShapeWrapsInt64", tensor({int64_t{1} << 62, 128}, "f32", 0), "2^56"},
      {"ShapeProductWraps", tensor({int64_t{1} << 40, int64_t{1} << 40}, "bf16", 0), "2^56"},
      {"HugeButNoBytes", tensor({int64_t{1} << 40, 128}, "f32", 0), "bytes"},
      {"NegativeTokens", tensor({-4, 128}, "f32", 0), "negative"},
      {"ZeroTokens", tensor({0, 128}, "f32", 0), "no tokens"},
      {"BytesShort", tensor({64, 128}, "f32", 100), "holds 100 bytes"},
      {"WrongDType", tensor({64, 128}, "int8", 64 * 128), "dtype 'int8'"},
      {"ThreeDims", tensor({2, 32, 128}, "f32", 2 * 32 * 128 * 4), "[tokens, 128]"},
      {"WrongHidden", tensor({64, 100}, "f32", 64 * 100 * 4), "[tokens, 128]"},
      {"TokensNotDivisibleByTp", tensor({63, 128}, "f32", 63 * 128 * 4), "not divisible by tp 2"},
  };
}

TEST(EngineRequests, EveryBadRequestIsAnInputErrorAndTheEngineStaysUsable) {
  auto e = teengine::Engine::from_yaml_string(model("infer"));
  const auto before = e.forward(good(64)).bytes;
  for (const BadRequest& r : bad_requests()) {
    try {
      (void)e.forward(r.input);
      ADD_FAILURE() << r.name << ": accepted";
    } catch (const teengine::Error& err) {
      EXPECT_TRUE(err.is_input_error()) << r.name << ": " << err.what();
      EXPECT_NE(std::string(err.what()).find(r.expect), std::string::npos) << r.name << ": " << err.what();
    }
    try {
      (void)e.stage(r.input);
      ADD_FAILURE() << r.name << ": staged";
    } catch (const teengine::Error& err) {
      EXPECT_TRUE(err.is_input_error()) << r.name << " (stage): " << err.what();
    }
  }
  EXPECT_EQ(e.forward(good(64)).bytes, before);
}

template <typename F>
void expect_input_error(const char* what, F&& f) {
  try {
    f();
    ADD_FAILURE() << what << ": accepted";
  } catch (const teengine::Error& err) {
    EXPECT_TRUE(err.is_input_error()) << what << ": " << err.what();
  }
}

// A {2^62, 256} request: counting its elements, filling it and running it are input errors, not a wrapped product
// (HostTensor::numel() multiplied unchecked).
TEST(EngineRequests, AnOverflowingShapeIsAnInputErrorWhereverItIsCounted) {
  auto e = teengine::Engine::from_yaml_string(model("infer"));
  const std::vector<int64_t> shape = {int64_t{1} << 62, 256};
  expect_input_error("numel", [&] { (void)tensor(shape, "f32", 0).numel(); });
  expect_input_error("numel of a negative shape", [&] { (void)tensor({0, -3}, "f32", 0).numel(); });
  expect_input_error("from_floats", [&] { (void)teengine::HostTensor::from_floats(shape, {}); });
  expect_input_error("forward", [&] { (void)e.forward(tensor(shape, "f32", 0)); });
  expect_input_error("stage", [&] { (void)e.stage(tensor(shape, "bf16", 0)); });
  EXPECT_EQ(tensor({64, 128}, "f32", 0).numel(), 64 * 128);
  EXPECT_EQ(e.forward(good(64)).shape, (std::vector<int64_t>{64, 128}));
}

TEST(EngineRequests, TrainingRequestsThatCannotRunAreInputErrors) {
  auto infer = teengine::Engine::from_yaml_string(model("infer"));
  try {
    infer.train_step(good(64), good(64));
    FAIL() << "train_step on an inference engine ran";
  } catch (const teengine::Error& err) {
    EXPECT_TRUE(err.is_input_error()) << err.what();
    EXPECT_NE(std::string(err.what()).find("run.mode"), std::string::npos) << err.what();
  }
  auto train = teengine::Engine::from_yaml_string(model("train"));
  try {
    train.train_step(good(64), good(32));
    FAIL() << "a target of another shape was accepted";
  } catch (const teengine::Error& err) {
    EXPECT_TRUE(err.is_input_error()) << err.what();
  }
  EXPECT_TRUE(std::isfinite(train.train_step(good(64), good(64))));
}

// A model that cannot fit is refused from the spec before anything is allocated, naming the fields to change: a
// hidden of 2^20 (terabytes of weights) and 100,000 layers used to allocate or initialise for minutes first.
TEST(EngineRequests, AModelThatCannotFitIsRefusedBeforeAllocation) {
  const std::vector<std::vector<std::string>> cases = {
      {"model.hidden=1048576", "model.block[0][0].layernorm_mlp.ffn=1048576"},  // 4 TiB of weights
      {"model.layers=100000", "model.hidden=4096", "model.block[0][0].layernorm_mlp.ffn=16384"}};
  for (const auto& sets : cases) {
    try {
      (void)teengine::Engine::from_yaml_string(model("infer"), sets);
      FAIL() << sets[0] << " was accepted";
    } catch (const teengine::Error& err) {
      const std::string what = err.what();
      EXPECT_TRUE(err.is_input_error()) << what;
      EXPECT_NE(what.find("the model needs at least"), std::string::npos) << what;
      for (const char* field : {"model.hidden", "model.layers", "run.tokens", "parallel.tp"})
        EXPECT_NE(what.find(field), std::string::npos) << field << " in: " << what;
    }
  }
}
}  // namespace
